package controllers

import (
	"container/list"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
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

// etcdProber asks one etcd server for its status.
type etcdProber interface {
	probe(ctx context.Context, endpoint string, tlsConfig *tls.Config, tlsID string) error
	close()
}

func newEtcdWatch(client EtcdClient, interval time.Duration) *etcdWatch {
	var p etcdProber = checkProber{client}
	if v3, ok := client.(EtcdV3); ok {
		p = newEtcdConnections(v3, etcdConnectionsKept)
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
	defer w.probe.close()
	next := time.Now().Add(rand.N(w.interval)) //nolint:gosec // G404: a jitter, not a secret
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(next)):
		}
		start := time.Now()
		w.lookOnce(ctx)
		// A round that took longer than the interval (more servers than
		// the budget allows in one) is followed by the next at once.
		next = start.Add(w.interval)
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
			if err := w.probe.probe(gctx, s.endpoint, tlsConfig, s.tlsID); err != nil {
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
				unreachable = unreachableEndpoint(err)
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
		select {
		case w.events <- event.TypedGenericEvent[*v1alpha1.ApiServerConfig]{Object: &v1alpha1.ApiServerConfig{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		}}:
		case <-ctx.Done():
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

// tlsIdentity identifies the TLS material a tenant reaches etcd with.
func tlsIdentity(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write(p)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// checkProber asks through an EtcdClient's Check, a connection per look.
type checkProber struct{ client EtcdClient }

func (c checkProber) probe(ctx context.Context, endpoint string, tlsConfig *tls.Config, _ string) error {
	return c.client.Check(ctx, []string{endpoint}, tlsConfig)
}

func (checkProber) close() {}

// etcdConnections asks over connections kept from one look to the next,
// one per server, at most max of them (the least recently used closed
// first).
type etcdConnections struct {
	etcd EtcdV3
	max  int

	mu    sync.Mutex
	lru   *list.List // of *etcdConnection, most recently used first
	conns map[etcdServer]*list.Element
}

type etcdConnection struct {
	server etcdServer
	client *clientv3.Client
	// inUse counts the looks under way: a connection in use is not closed.
	inUse int
	// dropped is set once the connection is forgotten: the last look
	// that uses it closes it.
	dropped bool
}

func newEtcdConnections(etcd EtcdV3, kept int) *etcdConnections {
	return &etcdConnections{etcd: etcd, max: kept, lru: list.New(), conns: map[etcdServer]*list.Element{}}
}

func (c *etcdConnections) probe(ctx context.Context, endpoint string, tlsConfig *tls.Config, tlsID string) error {
	conn, err := c.acquire(etcdServer{endpoint, tlsID}, tlsConfig)
	if err != nil {
		return &etcdUnreachable{endpoint: endpoint, err: err}
	}
	reqCtx, cancel := context.WithTimeout(ctx, c.etcd.timeout())
	_, err = conn.client.Status(reqCtx, endpoint)
	cancel()
	// A connection that failed is not kept: the next look dials afresh
	// rather than wait out gRPC's growing reconnection backoff.
	c.release(conn, err != nil)
	if err != nil {
		return &etcdUnreachable{endpoint: endpoint, err: err}
	}
	return nil
}

func (c *etcdConnections) acquire(s etcdServer, tlsConfig *tls.Config) (*etcdConnection, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.conns[s]; ok {
		c.lru.MoveToFront(e)
		conn := e.Value.(*etcdConnection)
		conn.inUse++
		return conn, nil
	}
	cli, err := c.etcd.client([]string{s.endpoint}, tlsConfig)
	if err != nil {
		return nil, err
	}
	conn := &etcdConnection{server: s, client: cli, inUse: 1}
	c.conns[s] = c.lru.PushFront(conn)
	for e := c.lru.Back(); e != nil && c.lru.Len() > c.max; {
		prev := e.Prev()
		if old := e.Value.(*etcdConnection); old.inUse == 0 {
			old.dropped = true
			_ = old.client.Close()
			delete(c.conns, old.server)
			c.lru.Remove(e)
		}
		e = prev
	}
	return conn, nil
}

// release ends a look; drop closes the connection (once no other look
// uses it) and forgets it.
func (c *etcdConnections) release(conn *etcdConnection, drop bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	conn.inUse--
	if drop {
		conn.dropped = true
		if e, ok := c.conns[conn.server]; ok && e.Value.(*etcdConnection) == conn {
			delete(c.conns, conn.server)
			c.lru.Remove(e)
		}
	}
	if conn.dropped && conn.inUse == 0 {
		_ = conn.client.Close()
	}
}

// open is how many connections are kept.
func (c *etcdConnections) open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

func (c *etcdConnections) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := c.lru.Front(); e != nil; e = e.Next() {
		_ = e.Value.(*etcdConnection).client.Close()
	}
	c.lru.Init()
	c.conns = map[etcdServer]*list.Element{}
}
