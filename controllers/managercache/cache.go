// Package managercache says what the operator's caches hold: the
// manager's (the objects the operator labelled, the apiserver pods and
// their ReplicaSets, each stripped to what the reconcilers read, and only
// proven Secrets and Deployments whole) and the tenant reconciler's cache
// of the users' Secrets and ConfigMaps (identity only). Every reconciler
// reads through the manager's cache, so what it keeps is decided here once.
package managercache

import (
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// CacheOptions limits the manager's cache of the kinds the operator owns
// to the objects it creates (they carry its managed-by label): caching every
// Secret or Deployment of a management cluster would cost memory and, for
// Secrets, read access the operator does not need. The users' Secrets are
// read with APIReader. Cached objects drop their managedFields, which the
// reconciler never reads and which are a large part of each object once
// server-side apply wrote it.
//
// With a watch filter (see apiserver.WatchFilterLabel) the cache holds
// only the ApiServerConfigs labelled with it and their objects; without
// one, only those without the label.
func CacheOptions(watchFilter string, owners *apiserver.Ownership) cache.Options {
	filter := WatchFilterSelector(watchFilter)
	owned := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{"app.kubernetes.io/managed-by": apiserver.FieldOwner}).Add(filter...)}
	// The apiserver pods carry the name label (they are the Deployment's,
	// not the operator's, so they have no managed-by label).
	apiserverPod, _ := labels.NewRequirement(apiserver.NameLabel, selection.Exists, nil)
	byObject := map[client.Object]cache.ByObject{
		&v1alpha1.ApiServerConfig{}:         {Label: labels.NewSelector().Add(filter...)},
		&v1alpha1.ApiServerBackup{}:         {Label: labels.NewSelector().Add(filter...)},
		&v1alpha1.ApiServerBackupSchedule{}: {Label: labels.NewSelector().Add(filter...)},
		&v1alpha1.AdminCredentialRequest{}:  {Label: labels.NewSelector().Add(filter...)},
		&corev1.Pod{}:                       {Label: labels.NewSelector().Add(*apiserverPod), Transform: keepPodStatus},
		// The apiservers' ReplicaSets, metadata only: which pods are the
		// tenant's Deployment's (tenantPods).
		ReplicaSetMetadata(): {Label: labels.NewSelector().Add(*apiserverPod), Transform: keepOwnership},
	}
	// Every kind a tenant owns: the operator's objects only, and a Secret
	// or Deployment whole only with its proof.
	for _, o := range apiserver.OwnedKinds() {
		byObject[o] = owned
		if apiserver.NeedsProof(o) {
			byObject[o] = cache.ByObject{Label: owned.Label, Transform: keepProven(owners)}
		}
	}
	return cache.Options{ByObject: byObject, DefaultTransform: cache.TransformStripManagedFields()}
}

// ReplicaSetMetadata is the metadata of a ReplicaSet, as the manager's
// cache holds those of the apiservers.
func ReplicaSetMetadata() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))
	return m
}

// WatchFilterSelector selects what an instance with watchFilter reconciles:
// the label's value, or, without a filter, no label.
func WatchFilterSelector(watchFilter string) []labels.Requirement {
	var r *labels.Requirement
	if watchFilter == "" {
		r, _ = labels.NewRequirement(apiserver.WatchFilterLabel, selection.DoesNotExist, nil)
	} else {
		r, _ = labels.NewRequirement(apiserver.WatchFilterLabel, selection.Equals, []string{watchFilter})
	}
	return []labels.Requirement{*r}
}

// ReferenceCacheOptions are those of the cache of the users' Secrets and
// ConfigMaps, which only says that one a spec may name was created,
// changed or deleted. A management cluster holds many of them (service
// account tokens, Helm releases), so each is kept as little as that needs:
// its namespace, name and resource version, nothing of its labels,
// annotations or owners, and none of the operator's own (the manager's
// cache has those). BenchmarkReferenceCache measures it with 100 000
// Secrets.
func ReferenceCacheOptions(scheme *runtime.Scheme, mapper meta.RESTMapper, namespaces map[string]cache.Config) cache.Options {
	notOwned, _ := labels.NewRequirement("app.kubernetes.io/managed-by", selection.NotEquals, []string{apiserver.FieldOwner})
	return cache.Options{
		Scheme: scheme, Mapper: mapper, DefaultNamespaces: namespaces,
		DefaultLabelSelector: labels.NewSelector().Add(*notOwned),
		DefaultTransform:     keepOnlyIdentity,
	}
}

// keepOnlyIdentity strips an object's metadata down to what says which
// object it is and which version of it.
func keepOnlyIdentity(obj any) (any, error) {
	o, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	return &metav1.PartialObjectMetadata{TypeMeta: o.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Namespace: o.Namespace, Name: o.Name, UID: o.UID, ResourceVersion: o.ResourceVersion,
		DeletionTimestamp: o.DeletionTimestamp,
	}}, nil
}

// keepProven keeps a Secret or Deployment whole in the cache only when it
// carries a valid proof that the operator wrote it (owners), or was created
// before the ownership key (a release that proved nothing wrote it, and the
// reconciler takes it once by the old rule): anyone who can write a Secret
// in a namespace can give it the operator's labels, and only the
// operator's objects are worth their data. Others keep their identity,
// their operator labels and their controller: what says whose name they
// hold (a NameConflict). The proof is checked for the tenant the name
// label or the controlling ApiServerConfig names.
func keepProven(owners *apiserver.Ownership) func(any) (any, error) {
	return func(obj any) (any, error) {
		o, ok := obj.(client.Object)
		if !ok || !apiserver.NeedsProof(o) {
			return obj, nil
		}
		o.SetManagedFields(nil)
		if owners != nil && o.GetCreationTimestamp().Time.Before(owners.Since()) {
			return o, nil
		}
		var uid types.UID
		tenants := []string{o.GetLabels()[apiserver.NameLabel]}
		if ref := metav1.GetControllerOfNoCopy(o); ref != nil && ref.Kind == "ApiServerConfig" {
			tenants = append(tenants, ref.Name)
			uid = ref.UID
		}
		for _, t := range tenants {
			if t != "" && owners.Proven(t, uid, o) {
				return o, nil
			}
		}
		kept := metav1.ObjectMeta{
			Namespace: o.GetNamespace(), Name: o.GetName(), UID: o.GetUID(), ResourceVersion: o.GetResourceVersion(),
			Generation: o.GetGeneration(), CreationTimestamp: o.GetCreationTimestamp(), DeletionTimestamp: o.GetDeletionTimestamp(),
		}
		for k, v := range o.GetLabels() {
			if strings.HasPrefix(k, "app.kubernetes.io/") || strings.HasPrefix(k, "controlplane.apiserver-operator.dev/") {
				if kept.Labels == nil {
					kept.Labels = map[string]string{}
				}
				kept.Labels[k] = v
			}
		}
		if ref := metav1.GetControllerOfNoCopy(o); ref != nil {
			kept.OwnerReferences = []metav1.OwnerReference{*ref}
		}
		switch v := o.(type) {
		case *corev1.Secret:
			return &corev1.Secret{TypeMeta: v.TypeMeta, ObjectMeta: kept, Type: v.Type}, nil
		case *appsv1.Deployment:
			return &appsv1.Deployment{TypeMeta: v.TypeMeta, ObjectMeta: kept}, nil
		}
		return obj, nil
	}
}

// podLabelsKept are the labels of a pod the cache keeps: the Deployment's
// selector and its ReplicaSets'.
var podLabelsKept = append(slices.Collect(maps.Keys(apiserver.SelectorLabels(""))), appsv1.DefaultDeploymentUniqueLabelKey)

// keepPodStatus strips a pod down to what the reconciler reads of the
// apiserver pods: its identity, selector labels, controller, the
// annotations of its template (config hash, version), its containers'
// names, readiness gates and node, and its status. Anyone who can create a
// pod in a tenant's namespace can give it the name label; its annotations,
// volumes, environment and commands then cost the operator nothing.
func keepPodStatus(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion, Generation: p.Generation,
		CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp, DeletionGracePeriodSeconds: p.DeletionGracePeriodSeconds,
	}, Status: p.Status}
	out.Labels = keysOf(p.Labels, podLabelsKept)
	out.Annotations = keysOf(p.Annotations, []string{apiserver.ConfigHashAnnotation, apiserver.VersionAnnotation})
	if ref := metav1.GetControllerOfNoCopy(p); ref != nil {
		out.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	names := func(cs []corev1.Container) []corev1.Container {
		out := make([]corev1.Container, 0, len(cs))
		for _, c := range cs {
			out = append(out, corev1.Container{Name: c.Name})
		}
		return out
	}
	out.Spec = corev1.PodSpec{InitContainers: names(p.Spec.InitContainers), Containers: names(p.Spec.Containers),
		ReadinessGates: p.Spec.ReadinessGates, NodeName: p.Spec.NodeName}
	return out, nil
}

// keysOf is what m holds of keys; nil when none.
func keysOf(m map[string]string, keys []string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := m[k]; ok {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// keepOwnership strips a ReplicaSet's metadata down to what says which
// Deployment controls it and which labels select it: a Deployment keeps
// up to ten old ReplicaSets, times every tenant.
func keepOwnership(obj any) (any, error) {
	o, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	out := &metav1.PartialObjectMetadata{TypeMeta: o.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Namespace: o.Namespace, Name: o.Name, UID: o.UID, ResourceVersion: o.ResourceVersion, Labels: o.Labels,
	}}
	if ref := metav1.GetControllerOfNoCopy(o); ref != nil {
		out.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	return out, nil
}
