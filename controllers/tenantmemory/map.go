// Package tenantmemory holds what the operator keeps per tenant between
// passes, and the generic between-pass watch. Every store of it answers
// Forget and Holds for a tenant, so that the tenant reconciler, the one
// owner of that memory, forgets a deleted or paused tenant in one call and
// a test proves that nothing of it is left (at 10 000 tenants, a map that
// is never cleared is a slow leak).
package tenantmemory

import (
	"maps"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Store is per-tenant memory.
type Store interface {
	// Forget drops what is kept of the tenant.
	Forget(key types.NamespacedName)
	// Holds says whether anything of the tenant is kept.
	Holds(key types.NamespacedName) bool
}

// Map is a value per tenant, safe for concurrent use.
type Map[V any] struct {
	mu sync.Mutex
	m  map[types.NamespacedName]V
}

// Load is the tenant's value, and whether there is one.
func (m *Map[V]) Load(key types.NamespacedName) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.m[key]
	return v, ok
}

// Store keeps v for the tenant.
func (m *Map[V]) Store(key types.NamespacedName, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[types.NamespacedName]V{}
	}
	m.m[key] = v
}

// Take drops the tenant's value and returns it.
func (m *Map[V]) Take(key types.NamespacedName) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.m[key]
	delete(m.m, key)
	return v, ok
}

// Update replaces the tenant's value with what change makes of it (the
// zero value and false when there is none), under the map's lock.
func (m *Map[V]) Update(key types.NamespacedName, change func(v V, ok bool) V) V {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[types.NamespacedName]V{}
	}
	v, ok := m.m[key]
	v = change(v, ok)
	m.m[key] = v
	return v
}

// Forget drops the tenant's value.
func (m *Map[V]) Forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, key)
}

// Holds says whether the tenant has a value.
func (m *Map[V]) Holds(key types.NamespacedName) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.m[key]
	return ok
}

// Len is how many tenants have a value.
func (m *Map[V]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.m)
}

// Snapshot is a copy of every tenant's value.
func (m *Map[V]) Snapshot() map[types.NamespacedName]V {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.m)
}

// Func is a Store made of two functions: what a room that is not a Map
// (a registry, a set of metric series) keeps of a tenant.
type Func struct {
	ForgetFunc func(types.NamespacedName)
	HoldsFunc  func(types.NamespacedName) bool
}

// Forget calls ForgetFunc.
func (f Func) Forget(key types.NamespacedName) { f.ForgetFunc(key) }

// Holds calls HoldsFunc.
func (f Func) Holds(key types.NamespacedName) bool { return f.HoldsFunc(key) }
