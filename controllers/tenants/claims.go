package tenants

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/ownership"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantindex"
)

// nameConflictRecheck is how often a tenant held by a name conflict looks
// again: the object in the way is not the operator's, so no watch brings
// its removal.
const nameConflictRecheck = 30 * time.Second

// claim checks that obj, as the cluster holds it, is cfg's own: a
// *ownership.NameConflict when it is someone else's, an error to retry when an
// earlier ApiServerConfig of the same name still holds it.
func (r *Reconciler) claim(cfg *v1alpha1.ApiServerConfig, obj client.Object) error {
	c := ownership.Claim(r.Ownership, cfg, obj)
	if c.Own() {
		return nil
	}
	kind := fmt.Sprintf("%T", obj)
	if gvk, err := apiutil.GVKForObject(obj, r.Scheme); err == nil {
		kind = gvk.Kind
	} else if k := obj.GetObjectKind().GroupVersionKind().Kind; k != "" {
		kind = k
	}
	if c.Predecessor {
		return fmt.Errorf("%s %s/%s still belongs to %s: waiting for the garbage collector to delete it", kind, obj.GetNamespace(), obj.GetName(), c.Holder)
	}
	return &ownership.NameConflict{Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), Holder: c.Holder}
}

// claimLive checks, with the API server rather than the cache, that no
// object of obj's name exists that is not cfg's own: a metadata-only read
// (the whole object for a kind the operator proves), asked before an apply
// creates an object. It returns the tenant's own
// object when one exists (nil when none does).
func (r *Reconciler) claimLive(ctx context.Context, cfg *v1alpha1.ApiServerConfig, obj client.Object) (client.Object, error) {
	gvk, err := apiutil.GVKForObject(obj, r.Scheme)
	if err != nil {
		return nil, err
	}
	var live client.Object = &metav1.PartialObjectMetadata{}
	live.GetObjectKind().SetGroupVersionKind(gvk)
	if apiserver.NeedsProof(obj) {
		// A proof covers what the object holds: the whole object.
		fresh, err := r.Scheme.New(gvk)
		if err != nil {
			return nil, err
		}
		live = fresh.(client.Object)
	}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading %s %s/%s: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return live, r.claim(cfg, live)
}

// checkKeyspace keeps a new tenant from starting on keys that are also an
// older tenant's: admission refuses the pair, but two creations a moment
// apart, or one while the webhook was off, can pass it. The new one (it
// has no Deployment) is Stalled at once and writes nothing. A tenant that
// already runs on keys it shares (created before admission checked) keeps
// running, with a warning: stopping its reconciliation would let its
// certificates expire. One whose spec moves it there (another prefix,
// other servers) is held as a new one is, its apiservers left as they run.
func (r *Reconciler) checkKeyspace(ctx context.Context, p *pass) error {
	if r.TenantIndex == nil {
		return nil
	}
	others, err := r.TenantIndex.Overlapping(ctx, p.cfg)
	if err != nil {
		return err
	}
	var older []string
	for i := range others {
		if o := &others[i]; olderThan(o, p.cfg) {
			older = append(older, tenantindex.Named(o, p.cfg.Namespace))
		}
	}
	prefix := apiserver.KeyspaceOf(&p.cfg.Spec.Etcd).Prefix
	reason, msg := v1alpha1.ReasonSharedKeyspace, ""
	if len(older) > 0 {
		msg = fmt.Sprintf("The keys under %s on this tenant's etcd servers are also the data of %s, created before it: two tenants would read and write each other's objects; choose another spec.etcd.prefix",
			prefix, strings.Join(slices.Compact(older), " and "))
	} else {
		retained, err := r.TenantIndex.RetainedOverlapping(ctx, p.cfg)
		if err != nil || len(retained) == 0 {
			return err
		}
		var names []string
		for _, o := range retained {
			names = append(names, tenantindex.NamedRetained(o, p.cfg.Namespace))
		}
		reason = v1alpha1.ReasonRetainedKeyspace
		msg = fmt.Sprintf("The keys under %s on this tenant's etcd servers are data that %s kept (deletionPolicy Retain), for an ApiServerConfig of that name to take back: choose another spec.etcd.prefix",
			prefix, strings.Join(slices.Compact(names), " and "))
	}
	if p.current.Name != "" && !movingData(p) {
		r.event(p.cfg, corev1.EventTypeWarning, reason, "Keyspace", "%s", msg)
		return nil
	}
	p.obs.failure = &envFailure{reason: reason, message: msg, atOnce: true,
		since: failingSince(p.before.Status.Conditions, reason, p.now)}
	p.requeueWithin(nameConflictRecheck)
	p.done = true
	return nil
}

// olderThan reports whether a was created before b (by name when at the
// same second).
func olderThan(a, b *v1alpha1.ApiServerConfig) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
}

// movingData reports whether the spec moves a tenant that stored data to
// another keyspace: another prefix, or etcd clusters its data was not
// proven on (status.dataPrefix and dataServers, which a release that knew
// the prefix alone did not record).
func movingData(p *pass) bool {
	st := p.cfg.Status
	if st.DataPrefix == "" {
		return false
	}
	if st.DataPrefix != apiserver.KeyspaceOf(&p.cfg.Spec.Etcd).Prefix {
		return true
	}
	return len(st.DataServers) > 0 && !dataChecked(p.cfg)
}
