package controllers

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"
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
	// that does not answer holds a slot for agentWatchLookTimeout.
	agentWatchConcurrency = 16
	// agentWatchLookTimeout bounds one look of the watch: a pod's health
	// port answers within milliseconds, and 16 servers that hang hold the
	// round for this long, not for tenantio's probe timeout.
	agentWatchLookTimeout = time.Second
	// agentCountsRefresh is how old the counts status shows may grow,
	// while the condition does not move, before a changed count brings
	// the tenant back: the counts move with every node of an autoscaled
	// tenant, and a pass for each would be 10 000 tenants' passes each
	// interval; the gauge follows every look.
	agentCountsRefresh = 30 * time.Minute
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
// saw. A tenant is brought back when what the watch finds changes the
// condition, or changes the counts that status shows and those are older
// than agentCountsRefresh, so the steady state costs no pass and no API
// request: one GET per server per interval.
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
	// look is the last look, the watch's or a pass's; written is the
	// look the last pass wrote to status.
	look, written agentLook
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

// recent is the last look at key's servers when it is of the same pods
// and younger than the interval: a pass then writes it rather than
// looking again (ok); else the last look, which a new one keeps what it
// cannot count from for once.
func (w *agentWatch) recent(key types.NamespacedName, servers []agentServer, now time.Time) (look, before agentLook, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, found := w.tenants[key]
	if !found || !samePods(t.servers, servers) || now.Sub(t.look.at) >= w.interval {
		return agentLook{}, t.look, false
	}
	return t.look, t.look, true
}

// record is what a pass wrote: the watch compares its next look with it.
// It returns the pods of the previous record that are gone.
func (w *agentWatch) record(key types.NamespacedName, servers []agentServer, countNodes func(context.Context) (int64, error), look agentLook) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	gone := podsGone(w.tenants[key].servers, servers)
	w.tenants[key] = agentTarget{servers: slices.Clone(servers), countNodes: countNodes, look: look, written: look}
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
	everyInterval(ctx, w.interval, w.lookOnce)
	return nil
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

	var mu sync.Mutex
	agents := make(map[types.NamespacedName]map[string]*int32, len(targets))
	// lookedAt is when a tenant's first server was looked at: what the
	// look is as old as.
	lookedAt := make(map[types.NamespacedName]time.Time, len(targets))
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
				at := time.Now()
				lookCtx, cancel := context.WithTimeout(gctx, agentWatchLookTimeout)
				n, err := w.probe(lookCtx, s.ip)
				cancel()
				mu.Lock()
				defer mu.Unlock()
				agents[key][s.pod] = nil
				if err == nil {
					agents[key][s.pod] = &n
				}
				if first, ok := lookedAt[key]; !ok || at.Before(first) {
					lookedAt[key] = at
				}
				return nil
			})
		}
	}
	_ = g.Wait() // the looks return no error
	if ctx.Err() != nil {
		return
	}

	found := make(map[types.NamespacedName]agentLook, len(targets))
	for key, t := range targets {
		found[key] = agentLook{agents: agents[key], at: lookedAt[key]}.withGrace(t.look)
	}
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(agentWatchConcurrency)
	for key, t := range targets {
		if t.countNodes == nil || !needsNodes(t.servers, found[key].agents) {
			continue
		}
		if limiter.Wait(gctx) != nil {
			break
		}
		g.Go(func() error {
			nodes, graced := countWithGrace(gctx, t.countNodes, t.look)
			mu.Lock()
			l := found[key]
			l.nodes, l.nodesGraced = nodes, graced
			found[key] = l
			mu.Unlock()
			return nil
		})
	}
	_ = g.Wait()
	if ctx.Err() != nil {
		return
	}

	now := time.Now()
	for key, t := range targets {
		look := found[key]
		w.mu.Lock()
		cur, ok := w.tenants[key]
		// A tenant forgotten, whose pods changed, or that a pass looked at
		// since keeps what its pass recorded, series included.
		current := ok && slices.Equal(cur.servers, t.servers) && !cur.look.at.After(look.at)
		bring := false
		if current {
			bring = decideAgents(t.servers, look) != decideAgents(t.servers, cur.written) ||
				!sameCounts(look.agents, cur.written.agents) && now.Sub(cur.written.at) >= agentCountsRefresh
			cur.look = look
			w.tenants[key] = cur
			recordAgentMetrics(key, t.servers, look)
		}
		w.mu.Unlock()
		if !bring {
			continue
		}
		if !bringBack(ctx, w.events, key) {
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
