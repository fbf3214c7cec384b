// Package tenantindex holds every ApiServerConfig of the management cluster,
// and the data deleted tenants kept, for the checks that compare a tenant
// with all the others: admission (the names of its objects, its etcd
// keys), the start of a tenant on its prefix and the deletion of its data
// (no other tenant's keys may be under its prefix).
package tenantindex

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// Tenants is an informer cache of every ApiServerConfig, whatever the
// instance's --watch-namespace or --watch-filter (another instance's
// tenants share etcd servers and namespaces too), indexed by the names of
// their objects and by their etcd keyspace: each check is a few exact
// lookups, not a list. Add it to the manager (it is a Runnable that every
// replica runs).
type Tenants struct {
	cache cache.Cache
	// retained: the index holds the Secrets deleted tenants kept (see
	// WithoutRetainedData).
	retained bool
	// marks checks the proofs of Retain marks (WithMarkProofs).
	marks *apiserver.Ownership
}

// Option changes what the index holds.
type Option func(*options)

type options struct {
	withoutRetained bool
	retainedIn      string
	marks           *apiserver.Ownership
}

// WithMarkProofs checks the Retain marks with the operator's ownership
// key: a proven mark holds in every namespace (RetainedOverlapping), and
// a tenant takes back only what a mark the operator wrote names
// (RetainedBy).
func WithMarkProofs(o *apiserver.Ownership) Option { return func(opts *options) { opts.marks = o } }

// RetainedDataIn reads the Secrets deleted tenants kept in namespace only:
// an instance with --watch-namespace, whose Secret rights are that
// namespace's (config/namespaced), compares a tenant with the data kept in
// its own namespace anyway (see RetainedOverlapping).
func RetainedDataIn(namespace string) Option { return func(o *options) { o.retainedIn = namespace } }

// WithoutRetainedData leaves out the Secrets deleted tenants kept: their
// metadata is all the index reads of them, but reading it takes the right
// to list and watch every Secret, which the webhook's ServiceAccount does
// not have (config/webhook). RetainedOverlapping and RetainedBy then fail.
func WithoutRetainedData() Option { return func(o *options) { o.withoutRetained = true } }

// errNoRetainedData: the index was made WithoutRetainedData.
var errNoRetainedData = errors.New("the index of every ApiServerConfig holds no retained data (WithoutRetainedData)")

const (
	generatedNamesIndex = "tenantindex.generatedNames"
	keyspaceIndex       = "tenantindex.etcdKeyspace"
)

// retainedSecret is the metadata of a Secret a deleted tenant kept (only
// metadata is held: the index never holds key material).
func retainedSecret() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	return m
}

func retainedSecrets() *metav1.PartialObjectMetadataList {
	m := &metav1.PartialObjectMetadataList{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret").GroupVersion().WithKind("SecretList"))
	return m
}

// New makes the index; it fills once started.
func New(config *rest.Config, scheme *runtime.Scheme, opts ...Option) (*Tenants, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	marked, err := labels.NewRequirement(apiserver.RetainedDataLabel, selection.Exists, nil)
	if err != nil {
		return nil, fmt.Errorf("selecting the Secrets deleted tenants kept: %w", err)
	}
	byObject := map[client.Object]cache.ByObject{&v1alpha1.ApiServerConfig{}: {}}
	if !o.withoutRetained {
		retained := cache.ByObject{Label: labels.NewSelector().Add(*marked)}
		if o.retainedIn != "" {
			retained.Namespaces = map[string]cache.Config{o.retainedIn: {}}
		}
		byObject[retainedSecret()] = retained
	}
	c, err := cache.New(config, cache.Options{
		Scheme:           scheme,
		ByObject:         byObject,
		DefaultTransform: cache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, fmt.Errorf("making the index of every ApiServerConfig: %w", err)
	}
	ctx := context.Background()
	if err := c.IndexField(ctx, &v1alpha1.ApiServerConfig{}, generatedNamesIndex, func(obj client.Object) []string {
		return apiserver.GeneratedNames(obj.GetName())
	}); err != nil {
		return nil, fmt.Errorf("indexing the ApiServerConfigs by the names of their objects: %w", err)
	}
	if err := c.IndexField(ctx, &v1alpha1.ApiServerConfig{}, keyspaceIndex, func(obj client.Object) []string {
		cfg, ok := obj.(*v1alpha1.ApiServerConfig)
		if !ok {
			return nil
		}
		return apiserver.KeyspaceOf(&cfg.Spec.Etcd).IndexKeys()
	}); err != nil {
		return nil, fmt.Errorf("indexing the ApiServerConfigs by their etcd keyspace: %w", err)
	}
	if o.withoutRetained {
		return &Tenants{cache: c}, nil
	}
	if err := c.IndexField(ctx, retainedSecret(), keyspaceIndex, func(obj client.Object) []string {
		k, ok, err := apiserver.RetainedKeyspace(obj.GetAnnotations())
		if !ok || err != nil {
			return nil
		}
		return k.IndexKeys()
	}); err != nil {
		return nil, fmt.Errorf("indexing the Secrets deleted tenants kept by the etcd keyspace of their data: %w", err)
	}
	return &Tenants{cache: c, retained: true, marks: o.marks}, nil
}

// Start fills the index and keeps it current until ctx ends.
func (t *Tenants) Start(ctx context.Context) error { return t.cache.Start(ctx) }

// WaitForCacheSync waits until the index holds every ApiServerConfig,
// false when ctx ends first.
func (t *Tenants) WaitForCacheSync(ctx context.Context) bool { return t.cache.WaitForCacheSync(ctx) }

// Ready is nil once the index is filled: the webhook, which judges a spec
// against every other, is not ready before.
func (t *Tenants) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if !t.cache.WaitForCacheSync(ctx) {
		return errors.New("the index of ApiServerConfigs is not filled yet")
	}
	return nil
}

// NeedLeaderElection is false: every replica's webhook needs the index.
func (t *Tenants) NeedLeaderElection() bool { return false }

// HoldsRetainedData says whether the index holds the data deleted tenants
// kept (it was not made WithoutRetainedData).
func (t *Tenants) HoldsRetainedData() bool { return t.retained }

// Reader reads the ApiServerConfigs the index holds.
func (t *Tenants) Reader() client.Reader { return t.cache }

// NameCollisions are the other ApiServerConfigs of cfg's namespace that
// give one of their objects a name cfg would give one of its own, each with
// those names (kind/name).
func (t *Tenants) NameCollisions(ctx context.Context, cfg *v1alpha1.ApiServerConfig) (map[string][]string, error) {
	clashes := map[string][]string{}
	for _, name := range apiserver.GeneratedNames(cfg.Name) {
		others := &v1alpha1.ApiServerConfigList{}
		if err := t.cache.List(ctx, others, client.InNamespace(cfg.Namespace), client.MatchingFields{generatedNamesIndex: name}); err != nil {
			return nil, fmt.Errorf("looking up the ApiServerConfigs whose objects are named %s: %w", name, err)
		}
		for _, o := range others.Items {
			if o.Name != cfg.Name {
				clashes[o.Name] = append(clashes[o.Name], name)
			}
		}
	}
	return clashes, nil
}

// Overlapping are the other ApiServerConfigs, in any namespace, whose etcd
// keyspace overlaps cfg's: a server in common, and prefixes one within the
// other. Sorted by namespace and name.
func (t *Tenants) Overlapping(ctx context.Context, cfg *v1alpha1.ApiServerConfig) ([]v1alpha1.ApiServerConfig, error) {
	found := map[string]v1alpha1.ApiServerConfig{}
	for _, q := range apiserver.KeyspaceOf(&cfg.Spec.Etcd).OverlapQueries() {
		list := &v1alpha1.ApiServerConfigList{}
		if err := t.cache.List(ctx, list, client.MatchingFields{keyspaceIndex: q}); err != nil {
			return nil, fmt.Errorf("looking up the ApiServerConfigs that store on the same etcd: %w", err)
		}
		for _, o := range list.Items {
			if o.Namespace != cfg.Namespace || o.Name != cfg.Name {
				found[o.Namespace+"/"+o.Name] = o
			}
		}
	}
	out := make([]v1alpha1.ApiServerConfig, 0, len(found))
	for _, k := range slices.Sorted(maps.Keys(found)) {
		out = append(out, found[k])
	}
	return out, nil
}

// Named is how another tenant is named to the owner of a tenant in
// namespace: by its name in the same namespace, and only as "an
// ApiServerConfig in another namespace" otherwise (that it exists is all a
// refusal or a condition may tell of another namespace).
func Named(other *v1alpha1.ApiServerConfig, namespace string) string {
	if other.Namespace == namespace {
		return "ApiServerConfig " + other.Name
	}
	return "an ApiServerConfig in another namespace"
}

// Retained is the data a tenant deleted with deletionPolicy Retain kept,
// with the Secrets that read it.
type Retained struct {
	// Namespace and Name are the deleted ApiServerConfig's: one created
	// again with them takes the data back.
	Namespace, Name string
	Keyspace        apiserver.EtcdKeyspace
}

// RetainedOverlapping is the data that deleted tenants of other names kept
// and whose keyspace overlaps cfg's: cfg may not store there, nor delete
// it. A mark of cfg's namespace holds whoever wrote it (a forged one
// blocks, it exposes nothing); one of another namespace holds when it
// carries the operator's proof (WithMarkProofs), and otherwise not:
// whoever may create a Secret there could forge one and so hold every
// tenant of a shared etcd. Sorted by namespace and name.
func (t *Tenants) RetainedOverlapping(ctx context.Context, cfg *v1alpha1.ApiServerConfig) ([]Retained, error) {
	if !t.retained {
		return nil, errNoRetainedData
	}
	var where []client.ListOption
	if t.marks == nil {
		where = append(where, client.InNamespace(cfg.Namespace))
	}
	found := map[string]Retained{}
	for _, q := range apiserver.KeyspaceOf(&cfg.Spec.Etcd).OverlapQueries() {
		list := retainedSecrets()
		if err := t.cache.List(ctx, list, append(where, client.MatchingFields{keyspaceIndex: q})...); err != nil {
			return nil, fmt.Errorf("looking up the data deleted tenants kept on the same etcd: %w", err)
		}
		for i := range list.Items {
			s := &list.Items[i]
			name := s.Labels[apiserver.NameLabel]
			if s.Namespace == cfg.Namespace && name == cfg.Name {
				continue
			}
			if s.Namespace != cfg.Namespace && !t.marks.MarkProven(s) {
				continue
			}
			k, _, _ := apiserver.RetainedKeyspace(s.Annotations)
			found[s.Namespace+"/"+name] = Retained{Namespace: s.Namespace, Name: name, Keyspace: k}
		}
	}
	out := make([]Retained, 0, len(found))
	for _, k := range slices.Sorted(maps.Keys(found)) {
		out = append(out, found[k])
	}
	return out, nil
}

// RetainedBy is the keyspace of the data the deleted ApiServerConfig
// namespace/name kept, as its retained Secrets say; ok is false when it
// kept none. With WithMarkProofs, only a mark the operator wrote counts
// (proven, or written before its key).
func (t *Tenants) RetainedBy(ctx context.Context, namespace, name string) (k apiserver.EtcdKeyspace, ok bool, err error) {
	if !t.retained {
		return k, false, errNoRetainedData
	}
	list := retainedSecrets()
	if err := t.cache.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{apiserver.NameLabel: name}); err != nil {
		return k, false, fmt.Errorf("looking up the data ApiServerConfig %s/%s kept: %w", namespace, name, err)
	}
	for i := range list.Items {
		if t.marks != nil && !t.marks.MarkTrusted(&list.Items[i]) {
			continue
		}
		if k, ok, err = apiserver.RetainedKeyspace(list.Items[i].Annotations); ok || err != nil {
			return k, ok, err
		}
	}
	return k, false, nil
}

// NamedRetained is how the data another tenant kept is named to the owner
// of a tenant in namespace (see Named).
func NamedRetained(r Retained, namespace string) string {
	if r.Namespace == namespace {
		return "the deleted ApiServerConfig " + r.Name
	}
	return "a deleted ApiServerConfig in another namespace"
}
