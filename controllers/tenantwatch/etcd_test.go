package tenantwatch

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// countingProber answers from a set of servers that are down, and counts
// the looks.
type countingProber struct {
	mu    sync.Mutex
	looks map[etcdServer]int
	down  map[string]bool
}

func (c *countingProber) Probe(_ context.Context, endpoint string, _ *tls.Config, tlsID string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.looks[etcdServer{endpoint, tlsID}]++
	if c.down[endpoint] {
		return &tenantio.Unreachable{Endpoint: endpoint, Err: errors.New("connection refused")}
	}
	return nil
}

func (c *countingProber) Close() {}

// The watch's cost follows the etcd servers, not the tenants: 10 000
// tenants on three servers (one of them used with two client identities)
// cost four looks per round, and an outage brings back exactly the
// tenants that use the server that went away.
func TestEtcdWatch_CostFollowsServersNotTenants(t *testing.T) {
	prober := &countingProber{looks: map[etcdServer]int{}, down: map[string]bool{}}
	w := NewEtcdOf(prober, time.Second, 20000)
	const n = 10000
	for i := range n {
		key := types.NamespacedName{Namespace: fmt.Sprintf("t-%d", i), Name: "tenant"}
		switch {
		case i%2 == 0:
			w.Record(key, []string{"https://shared:2379"}, nil, "a", "")
		case i%4 == 1:
			w.Record(key, []string{"https://shared:2379"}, nil, "b", "")
		default:
			w.Record(key, []string{"https://main:2379", "https://events:2379"}, nil, "a", "")
		}
	}
	w.Round(context.Background())
	if len(prober.looks) != 4 {
		t.Fatalf("one round looked at %d servers, want 4: %v", len(prober.looks), prober.looks)
	}
	for s, k := range prober.looks {
		if k != 1 {
			t.Fatalf("%v was looked at %d times in one round", s, k)
		}
	}
	if len(w.Events()) != 0 {
		t.Fatalf("%d tenants brought back while nothing changed", len(w.Events()))
	}

	prober.down["https://events:2379"] = true
	w.Round(context.Background())
	if got, want := len(w.Events()), n/4; got != want {
		t.Fatalf("the events etcd went away: %d tenants brought back, want the %d that use it", got, want)
	}
	for range len(w.Events()) {
		e := <-w.Events()
		if i, _ := strconv.Atoi(strings.TrimPrefix(e.Object.Namespace, "t-")); i%4 != 3 {
			t.Fatalf("tenant %s was brought back, but does not use the events etcd", e.Object.Namespace)
		}
	}
	// Seen once: the next round brings back nobody.
	w.Round(context.Background())
	if len(w.Events()) != 0 {
		t.Fatalf("an outage already seen brought back %d tenants again", len(w.Events()))
	}
	if got := w.CompletedRounds(); got != 3 {
		t.Fatalf("%d rounds completed, want 3", got)
	}
}
