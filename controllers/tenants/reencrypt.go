package tenants

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/rotation"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// reencryptRetry is how soon a pass that rewrote nothing (every rewrite
// failed) looks again; undecryptableRecheck, when what is left is only
// values no key of the tenant reads (a person must act).
const (
	reencryptRetry       = 10 * time.Second
	undecryptableRecheck = 5 * time.Minute
)

// reconcileEncryption proves, while the encryption key's rotation waits
// for it, that every stored value of the encrypted resources carries the
// key that encrypts now, reading the tenant's etcd; it rewrites what does
// not through the tenant's API, paced and in slices, each pass going on
// where etcd says the last one stopped (so an operator restart loses
// nothing). It runs only once every apiserver encrypts with that key. The
// proof ends with a look at every value under the tenant's etcd prefix for
// the old key's, which needs neither the catalog nor discovery to be
// right.
func (r *Reconciler) reconcileEncryption(ctx context.Context, p *pass) error {
	e := p.enc
	if e == nil || e.state.Phase != rotation.SignWithNew || r.Reach == nil || p.held {
		return nil
	}
	if !p.rolledOut {
		e.progress = "waits until every apiserver encrypts with " + e.keys.Current.Key.Name
		return nil
	}
	hibernated := *p.c.Spec.MasterCount == 0
	catalog, err := apiserver.StorageCatalog(p.c)
	if err != nil {
		return err
	}
	var api tenantio.API
	var served map[schema.GroupResource]tenantio.Resource
	others := map[schema.GroupResource]string{}
	if needsDiscovery(catalog, e.keys) {
		if hibernated {
			e.progress = "the encrypted resources name resources only the tenant's discovery lists; the tenant is hibernated (masterCount 0): the proof waits until it wakes"
			return nil
		}
		if api, err = r.connect(ctx, p); err != nil {
			return err
		}
		if served, err = api.Resources(ctx); err != nil {
			return fmt.Errorf("proving the re-encryption needs every resource the tenant serves: %w", err)
		}
		for gr, res := range served {
			others[gr] = apiserver.OtherResourcePrefix(gr, res.Custom)
		}
	}
	areas, err := apiserver.EncryptionAreas(p.c, catalog, others, e.keys)
	if err != nil {
		return fmt.Errorf("proving the re-encryption: %w", err)
	}
	read, err := apiserver.NewDecrypter(e.keys)
	if err != nil {
		return fmt.Errorf("proving the re-encryption: %w", err)
	}
	stale, total, unreadable, err := r.staleValues(ctx, p, areas, p.c.Spec.Encryption, read)
	if err != nil {
		return err
	}
	if unreadable.count > 0 {
		// No rewrite can read them, and kube-apiserver fails every list of
		// their resources: the tenant is not Ready, and the rotation keeps
		// every key it has until a person decides.
		msg := fmt.Sprintf("%d stored values are encrypted with keys the tenant does not hold (first: %s): kube-apiserver fails every list of their resources; restore Secret %s from a backup, or delete those keys from etcd",
			unreadable.count, unreadable.first, apiserver.EncryptionSecretName(p.cfg.Name))
		if p.obs.failure == nil {
			p.obs.failure = &envFailure{reason: v1alpha1.ReasonUndecryptable, message: msg, atOnce: true,
				since: failingSince(p.before.Status.Conditions, v1alpha1.ReasonUndecryptable, p.now)}
		}
		e.progress = msg
		total -= unreadable.count
		if total == 0 {
			p.requeueWithin(undecryptableRecheck)
			return nil
		}
	}
	if total == 0 && unreadable.count == 0 {
		if left, where, err := r.valuesUnder(ctx, p, e.keys.Old); err != nil || left > 0 {
			if err == nil {
				e.progress = fmt.Sprintf("%d stored values outside the encrypted resources still carry %s (first: %s): restore spec.encryption.resources to what it was, or rewrite them", left, e.keys.Old.Key.Name, where)
				p.requeueWithin(reencryptRetry)
			}
			return err
		}
		e.proven = true
		at := p.now.UTC().Truncate(time.Second)
		e.keys.ProvenAt = &at
		e.progress = "every stored value carries " + e.keys.Current.Key.Name
		return nil
	}
	if hibernated {
		e.progress = fmt.Sprintf("%d stored values still need re-encryption with %s; the tenant is hibernated (masterCount 0), it goes on when it wakes", total, e.keys.Current.Key.Name)
		return nil
	}
	if api == nil {
		if api, err = r.connect(ctx, p); err != nil {
			return err
		}
	}
	if served == nil {
		// A group whose discovery failed is enough to rewrite the others.
		if served, err = api.Resources(ctx); len(served) == 0 {
			return fmt.Errorf("re-encrypting: the tenant's API lists no resource to rewrite: %w", err)
		}
	}
	rewritten, failed := rewrite(ctx, p, api, served, stale)
	if unreadable.count > 0 {
		e.progress += "; "
	} else {
		e.progress = ""
	}
	e.progress += fmt.Sprintf("re-encrypting with %s: %d stored values still carry an older key or none, %d rewritten in this pass", e.keys.Current.Key.Name, total-rewritten, rewritten)
	if failed != nil {
		e.progress += "; failed: " + failed.Error()
	}
	if rewritten > 0 {
		p.requeueWithin(time.Millisecond)
	} else {
		p.requeueWithin(reencryptRetry)
	}
	return nil
}

// valuesUnder counts the values under the tenant's etcd prefix, on every
// etcd it uses, that the layout's key wrote, and names the first; none for
// a layout that stores plain text.
func (r *Reconciler) valuesUnder(ctx context.Context, p *pass, l *apiserver.EncryptionLayout) (int, string, error) {
	if l == nil || l.Key.StoredPrefix() == "" {
		return 0, "", nil
	}
	want := []byte(l.Key.StoredPrefix())
	count, first := 0, ""
	prefix := apiserver.EtcdKeyPrefix(p.c, "")
	for _, servers := range p.c.Etcd.Sets {
		err := r.Reach.Scan(ctx, servers, p.etcdTLS, prefix, func(key, value []byte) {
			if bytes.HasPrefix(value, want) {
				if count == 0 {
					first = string(key)
				}
				count++
			}
		})
		if err != nil {
			return 0, "", fmt.Errorf("proving the re-encryption: %w", err)
		}
	}
	return count, first, nil
}

// needsDiscovery: a layout names a resource the catalog cannot resolve.
func needsDiscovery(catalog *apiserver.Catalog, m apiserver.EncryptionKeys) bool {
	for _, l := range []*apiserver.EncryptionLayout{&m.Current, m.Old} {
		if l == nil {
			continue
		}
		for _, res := range l.Resources {
			resource, group, _ := strings.Cut(res, ".")
			if strings.Contains(res, "*") {
				return true
			}
			if _, ok := catalog.EtcdPrefixes[schema.GroupResource{Group: group, Resource: resource}]; !ok {
				return true
			}
		}
	}
	return false
}

// staleValue is a stored value not (yet) written with the current key.
type staleValue struct {
	area *apiserver.EncryptedArea
	key  string
}

// staleValues scans every area and returns how many values are stale, and
// the first of them, as many as a pass rewrites.
func (r *Reconciler) staleValues(ctx context.Context, p *pass, areas []apiserver.EncryptedArea, e *v1alpha1.EncryptionSpec, read *apiserver.Decrypter) ([]staleValue, int, unreadableValues, error) {
	limit := int(rewritesPerSecond(e) * int32(reencryptSlice/time.Second))
	var stale []staleValue
	var unreadable unreadableValues
	total := 0
	for i := range areas {
		a := &areas[i]
		err := r.Reach.Scan(ctx, a.Servers, p.etcdTLS, a.KeyPrefix, func(key, value []byte) {
			// A value can carry the prefix of a key of the tenant's and
			// still not be its (another key-1): each one is decrypted.
			readable := read.Reads(key, value)
			if readable && storedWith(a, value) {
				return
			}
			total++
			if !readable {
				if unreadable.count == 0 {
					unreadable.first = string(key)
				}
				unreadable.count++
				return
			}
			if len(stale) < limit {
				stale = append(stale, staleValue{area: a, key: string(key)})
			}
		})
		if err != nil {
			return nil, 0, unreadable, fmt.Errorf("proving the re-encryption: %w", err)
		}
	}
	return stale, total, unreadable, nil
}

// unreadableValues are stored values that none of the tenant's keys
// decrypts: how many, and the first one's etcd key.
type unreadableValues struct {
	count int
	first string
}

// storedWith reports whether value is as the area wants it: written with
// its key, or in plain text where nothing encrypts.
func storedWith(a *apiserver.EncryptedArea, value []byte) bool {
	if a.Want == "" {
		return !bytes.HasPrefix(value, []byte(apiserver.EncryptedValuePrefix))
	}
	return bytes.HasPrefix(value, []byte(a.Want))
}

func rewritesPerSecond(e *v1alpha1.EncryptionSpec) int32 {
	if e != nil && e.RewritesPerSecond != nil && *e.RewritesPerSecond > 0 {
		return *e.RewritesPerSecond
	}
	return apiserver.DefaultRewritesPerSecond
}

// rewrite writes the stale objects back through the tenant's API, paced,
// for at most reencryptSlice (see tenantio.RewriteAll).
func rewrite(ctx context.Context, p *pass, api tenantio.API, served map[schema.GroupResource]tenantio.Resource, stale []staleValue) (int, error) {
	stored := make([]tenantio.Stored, len(stale))
	for i, v := range stale {
		stored[i] = tenantio.Stored{Resources: v.area.Resources, KeyPrefix: v.area.KeyPrefix, Key: v.key}
	}
	return tenantio.RewriteAll(ctx, api, served, stored, rewritesPerSecond(p.c.Spec.Encryption), reencryptSlice)
}
