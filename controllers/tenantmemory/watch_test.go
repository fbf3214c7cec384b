package tenantmemory

import (
	"context"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"k8s.io/apimachinery/pkg/types"
)

// A round brings back the tenants whose look Settle says changed, keeps
// what Settle makes of the target, leaves a tenant forgotten during the
// look forgotten (and not brought back), and counts itself.
func TestWatch_BringsBackWhatChangedAndNothingForgotten(t *testing.T) {
	a, b, gone := types.NamespacedName{Name: "a"}, types.NamespacedName{Name: "b"}, types.NamespacedName{Name: "gone"}
	var w *Watch[int]
	w = NewWatch(WatchOptions[int]{
		Interval: time.Hour,
		Look: func(_ context.Context, targets map[types.NamespacedName]int) map[types.NamespacedName]int {
			w.Forget(gone) // deleted while the round looked
			found := map[types.NamespacedName]int{}
			for k, v := range targets {
				found[k] = v + 1
			}
			return found
		},
		// a's look changes what its pass saw; b's does not.
		Settle: func(key types.NamespacedName, _, _, found int) (int, bool, bool) {
			return found, key == a || key == gone, true
		},
	})
	for _, k := range []types.NamespacedName{a, b, gone} {
		w.Store(k, 1)
	}
	w.Round(context.Background())
	var back []types.NamespacedName
	for len(w.Events()) > 0 {
		e := <-w.Events()
		back = append(back, types.NamespacedName{Namespace: e.Object.Namespace, Name: e.Object.Name})
	}
	if len(back) != 1 || back[0] != a {
		t.Fatalf("brought back %v, want only a", back)
	}
	if v, _ := w.Load(b); v != 2 {
		t.Errorf("b's target is %d after the round, want what Settle kept, 2", v)
	}
	if w.Holds(gone) {
		t.Error("a tenant forgotten during the look is remembered again")
	}
	if w.CompletedRounds() != 1 {
		t.Errorf("%d rounds, want 1", w.CompletedRounds())
	}
}

// Spread paces a round evenly over the interval, never slower than one
// look a second, never faster than the budget.
func TestSpread(t *testing.T) {
	for _, c := range []struct {
		n      int
		budget float64
		want   float64
	}{{600, 100, 10}, {10, 100, 1}, {60000, 100, 100}} {
		if got := float64(Spread(c.n, time.Minute, rate.Limit(c.budget)).Limit()); got != c.want {
			t.Errorf("%d looks a minute within %v/s: %v/s, want %v", c.n, c.budget, got, c.want)
		}
	}
}
