package tenantwatch

import (
	"context"
	"crypto/tls"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"

	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantmemory"
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

// Etcd looks at the tenants' etcd servers between passes. A converged
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
type Etcd struct {
	*tenantmemory.Watch[etcdTarget]
	probe  EtcdProber
	budget rate.Limit
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

// EtcdProber asks one etcd server for its status (tenantio.Connections,
// or checkProber).
type EtcdProber interface {
	Probe(ctx context.Context, endpoint string, tlsConfig *tls.Config, tlsID string) error
	Close()
}

func NewEtcd(reach tenantio.Reach, interval time.Duration) *Etcd {
	var p EtcdProber = checkProber{reach}
	if v3, ok := reach.V3(); ok {
		p = tenantio.NewConnections(v3, etcdConnectionsKept)
	}
	return NewEtcdOf(p, interval, 0)
}

// NewEtcdOf is the watch asking through probe, which can bring back
// buffer tenants before they are taken (the default when zero).
func NewEtcdOf(probe EtcdProber, interval time.Duration, buffer int) *Etcd {
	w := &Etcd{probe: probe, budget: etcdChecksPerSecond}
	w.Watch = tenantmemory.NewWatch(tenantmemory.WatchOptions[etcdTarget]{
		Interval: interval, Look: w.look, Settle: settleEtcd, Buffer: buffer,
		AfterRound: etcdWatchRounds.Inc, Stop: probe.Close,
	})
	return w
}

// Record is what a pass found: the watch compares its next look with it.
func (w *Etcd) Record(key types.NamespacedName, endpoints []string, tlsConfig *tls.Config, tlsID, unreachable string) {
	w.Store(key, etcdTarget{endpoints: slices.Clone(endpoints), tls: tlsConfig, tlsID: tlsID, unreachable: unreachable})
}

// look asks every server once, spread over the interval within the
// budget, and returns the tenants whose etcd does not answer as their
// last pass found: an endpoint went away, came back, or another one is now
// the one that does not answer.
func (w *Etcd) look(ctx context.Context, targets map[types.NamespacedName]etcdTarget) map[types.NamespacedName]etcdTarget {
	servers := map[etcdServer]*tls.Config{}
	for _, t := range targets {
		for _, ep := range t.endpoints {
			servers[etcdServer{ep, t.tlsID}] = t.tls
		}
	}
	limiter := tenantmemory.Spread(len(servers), w.Interval(), w.budget)
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
	found := map[types.NamespacedName]etcdTarget{}
	for key, t := range targets {
		unreachable := ""
		for _, ep := range t.endpoints {
			if err, ok := failed[etcdServer{ep, t.tlsID}]; ok {
				unreachable = tenantio.UnreachableEndpoint(err)
				break
			}
		}
		if unreachable != t.unreachable {
			t.unreachable = unreachable
			found[key] = t
		}
	}
	return found
}

// settleEtcd brings back a tenant whose etcd answers otherwise than its
// pass found, recorded as seen: the pass it brings records it again.
func settleEtcd(_ types.NamespacedName, _, current, found etcdTarget) (etcdTarget, bool, bool) {
	current.unreachable = found.unreachable
	return current, true, true
}

// checkProber asks through an tenantio.Etcd's Check, a connection per look.
type checkProber struct{ client tenantio.Etcd }

func (c checkProber) Probe(ctx context.Context, endpoint string, tlsConfig *tls.Config, _ string) error {
	return c.client.Check(ctx, []string{endpoint}, tlsConfig)
}

func (checkProber) Close() {}
