package controllers

import (
	"context"
	"maps"
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
)

// DefaultKonnectivityWatchInterval is how often the konnectivity servers
// of every tenant with spec.konnectivity are looked at between passes.
const DefaultKonnectivityWatchInterval = 5 * time.Minute

const (
	// agentWatchConcurrency bounds the looks under way at once: a server
	// that does not answer holds a slot for tenantio's probe timeout.
	agentWatchConcurrency = 16
	// agentLooksPerSecond is the watch's budget (a look is one GET of a
	// server's /metrics, or one count of a tenant's nodes in etcd): a
	// fleet with more servers than the interval lets it look at at this
	// rate has them looked at less often, at the same cost.
	agentLooksPerSecond = 100
)

// agentWatch counts, between passes, the agents that hold a tunnel to the
// konnectivity server of each apiserver pod, and the tenant's nodes when
// a ready server holds none. Agents come and go with the tenant's nodes,
// which the operator does not watch: without it, status and the
// KonnectivityAgentsConnected condition would say what the last rollout
// saw. A tenant is brought back only when what the watch finds differs
// from what its last pass wrote (agentLook.same), so the steady state
// costs no pass and no API request: one GET per server per interval.
type agentWatch struct {
	probe    KonnectivityProber
	interval time.Duration
	budget   rate.Limit
	events   chan event.TypedGenericEvent[*v1alpha1.ApiServerConfig]

	mu      sync.Mutex
	tenants map[types.NamespacedName]agentTarget
	// rounds counts the completed looks at every server, for tests.
	rounds int
}

// agentTarget is a tenant's konnectivity servers as its last pass saw
// them, and what the last look at them found.
type agentTarget struct {
	servers []agentServer
	// countNodes counts the tenant's nodes in etcd; nil when its pass
	// could not reach etcd.
	countNodes func(context.Context) (int64, error)
	look       agentLook
}

func newAgentWatch(probe KonnectivityProber, interval time.Duration) *agentWatch {
	return &agentWatch{
		probe:    probe,
		interval: interval,
		budget:   agentLooksPerSecond,
		events:   make(chan event.TypedGenericEvent[*v1alpha1.ApiServerConfig], 64),
		tenants:  map[types.NamespacedName]agentTarget{},
	}
}

// source brings back the tenants whose agents changed.
func (w *agentWatch) source() source.Source {
	return source.Channel(w.events, &handler.TypedEnqueueRequestForObject[*v1alpha1.ApiServerConfig]{})
}

// recent is the watch's look at key's servers when it is of exactly
// servers and younger than the interval: a pass then writes it rather
// than looking again.
func (w *agentWatch) recent(key types.NamespacedName, servers []agentServer, now time.Time) (agentLook, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.tenants[key]
	if !ok || !slices.Equal(t.servers, servers) || now.Sub(t.look.at) >= w.interval {
		return agentLook{}, false
	}
	return t.look, true
}

// record is what a pass wrote: the watch compares its next look with it.
// It returns the pods of the previous record that are gone.
func (w *agentWatch) record(key types.NamespacedName, servers []agentServer, countNodes func(context.Context) (int64, error), look agentLook) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	gone := podsGone(w.tenants[key].servers, servers)
	w.tenants[key] = agentTarget{servers: slices.Clone(servers), countNodes: countNodes, look: look}
	return gone
}

// forget stops looking at a tenant and returns its pods' names.
func (w *agentWatch) forget(key types.NamespacedName) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	gone := podsGone(w.tenants[key].servers, nil)
	delete(w.tenants, key)
	return gone
}

// NeedLeaderElection: only the leader reconciles, so only it looks.
func (w *agentWatch) NeedLeaderElection() bool { return true }

// Start looks at every server once per interval until ctx ends, the first
// time after a random part of the interval.
func (w *agentWatch) Start(ctx context.Context) error {
	next := time.Now().Add(rand.N(w.interval)) //nolint:gosec // G404: a jitter, not a secret
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(next)):
		}
		start := time.Now()
		w.lookOnce(ctx)
		next = start.Add(w.interval)
	}
}

// lookOnce looks at every tenant's servers, spread over the interval
// within the budget, then counts the nodes of the tenants a ready server
// of which holds no agent, and brings back the tenants whose look differs
// from what their last pass wrote.
func (w *agentWatch) lookOnce(ctx context.Context) {
	w.mu.Lock()
	targets := maps.Clone(w.tenants)
	w.mu.Unlock()
	looks := 0
	for _, t := range targets {
		looks += len(t.servers)
	}
	spread := rate.Limit(float64(looks) / w.interval.Seconds())
	limiter := rate.NewLimiter(min(max(spread, 1), w.budget), 1)

	type found struct {
		key    types.NamespacedName
		pod    string
		agents *int32
	}
	var mu sync.Mutex
	agents := make(map[types.NamespacedName]map[string]*int32, len(targets))
	for key, t := range targets {
		agents[key] = make(map[string]*int32, len(t.servers))
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(agentWatchConcurrency)
	for key, t := range targets {
		for _, s := range t.servers {
			if limiter.Wait(gctx) != nil {
				break
			}
			g.Go(func() error {
				f := found{key: key, pod: s.pod}
				if n, err := w.probe(gctx, s.ip); err == nil {
					f.agents = &n
				}
				mu.Lock()
				agents[f.key][f.pod] = f.agents
				mu.Unlock()
				return nil
			})
		}
	}
	_ = g.Wait() // the looks return no error
	if ctx.Err() != nil {
		return
	}

	now := time.Now()
	nodes := map[types.NamespacedName]*int64{}
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(agentWatchConcurrency)
	for key, t := range targets {
		if t.countNodes == nil || !needsNodes(t.servers, agents[key]) {
			continue
		}
		if limiter.Wait(gctx) != nil {
			break
		}
		g.Go(func() error {
			if n, err := t.countNodes(gctx); err == nil {
				mu.Lock()
				nodes[key] = &n
				mu.Unlock()
			}
			return nil
		})
	}
	_ = g.Wait()
	if ctx.Err() != nil {
		return
	}

	for key, t := range targets {
		look := agentLook{agents: agents[key], nodes: nodes[key], at: now}
		changed := !look.same(t.servers, t.look)
		w.mu.Lock()
		// Recorded as seen: the pass it brings takes it as recent. A
		// tenant forgotten or whose pods changed meanwhile keeps what its
		// pass recorded, series included.
		cur, ok := w.tenants[key]
		current := ok && slices.Equal(cur.servers, t.servers)
		if current {
			cur.look = look
			w.tenants[key] = cur
			recordAgentMetrics(key, t.servers, look)
		}
		w.mu.Unlock()
		if !current || !changed {
			continue
		}
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
}

// completedRounds is how many looks at every server have completed.
func (w *agentWatch) completedRounds() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rounds
}

// podsGone are the pods of before that are not in now.
func podsGone(before, now []agentServer) []string {
	var gone []string
	for _, b := range before {
		if !slices.ContainsFunc(now, func(s agentServer) bool { return s.pod == b.pod }) {
			gone = append(gone, b.pod)
		}
	}
	return gone
}
