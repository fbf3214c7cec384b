package apiserver

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

func TestEtcdKeyspace_Overlaps(t *testing.T) {
	etcd := func(prefix string, servers ...string) EtcdKeyspace {
		return KeyspaceOf(&v1alpha1.EtcdSpec{Servers: servers, Prefix: prefix})
	}
	withOverride := func(prefix, main, override string) EtcdKeyspace {
		return KeyspaceOf(&v1alpha1.EtcdSpec{Servers: []string{main}, Prefix: prefix,
			Overrides: []v1alpha1.EtcdOverride{{Resource: "events", Servers: []string{override}}}})
	}
	for _, tc := range []struct {
		name string
		a, b EtcdKeyspace
		want bool
	}{
		{"both default", etcd("", "https://etcd:2379"), etcd("/registry", "https://etcd:2379"), true},
		{"one within the other", etcd("/tenants/a", "https://etcd:2379"), etcd("/tenants/a/b", "https://etcd:2379"), true},
		{"trailing slash is the same prefix", etcd("/tenants/a/", "https://etcd:2379"), etcd("/tenants/a", "https://etcd:2379"), true},
		{"dot segments are cleaned", etcd("/tenants/x/../a", "https://etcd:2379"), etcd("/tenants/a", "https://etcd:2379"), true},
		{"root holds everything", etcd("/", "https://etcd:2379"), etcd("/tenants/a", "https://etcd:2379"), true},
		{"host case and scheme do not matter", etcd("/p", "https://ETCD:2379"), etcd("/p", "http://etcd:2379"), true},
		{"one shared server of several", etcd("/p", "https://e1:2379", "https://e2:2379"), etcd("/p", "https://e2:2379", "https://e3:2379"), true},
		{"an override's server", withOverride("/p", "https://e1:2379", "https://events:2379"), etcd("/p", "https://events:2379"), true},
		{"siblings", etcd("/tenants/a", "https://etcd:2379"), etcd("/tenants/b", "https://etcd:2379"), false},
		{"a name that starts like another", etcd("/tenants/a", "https://etcd:2379"), etcd("/tenants/ab", "https://etcd:2379"), false},
		{"other servers", etcd("/registry", "https://e1:2379"), etcd("/registry", "https://e2:2379"), false},
		{"other port", etcd("/registry", "https://etcd:2379"), etcd("/registry", "https://etcd:2380"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.a.Overlaps(tc.b); got != tc.want {
				t.Errorf("%v overlaps %v: %v, want %v", tc.a, tc.b, got, tc.want)
			}
			if got := tc.b.Overlaps(tc.a); got != tc.want {
				t.Errorf("%v overlaps %v: %v, want %v", tc.b, tc.a, got, tc.want)
			}
		})
	}
}

// The index finds exactly the keyspaces that overlap: one exact lookup per
// query key against every keyspace's index keys.
func TestEtcdKeyspace_IndexFindsExactlyTheOverlaps(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 25))
	segments := []string{"a", "b", "ab", "registry"}
	random := func() EtcdKeyspace {
		p := ""
		for range rng.IntN(4) {
			p += "/" + segments[rng.IntN(len(segments))]
		}
		var servers []string
		for range 1 + rng.IntN(2) {
			servers = append(servers, fmt.Sprintf("https://etcd-%d:2379", rng.IntN(3)))
		}
		return KeyspaceOf(&v1alpha1.EtcdSpec{Servers: servers, Prefix: p})
	}
	overlapping := 0
	for range 5000 {
		a, b := random(), random()
		found := false
		for _, q := range a.OverlapQueries() {
			if slices.Contains(b.IndexKeys(), q) {
				found = true
			}
		}
		if want := a.Overlaps(b); found != want {
			t.Fatalf("the index finds %v for %v against %v, Overlaps says %v", found, a, b, want)
		}
		if found {
			overlapping++
		}
	}
	if overlapping == 0 || overlapping == 5000 {
		t.Fatalf("%d of 5000 random pairs overlap: the test does not exercise both answers", overlapping)
	}
}
