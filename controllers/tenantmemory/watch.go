package tenantmemory

import (
	"cmp"
	"context"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// Watch looks, between passes, at what each tenant's last pass recorded
// (its target, of type T), once per interval, and brings back a tenant
// whose look differs from what that pass saw: a converged tenant costs no
// pass and no API request. Its targets are per-tenant memory (a Map): the
// pass records them, and forgetting the tenant stops the looks. The etcd
// servers, the konnectivity servers and the audit counters each have one.
type Watch[T any] struct {
	Map[T]
	o      WatchOptions[T]
	events chan event.TypedGenericEvent[*v1alpha1.ApiServerConfig]
	rounds atomic.Int64
}

// WatchOptions say what a Watch looks at and when a look brings a tenant
// back.
type WatchOptions[T any] struct {
	// Interval is how often every target is looked at.
	Interval time.Duration
	// Look looks at targets, a copy of every tenant's (spread over the
	// interval within a budget: see Spread), and returns what it found of
	// those it looked at. It returns early when ctx ends.
	Look func(ctx context.Context, targets map[types.NamespacedName]T) map[types.NamespacedName]T
	// Settle merges what a look found of a tenant into its target as it
	// stands now (current), given the target the look started from
	// (seen): the target to keep, whether the tenant is brought back, and
	// false when the look is stale (a pass recorded anew meanwhile) and
	// current stays as it is. It runs under the watch's lock.
	Settle func(key types.NamespacedName, seen, current, found T) (next T, bring, ok bool)
	// AfterRound, when set, runs after each completed round.
	AfterRound func()
	// Stop, when set, runs when the watch stops.
	Stop func()
	// Buffer is how many tenants brought back may wait for the
	// controller's queue (64 when zero).
	Buffer int
}

// NewWatch is a watch that does what o says.
func NewWatch[T any](o WatchOptions[T]) *Watch[T] {
	return &Watch[T]{o: o, events: make(chan event.TypedGenericEvent[*v1alpha1.ApiServerConfig], cmp.Or(o.Buffer, 64))}
}

// Interval is how often every target is looked at.
func (w *Watch[T]) Interval() time.Duration { return w.o.Interval }

// Events are the tenants brought back, which Source reads; a test without
// a controller reads them itself.
func (w *Watch[T]) Events() <-chan event.TypedGenericEvent[*v1alpha1.ApiServerConfig] {
	return w.events
}

// Source brings back the tenants whose look changed.
func (w *Watch[T]) Source() source.Source {
	return source.Channel(w.events, &handler.TypedEnqueueRequestForObject[*v1alpha1.ApiServerConfig]{})
}

// NeedLeaderElection: only the leader reconciles, so only it looks.
func (w *Watch[T]) NeedLeaderElection() bool { return true }

// Start looks at every target once per interval until ctx ends, the first
// time after a random part of the interval, so that operators started
// together do not look together. A round that took longer than the
// interval (more than the budget allows in one) is followed by the next
// at once.
func (w *Watch[T]) Start(ctx context.Context) error {
	if w.o.Stop != nil {
		defer w.o.Stop()
	}
	next := time.Now().Add(rand.N(w.o.Interval)) //nolint:gosec // G404: a jitter, not a secret
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(next)):
		}
		start := time.Now()
		w.Round(ctx)
		next = start.Add(w.o.Interval)
	}
}

// Round looks at every target once and settles what it found: Start runs
// it every interval, a test runs it itself.
func (w *Watch[T]) Round(ctx context.Context) {
	targets := w.Snapshot()
	found := w.o.Look(ctx, targets)
	if ctx.Err() != nil {
		return
	}
	for key, f := range found {
		bring := false
		w.mu.Lock()
		if cur, ok := w.m[key]; ok {
			if next, b, current := w.o.Settle(key, targets[key], cur, f); current {
				w.m[key], bring = next, b
			}
		}
		w.mu.Unlock()
		if bring && !w.bringBack(ctx, key) {
			return
		}
	}
	w.rounds.Add(1)
	if w.o.AfterRound != nil {
		w.o.AfterRound()
	}
}

// bringBack queues a pass of the tenant key; false when ctx ended first.
func (w *Watch[T]) bringBack(ctx context.Context, key types.NamespacedName) bool {
	select {
	case w.events <- event.TypedGenericEvent[*v1alpha1.ApiServerConfig]{Object: &v1alpha1.ApiServerConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
	}}:
		return true
	case <-ctx.Done():
		return false
	}
}

// CompletedRounds is how many looks at every target have completed.
func (w *Watch[T]) CompletedRounds() int { return int(w.rounds.Load()) }

// Spread is the limiter of a round of n looks: evenly over interval, or at
// budget's rate if that is slower.
func Spread(n int, interval time.Duration, budget rate.Limit) *rate.Limiter {
	return rate.NewLimiter(min(max(rate.Limit(float64(n)/interval.Seconds()), 1), budget), 1)
}
