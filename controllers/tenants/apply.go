package tenants

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// apply server-side applies obj, one of cfg's objects as apiserver.Desired
// built it (its owner included), with the operator's field owner. An
// object of that name that is not cfg's own is left as it is (see claim).
// It writes nothing when the object already holds what was last applied
// and nobody changed it since. Either way obj ends up as the cluster holds
// it.
func (r *Reconciler) apply(ctx context.Context, cfg *v1alpha1.ApiServerConfig, obj client.Object) error {
	r.Ownership.Prove(cfg.Name, cfg.UID, obj)
	hash, err := objectHash(obj)
	if err != nil {
		return err
	}
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[appliedHashAnnotation] = hash
	obj.SetAnnotations(annotations)

	key := appliedKey(obj)
	existing, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("copying %T", obj)
	}
	switch err := r.Client.Get(ctx, client.ObjectKeyFromObject(obj), existing); {
	case err == nil:
		if err := r.claim(cfg, existing); err != nil {
			return err
		}
		last, seen := r.lastApplied(cfg, key)
		// An object written before proofs (see claimOf) is written once
		// more, with its proof.
		proven := !apiserver.NeedsProof(existing) || r.Ownership.Proven(cfg.Name, cfg.UID, existing)
		if existing.GetAnnotations()[appliedHashAnnotation] == hash && seen && last == existing.GetResourceVersion() && proven {
			// obj becomes what the cluster holds, status included.
			return r.Scheme.Convert(existing, obj, nil)
		}
	case apierrors.IsNotFound(err):
		// The apply would create the object, or write over one the cache
		// has not seen yet: the API server says which, and whose it is.
		live, err := r.claimLive(ctx, cfg, obj)
		if err != nil {
			return err
		}
		if last, seen := r.lastApplied(cfg, key); live != nil && (!seen || last != live.GetResourceVersion()) {
			// The tenant's own, but not as this pass knew it (it read its
			// absence): what it decided (a new key?) must not replace it.
			return fmt.Errorf("%T %s/%s exists but the operator's cache does not hold it (it was written a moment ago, or its labels put it outside this instance's --watch-filter): the pass is retried rather than writing over it",
				obj, obj.GetNamespace(), obj.GetName())
		}
	default:
		return fmt.Errorf("reading %T %s: %w", obj, obj.GetName(), err)
	}

	desired, err := apiserver.ApplyForm(obj)
	if err != nil {
		return err
	}
	if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(desired), client.FieldOwner(apiserver.FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s/%s: %w", desired.GetKind(), obj.GetNamespace(), obj.GetName(), err)
	}
	// A new map each time: a pass applies a tenant's Secrets side by side,
	// and lastApplied reads the map it loaded without the lock.
	r.memory.applied.Update(client.ObjectKeyFromObject(cfg), func(objects map[string]string, _ bool) map[string]string {
		next := make(map[string]string, len(objects)+1)
		maps.Copy(next, objects)
		next[key] = desired.GetResourceVersion()
		return next
	})
	// obj becomes the server's answer: the cache may not have it yet.
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(desired.Object, obj); err != nil {
		return fmt.Errorf("reading back %s %s/%s: %w", desired.GetKind(), obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// appliedKey names obj among its tenant's applied objects.
func appliedKey(obj client.Object) string {
	return fmt.Sprintf("%T/%s/%s", obj, obj.GetNamespace(), obj.GetName())
}

// lastApplied is the resourceVersion the operator's last apply of cfg's
// object key left, and whether it applied it. The map it reads is never
// written again (see apply).
func (r *Reconciler) lastApplied(cfg *v1alpha1.ApiServerConfig, key string) (string, bool) {
	objects, _ := r.memory.applied.Load(client.ObjectKeyFromObject(cfg))
	last, ok := objects[key]
	return last, ok
}

// ownSecrets reads the Secrets the operator writes for cfg (CAs, keys,
// certificates, encryption keys) from the cache, unless the cache has not
// caught up with the operator's last write of one: then from the API
// server. A pass that trusted a lagging cache would find a CA or an
// encryption key missing or old and issue another, replacing the one in
// use. A Secret of such a name that is not cfg's own is never read as key
// material: Get fails (see claim).
type ownSecrets struct {
	r   *Reconciler
	cfg *v1alpha1.ApiServerConfig
}

func (o ownSecrets) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	err := o.r.Client.Get(ctx, key, obj, opts...)
	obj.SetNamespace(key.Namespace)
	obj.SetName(key.Name)
	last, written := o.r.lastApplied(o.cfg, appliedKey(obj))
	if written && (err != nil || obj.GetResourceVersion() != last) {
		err = o.r.APIReader.Get(ctx, key, obj, opts...)
	}
	if err != nil {
		return err
	}
	return o.r.claim(o.cfg, obj)
}

func (o ownSecrets) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return o.r.Client.List(ctx, list, opts...)
}

// objectHash hashes the desired object as it will be applied, but for the
// annotation that records the hash and the proof (a function of the rest,
// and of the tenant's uid for a Deployment: a template hash must not
// depend on whether the object was proven yet).
func objectHash(obj client.Object) (string, error) {
	if a := obj.GetAnnotations(); a[appliedHashAnnotation] != "" || a[apiserver.ProofAnnotation] != "" {
		obj = obj.DeepCopyObject().(client.Object)
		a = maps.Clone(a)
		delete(a, appliedHashAnnotation)
		delete(a, apiserver.ProofAnnotation)
		if len(a) == 0 {
			a = nil
		}
		obj.SetAnnotations(a)
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return "", fmt.Errorf("hashing %T %s: %w", obj, obj.GetName(), err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])[:32], nil
}

// deleteIfOwned deletes obj if it exists and cfg owns it.
func (r *Reconciler) deleteIfOwned(ctx context.Context, cfg *v1alpha1.ApiServerConfig, obj client.Object) error {
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(obj, cfg) {
		return nil
	}
	if err := r.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}
