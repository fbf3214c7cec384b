package tenants

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// referenceIndex indexes ApiServerConfigs by the objects their spec names,
// as "Kind/name", so that a change of one finds the ApiServerConfigs to
// reconcile.
const referenceIndex = "spec.references"

func referenceKey(kind, name string) string { return kind + "/" + name }

func indexReferences(obj client.Object) []string {
	cfg, ok := obj.(*v1alpha1.ApiServerConfig)
	if !ok {
		return nil
	}
	var keys []string
	for _, ref := range apiserver.References(&cfg.Spec) {
		keys = append(keys, referenceKey(ref.Kind, ref.Name))
	}
	return keys
}

// referenced are the user's objects a spec names, read once per pass with
// the API reader (the cache holds only the operator's own objects). It
// serves them to the steps that use them as a client.Reader.
type referenced struct {
	secrets    map[string]*corev1.Secret
	configMaps map[string]*corev1.ConfigMap
}

// readReferences reads every object the spec names and checks its keys. A
// missing object or key is a *missingReference, a CA that is not PEM
// certificates an *invalidReference.
func readReferences(ctx context.Context, reader client.Reader, cfg *v1alpha1.ApiServerConfig) (*referenced, error) {
	refs := &referenced{secrets: map[string]*corev1.Secret{}, configMaps: map[string]*corev1.ConfigMap{}}
	for _, ref := range apiserver.References(&cfg.Spec) {
		get := func(obj client.Object) error {
			err := reader.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: ref.Name}, obj)
			switch {
			case apierrors.IsNotFound(err):
				return &missingReference{ref: ref, namespace: cfg.Namespace}
			case err != nil:
				return fmt.Errorf("reading %s %s/%s named by %s: %w", ref.Kind, cfg.Namespace, ref.Name, ref.Field, err)
			}
			return nil
		}
		var has func(key string) bool
		var value func(key string) []byte
		switch ref.Kind {
		case apiserver.KindSecret:
			s, ok := refs.secrets[ref.Name]
			if !ok {
				s = &corev1.Secret{}
				if err := get(s); err != nil {
					return nil, err
				}
				refs.secrets[ref.Name] = s
			}
			has = func(k string) bool { return len(s.Data[k]) > 0 }
			value = func(k string) []byte { return s.Data[k] }
		case apiserver.KindConfigMap:
			cm, ok := refs.configMaps[ref.Name]
			if !ok {
				cm = &corev1.ConfigMap{}
				if err := get(cm); err != nil {
					return nil, err
				}
				refs.configMaps[ref.Name] = cm
			}
			has = func(k string) bool { return cm.Data[k] != "" || len(cm.BinaryData[k]) > 0 }
			value = func(k string) []byte {
				if v, ok := cm.BinaryData[k]; ok {
					return v
				}
				return []byte(cm.Data[k])
			}
		default:
			return nil, fmt.Errorf("%s names a %s, which the operator cannot read", ref.Field, ref.Kind)
		}
		var missing []string
		for _, k := range ref.Keys {
			if !has(k) {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 {
			return nil, &missingReference{ref: ref, namespace: cfg.Namespace, keys: missing}
		}
		for _, k := range ref.Keys {
			if err := checkKey(ref, value(k)); err != nil {
				return nil, &invalidReference{ref: ref, namespace: cfg.Namespace, key: k, err: err}
			}
		}
	}
	return refs, nil
}

// checkKey refuses what ref's keys may not hold: an issuer's CA that is
// not PEM certificates, a webhook kubeconfig that reads files of the pod
// or runs commands.
func checkKey(ref apiserver.Reference, data []byte) error {
	if ref.PEM {
		if _, err := certutil.ParseCertsPEM(data); err != nil {
			return fmt.Errorf("holds no PEM certificate (%w): put the issuer's CA certificates there, PEM encoded", err)
		}
	}
	if ref.Kubeconfig {
		return apiserver.CheckWebhookKubeconfig(data)
	}
	return nil
}

// Get serves the objects read by readReferences; any other is not found.
func (r *referenced) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	switch o := obj.(type) {
	case *corev1.Secret:
		if s, ok := r.secrets[key.Name]; ok {
			s.DeepCopyInto(o)
			return nil
		}
		return apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, key.Name)
	case *corev1.ConfigMap:
		if cm, ok := r.configMaps[key.Name]; ok {
			cm.DeepCopyInto(o)
			return nil
		}
		return apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, key.Name)
	}
	return fmt.Errorf("%T is not an object a spec references", obj)
}

// List is not served: the steps read referenced objects by name.
func (r *referenced) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return fmt.Errorf("referenced objects are read by name")
}

// referenceSources watch the metadata of every Secret and ConfigMap with a
// cache of their own (the manager's cache holds only the operator's
// objects), so that creating or fixing an object a spec names brings its
// ApiServerConfigs back at once. Only metadata is kept: no Secret data sits
// in the operator's memory.
func (r *Reconciler) referenceSources(c cache.Cache, cl client.Client) []source.TypedSource[reconcile.Request] {
	var out []source.TypedSource[reconcile.Request]
	for _, kind := range []string{apiserver.KindSecret, apiserver.KindConfigMap} {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(kind))
		toConfigs := func(ctx context.Context, o client.Object) []reconcile.Request {
			list := &v1alpha1.ApiServerConfigList{}
			if err := cl.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingFields{referenceIndex: referenceKey(kind, o.GetName())}); err != nil {
				return nil
			}
			reqs := make([]reconcile.Request, 0, len(list.Items))
			for _, cfg := range list.Items {
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: cfg.Namespace, Name: cfg.Name}})
			}
			return reqs
		}
		out = append(out, source.Kind(c, client.Object(obj), handler.EnqueueRequestsFromMapFunc(toConfigs)))
	}
	return out
}
