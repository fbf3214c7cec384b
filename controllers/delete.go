package controllers

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// reconcileDelete removes everything the operator created for cfg (the
// garbage collector would, but not every cluster runs it promptly, and
// Retain must orphan the CAs first), then releases the finalizer.
func (r *ApiServerConfigReconciler) reconcileDelete(ctx context.Context, cfg *v1alpha1.ApiServerConfig) error {
	if !controllerutil.ContainsFinalizer(cfg, Finalizer) {
		return nil
	}
	retain := cfg.Spec.Certificates.PKIRetention == "Retain"
	for _, o := range apiserver.OwnedObjects(cfg.Name) {
		obj, err := ownedObject(o.Kind)
		if err != nil {
			return step("Delete", err)
		}
		obj.SetNamespace(cfg.Namespace)
		obj.SetName(o.Name)
		if retain && o.Retainable {
			err = r.orphan(ctx, cfg, obj)
		} else {
			err = r.deleteIfOwned(ctx, cfg, obj)
		}
		if err != nil {
			return step("Delete", err)
		}
	}
	patch := client.MergeFrom(cfg.DeepCopy())
	controllerutil.RemoveFinalizer(cfg, Finalizer)
	if err := r.Client.Patch(ctx, cfg, patch); err != nil {
		return fmt.Errorf("removing the finalizer: %w", err)
	}
	forgetMetrics(cfg)
	return nil
}

// orphan removes cfg's owner reference from obj, so that it outlives cfg.
func (r *ApiServerConfigReconciler) orphan(ctx context.Context, cfg *v1alpha1.ApiServerConfig, obj client.Object) error {
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return client.IgnoreNotFound(err)
	}
	refs := obj.GetOwnerReferences()
	kept := slices.DeleteFunc(slices.Clone(refs), func(ref metav1.OwnerReference) bool { return ref.UID == cfg.UID })
	if len(kept) == len(refs) {
		return nil
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	obj.SetOwnerReferences(kept)
	if err := r.Client.Patch(ctx, obj, patch); err != nil {
		return fmt.Errorf("keeping %s (pkiRetention Retain): %w", obj.GetName(), err)
	}
	return nil
}

// ownedObject is an empty object of an owned kind.
func ownedObject(kind string) (client.Object, error) {
	switch kind {
	case "PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "Deployment":
		return &appsv1.Deployment{}, nil
	case "Service":
		return &corev1.Service{}, nil
	case apiserver.KindConfigMap:
		return &corev1.ConfigMap{}, nil
	case apiserver.KindSecret:
		return &corev1.Secret{}, nil
	}
	return nil, fmt.Errorf("the operator owns no %s", kind)
}
