package controllers

import (
	"context"
	"crypto/tls"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// DefaultEtcdWatchInterval is how often every etcd server the tenants use
// is looked at between passes.
const DefaultEtcdWatchInterval = 10 * time.Second

const (
	// etcdWatchConcurrency bounds the checks under way at once.
	etcdWatchConcurrency = 4
	// etcdChecksPerSecond is the watch's budget: a fleet with more
	// distinct etcd servers than the interval lets it check at this rate
	// has them looked at less often, at the same cost.
	etcdChecksPerSecond = 100
	// etcdConnectionsKept bounds the connections the watch keeps open, the
	// least recently used closed first.
	etcdConnectionsKept = 256
)

// etcdWatch looks at the tenants' etcd servers between passes. A converged
// tenant has no pass, and an outage that changes nothing else the operator
// watches goes unseen without it: with an override etcd (events) down, the
// apiservers stay ready, so no pod or Deployment event comes. A tenant is
// brought back only when what the watch finds differs from what its last
// pass saw, so the steady state still costs no pass and no API request.
//
// Its cost does not grow with the number of tenants: each etcd server is
// asked once per interval however many tenants use it (a server is one per
// address and client identity: tenants whose TLS material differs are
// looked at apart, so none learns anything through another's
// credentials), over a connection kept from one look to the next; the
// looks are spread over the interval, from a random start, and bounded by
// a budget per second.
type etcdWatch struct {
	probe    etcdProber
	interval time.Duration
	budget   rate.Limit
	events   chan event.TypedGenericEvent[*v1alpha1.ApiServerConfig]

	mu      sync.Mutex
	tenants map[types.NamespacedName]etcdTarget
	// rounds counts the completed looks at every server, for tests.
	rounds int
}

// etcdTarget is a tenant's etcd as its last pass saw it.
type etcdTarget struct {
	endpoints []string
	tls       *tls.Config
	// tlsID identifies the client identity the TLS configuration holds
	// ("" without TLS).
	tlsID string
	// unreachable is the endpoint that did not answer, "" when all did.
	unreachable string
}

// etcdServer is one server as the watch asks it: an address and a client
// identity.
type etcdServer struct {
	endpoint string
	tlsID    string
}

// etcdProber asks one etcd server for its status (tenantio.Connections,
// or checkProber).
type etcdProber interface {
	Probe(ctx context.Context, endpoint string, tlsConfig *tls.Config, tlsID string) error
	Close()
}

func newEtcdWatch(client tenantio.Etcd, interval time.Duration) *etcdWatch {
	var p etcdProber = checkProber{client}
	if v3, ok := client.(tenantio.EtcdV3); ok {
		p = tenantio.NewConnections(v3, etcdConnectionsKept)
	}
	return &etcdWatch{
		probe:    p,
		interval: interval,
		budget:   etcdChecksPerSecond,
		events:   make(chan event.TypedGenericEvent[*v1alpha1.ApiServerConfig], 64),
		tenants:  map[types.NamespacedName]etcdTarget{},
	}
}

// source brings back the tenants whose etcd changed.
func (w *etcdWatch) source() source.Source {
	return source.Channel(w.events, &handler.TypedEnqueueRequestForObject[*v1alpha1.ApiServerConfig]{})
}

// record is what a pass found: the watch compares its next look with it.
func (w *etcdWatch) record(key types.NamespacedName, endpoints []string, tlsConfig *tls.Config, tlsID, unreachable string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tenants[key] = etcdTarget{endpoints: slices.Clone(endpoints), tls: tlsConfig, tlsID: tlsID, unreachable: unreachable}
}

// forget stops looking at a tenant: deleted, or whose last pass did not
// look at its etcd (what it would compare with is stale).
func (w *etcdWatch) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.tenants, key)
}

// NeedLeaderElection: only the leader reconciles, so only it looks.
func (w *etcdWatch) NeedLeaderElection() bool { return true }

// Start looks at every server once per interval until ctx ends, the first
// time after a random part of the interval, so that operators started
// together do not look together.
func (w *etcdWatch) Start(ctx context.Context) error {
	defer w.probe.Close()
	everyInterval(ctx, w.interval, w.lookOnce)
	return nil
}

// everyInterval runs round once per interval until ctx ends, the first
// time after a random part of the interval, so that operators started
// together do not look together. A round that took longer than the
// interval (more than the budget allows in one) is followed by the next
// at once.
func everyInterval(ctx context.Context, interval time.Duration, round func(context.Context)) {
	next := time.Now().Add(rand.N(interval)) //nolint:gosec // G404: a jitter, not a secret
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		start := time.Now()
		round(ctx)
		next = start.Add(interval)
	}
}

// bringBack queues a pass of the tenant key on events; false when ctx
// ended first.
func bringBack(ctx context.Context, events chan<- event.TypedGenericEvent[*v1alpha1.ApiServerConfig], key types.NamespacedName) bool {
	select {
	case events <- event.TypedGenericEvent[*v1alpha1.ApiServerConfig]{Object: &v1alpha1.ApiServerConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
	}}:
		return true
	case <-ctx.Done():
		return false
	}
}

// lookOnce asks every server once, spread over the interval within the
// budget, and brings back the tenants whose etcd does not answer as their
// last pass found: an endpoint went away, came back, or another one is now
// the one that does not answer.
func (w *etcdWatch) lookOnce(ctx context.Context) {
	w.mu.Lock()
	targets := make(map[types.NamespacedName]etcdTarget, len(w.tenants))
	servers := map[etcdServer]*tls.Config{}
	for k, t := range w.tenants {
		targets[k] = t
		for _, ep := range t.endpoints {
			servers[etcdServer{ep, t.tlsID}] = t.tls
		}
	}
	w.mu.Unlock()

	// Evenly over the interval, or at the budget's rate if that is slower.
	spread := rate.Limit(float64(len(servers)) / w.interval.Seconds())
	limiter := rate.NewLimiter(min(max(spread, 1), w.budget), 1)
	var mu sync.Mutex
	failed := map[etcdServer]error{}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(etcdWatchConcurrency)
	for s, tlsConfig := range servers {
		if limiter.Wait(gctx) != nil {
			break
		}
		etcdWatchLooks.Inc()
		g.Go(func() error {
			if err := w.probe.Probe(gctx, s.endpoint, tlsConfig, s.tlsID); err != nil {
				mu.Lock()
				failed[s] = err
				mu.Unlock()
			}
			return nil
		})
	}
	_ = g.Wait() // the checks return no error
	if ctx.Err() != nil {
		return
	}

	for key, t := range targets {
		unreachable := ""
		for _, ep := range t.endpoints {
			if err, ok := failed[etcdServer{ep, t.tlsID}]; ok {
				unreachable = tenantio.UnreachableEndpoint(err)
				break
			}
		}
		if unreachable == t.unreachable {
			continue
		}
		w.mu.Lock()
		// Recorded as seen: the pass it brings records it again.
		if cur, ok := w.tenants[key]; ok {
			cur.unreachable = unreachable
			w.tenants[key] = cur
		}
		w.mu.Unlock()
		if !bringBack(ctx, w.events, key) {
			return
		}
	}
	w.mu.Lock()
	w.rounds++
	w.mu.Unlock()
	etcdWatchRounds.Inc()
}

// completedRounds is how many looks at every server have completed.
func (w *etcdWatch) completedRounds() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rounds
}

// checkProber asks through an tenantio.Etcd's Check, a connection per look.
type checkProber struct{ client tenantio.Etcd }

func (c checkProber) Probe(ctx context.Context, endpoint string, tlsConfig *tls.Config, _ string) error {
	return c.client.Check(ctx, []string{endpoint}, tlsConfig)
}

func (checkProber) Close() {}
