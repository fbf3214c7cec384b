package tenantwatch

import (
	"context"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"

	"github.com/apiserver-operator/apiserver-operator/controllers/tenantmemory"
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

// Agents counts, between passes, the agents that hold a tunnel to the
// konnectivity server of each apiserver pod, and the tenant's nodes when
// a ready server holds none. Agents come and go with the tenant's nodes,
// which the operator does not watch: without it, status and the
// KonnectivityAgentsConnected condition would say what the last rollout
// saw. A tenant is brought back when what the watch finds changes the
// condition, or changes the counts that status shows and those are older
// than agentCountsRefresh, so the steady state costs no pass and no API
// request: one GET per server per interval.
type Agents struct {
	*tenantmemory.Watch[agentTarget]
	probe  KonnectivityProber
	budget rate.Limit
}

// agentTarget is a tenant's konnectivity servers as its last pass saw
// them, and what the last look at them found.
type agentTarget struct {
	servers []Server
	// countNodes counts the tenant's nodes in etcd; nil when its pass
	// could not reach etcd.
	countNodes func(context.Context) (int64, error)
	// look is the last look, the watch's or a pass's; written is the
	// look the last pass wrote to status.
	look, written AgentLook
}

func NewAgents(probe KonnectivityProber, interval time.Duration) *Agents {
	w := &Agents{probe: probe, budget: agentLooksPerSecond}
	w.Watch = tenantmemory.NewWatch(tenantmemory.WatchOptions[agentTarget]{Interval: interval, Look: w.look, Settle: settleAgents})
	return w
}

// Recent is the last look at key's servers when it is of the same pods
// and younger than the interval: a pass then writes it rather than
// looking again (ok); else the last look, which a new one keeps what it
// cannot count from for once.
func (w *Agents) Recent(key types.NamespacedName, servers []Server, now time.Time) (look, before AgentLook, ok bool) {
	t, found := w.Load(key)
	if !found || !SamePods(t.servers, servers) || now.Sub(t.look.At) >= w.Interval() {
		return AgentLook{}, t.look, false
	}
	return t.look, t.look, true
}

// Record is what a pass wrote: the watch compares its next look with it.
// It returns the pods of the previous Record that are gone.
func (w *Agents) Record(key types.NamespacedName, servers []Server, countNodes func(context.Context) (int64, error), look AgentLook) []string {
	var gone []string
	w.Update(key, func(before agentTarget, _ bool) agentTarget {
		gone = podsGone(before.servers, servers)
		return agentTarget{servers: slices.Clone(servers), countNodes: countNodes, look: look, written: look}
	})
	return gone
}

// ForgetPods stops looking at a tenant and returns its pods' names.
func (w *Agents) ForgetPods(key types.NamespacedName) []string {
	before, _ := w.Take(key)
	return podsGone(before.servers, nil)
}

// look looks at every tenant's servers, spread over the interval within
// the budget, then counts the nodes of the tenants a ready server of which
// holds no agent.
func (w *Agents) look(ctx context.Context, targets map[types.NamespacedName]agentTarget) map[types.NamespacedName]agentTarget {
	looks := 0
	for _, t := range targets {
		looks += len(t.servers)
	}
	limiter := tenantmemory.Spread(looks, w.Interval(), w.budget)

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
				n, err := w.probe(lookCtx, s.IP)
				cancel()
				mu.Lock()
				defer mu.Unlock()
				agents[key][s.Pod] = nil
				if err == nil {
					agents[key][s.Pod] = &n
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
		return nil
	}

	found := make(map[types.NamespacedName]agentTarget, len(targets))
	for key, t := range targets {
		t.look = AgentLook{Agents: agents[key], At: lookedAt[key]}.WithGrace(t.look)
		found[key] = t
	}
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(agentWatchConcurrency)
	for key, t := range targets {
		if t.countNodes == nil || !NeedsNodes(t.servers, found[key].look.Agents) {
			continue
		}
		if limiter.Wait(gctx) != nil {
			break
		}
		g.Go(func() error {
			nodes, graced := CountWithGrace(gctx, t.countNodes, t.look)
			mu.Lock()
			f := found[key]
			f.look.Nodes, f.look.NodesGraced = nodes, graced
			found[key] = f
			mu.Unlock()
			return nil
		})
	}
	_ = g.Wait()
	return found
}

// settleAgents brings back a tenant whose look changes the condition its
// pass wrote, or changes the counts status shows when those are older
// than agentCountsRefresh. A tenant whose pods changed, or that a pass
// looked at since, keeps what its pass recorded, series included.
func settleAgents(key types.NamespacedName, seen, current, found agentTarget) (agentTarget, bool, bool) {
	if !slices.Equal(current.servers, seen.servers) || current.look.At.After(found.look.At) {
		return current, false, false
	}
	look := found.look
	bring := DecideAgents(seen.servers, look) != DecideAgents(seen.servers, current.written) ||
		!SameCounts(look.Agents, current.written.Agents) && time.Since(current.written.At) >= agentCountsRefresh
	current.look = look
	RecordAgents(key, seen.servers, look)
	return current, bring, true
}

// podsGone are the pods of before that are not in now.
func podsGone(before, now []Server) []string {
	var gone []string
	for _, b := range before {
		if !slices.ContainsFunc(now, func(s Server) bool { return s.Pod == b.Pod }) {
			gone = append(gone, b.Pod)
		}
	}
	return gone
}
