package controllers

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// nameConflictRecheck is how often a tenant held by a name conflict looks
// again: the object in the way is not the operator's, so no watch brings
// its removal.
const nameConflictRecheck = 30 * time.Second

// nameConflict says that an object of a name the ApiServerConfig generates
// exists and is someone else's (apiserver.ClaimOf): the operator neither
// writes it nor reads it.
type nameConflict struct {
	kind, namespace, name, holder string
}

func (e *nameConflict) Error() string {
	return fmt.Sprintf("%s %s/%s, a name this ApiServerConfig gives one of its objects, belongs to %s: it is left untouched; delete or rename it, or give the ApiServerConfig another name",
		e.kind, e.namespace, e.name, e.holder)
}

// claim checks that obj, as the cluster holds it, is cfg's own: a
// *nameConflict when it is someone else's, an error to retry when an
// earlier ApiServerConfig of the same name still holds it.
func (r *ApiServerConfigReconciler) claim(cfg *v1alpha1.ApiServerConfig, obj client.Object) error {
	c := apiserver.ClaimOf(cfg.Name, cfg.UID, obj)
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
	return &nameConflict{kind: kind, namespace: obj.GetNamespace(), name: obj.GetName(), holder: c.Holder}
}

// claimLive checks, with the API server rather than the cache, that no
// object of obj's name exists that is not cfg's own: a metadata-only read,
// asked before an apply creates an object. It returns the tenant's own
// object when one exists (nil when none does).
func (r *ApiServerConfigReconciler) claimLive(ctx context.Context, cfg *v1alpha1.ApiServerConfig, obj client.Object) (*metav1.PartialObjectMetadata, error) {
	gvk, err := apiutil.GVKForObject(obj, r.Scheme)
	if err != nil {
		return nil, err
	}
	live := &metav1.PartialObjectMetadata{}
	live.SetGroupVersionKind(gvk)
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading %s %s/%s: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return live, r.claim(cfg, live)
}
