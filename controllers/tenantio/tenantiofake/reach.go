// Package tenantiofake is an in-memory tenantio.Reach, for the tests of a
// step of the tenant reconciler: no etcd, no tenant API, no konnectivity
// server, and a table of cases instead of a cluster.
package tenantiofake

import (
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// Reach answers as tenants would. Its etcd holds Keys, one store for every
// server, of which those in Down do not answer; its tenants' APIs are
// APIs; its konnectivity servers hold Agents by pod IP (a pod not there
// does not answer). Etcd, when set, answers the etcd calls instead (a
// test's own fake, one that blocks, say). The zero value is an empty,
// healthy fleet; it is safe for concurrent use.
type Reach struct {
	Etcd   tenantio.Etcd
	Keys   map[string][]byte
	Down   map[string]bool
	APIs   map[types.NamespacedName]tenantio.API
	Agents map[string]int32

	mu sync.Mutex
	// Users are the etcd users made, with their permissions.
	users map[string][]apiserver.EtcdKeyRange
	// Calls counts the calls by method, for tests that assert what a step
	// asked.
	calls map[string]int
}

var _ tenantio.Reach = (*Reach)(nil)

func (f *Reach) called(method string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[method]++
}

// Calls is how many times method was called.
func (f *Reach) Calls(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

// down is the first endpoint that does not answer, as tenantio reports it.
func (f *Reach) down(endpoints []string) error {
	for _, ep := range endpoints {
		if f.Down[ep] {
			return &tenantio.Unreachable{Endpoint: ep, Err: fmt.Errorf("connection refused")}
		}
	}
	return nil
}

// Check answers unless an endpoint is down.
func (f *Reach) Check(ctx context.Context, endpoints []string, tlsConfig *tls.Config) error {
	f.called("Check")
	if f.Etcd != nil {
		return f.Etcd.Check(ctx, endpoints, tlsConfig)
	}
	return f.down(endpoints)
}

// Count counts Keys under each prefix.
func (f *Reach) Count(ctx context.Context, endpoints []string, tlsConfig *tls.Config, prefixes ...string) ([]int64, error) {
	f.called("Count")
	if f.Etcd != nil {
		return f.Etcd.Count(ctx, endpoints, tlsConfig, prefixes...)
	}
	if err := f.down(endpoints); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]int64, len(prefixes))
	for i, p := range prefixes {
		for k := range f.Keys {
			if strings.HasPrefix(k, p) {
				out[i]++
			}
		}
	}
	return out, nil
}

// Scan calls fn with the Keys under prefix, in order.
func (f *Reach) Scan(ctx context.Context, endpoints []string, tlsConfig *tls.Config, prefix string, fn func(key, value []byte)) error {
	f.called("Scan")
	if f.Etcd != nil {
		return f.Etcd.Scan(ctx, endpoints, tlsConfig, prefix, fn)
	}
	if err := f.down(endpoints); err != nil {
		return err
	}
	f.mu.Lock()
	var keys []string
	for k := range f.Keys {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	values := make([][]byte, len(keys))
	for i, k := range keys {
		values[i] = f.Keys[k]
	}
	f.mu.Unlock()
	for i, k := range keys {
		fn([]byte(k), values[i])
	}
	return nil
}

// Delete removes the Keys under prefix.
func (f *Reach) Delete(ctx context.Context, endpoints []string, tlsConfig *tls.Config, prefix string) (int64, error) {
	f.called("Delete")
	if f.Etcd != nil {
		return f.Etcd.Delete(ctx, endpoints, tlsConfig, prefix)
	}
	if err := f.down(endpoints); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var n int64
	for k := range f.Keys {
		if strings.HasPrefix(k, prefix) {
			delete(f.Keys, k)
			n++
		}
	}
	return n, nil
}

// EnsureUser records the user's permissions.
func (f *Reach) EnsureUser(_ context.Context, endpoints []string, _ *tls.Config, name string, perms []apiserver.EtcdKeyRange) error {
	f.called("EnsureUser")
	if err := f.down(endpoints); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.users == nil {
		f.users = map[string][]apiserver.EtcdKeyRange{}
	}
	f.users[name] = slices.Clone(perms)
	return nil
}

// RemoveUser forgets the user.
func (f *Reach) RemoveUser(_ context.Context, endpoints []string, _ *tls.Config, name string) error {
	f.called("RemoveUser")
	if err := f.down(endpoints); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.users, name)
	return nil
}

// User is the permissions of the etcd user name, and whether it exists.
func (f *Reach) User(name string) ([]apiserver.EtcdKeyRange, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	perms, ok := f.users[name]
	return perms, ok
}

// API is the tenant's API of APIs.
func (f *Reach) API(_ context.Context, t tenantio.APITarget) (tenantio.API, error) {
	f.called("API")
	if api := f.APIs[t.Tenant]; api != nil {
		return api, nil
	}
	return nil, fmt.Errorf("connecting to the tenant's API: %s serves none in this test", t.Tenant)
}

// KonnectivityAgents is Agents of the pod at podIP.
func (f *Reach) KonnectivityAgents(_ context.Context, podIP string) (int32, error) {
	f.called("KonnectivityAgents")
	n, ok := f.Agents[podIP]
	if !ok {
		return 0, fmt.Errorf("no konnectivity server answers at %s", podIP)
	}
	return n, nil
}

// V3: the fake has no etcd client.
func (f *Reach) V3() (tenantio.EtcdV3, bool) { return tenantio.EtcdV3{}, false }
