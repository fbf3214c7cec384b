package webhooks

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// generatedNamesIndex indexes the ApiServerConfigs in the webhook's cache
// by the kind/name of every object they generate (apiserver.GeneratedNames).
const generatedNamesIndex = "webhooks.generatedNames"

func indexGeneratedNames(obj client.Object) []string {
	return apiserver.GeneratedNames(obj.GetName())
}

// keyspaceIndex indexes the ApiServerConfigs in the webhook's cache by
// their etcd keyspace (apiserver.EtcdKeyspace.IndexKeys), in every
// namespace.
const keyspaceIndex = "webhooks.etcdKeyspace"

func indexKeyspace(obj client.Object) []string {
	cfg, ok := obj.(*v1alpha1.ApiServerConfig)
	if !ok {
		return nil
	}
	return apiserver.KeyspaceOf(&cfg.Spec.Etcd).IndexKeys()
}

// sharedKeyspaces refuses an ApiServerConfig whose etcd keyspace overlaps
// another's, in any namespace: both would read and write the same keys.
// One indexed lookup per query key, in the cache. Another namespace's
// tenant is not named to this one: that it exists is all it learns.
func sharedKeyspaces(ctx context.Context, r client.Reader, cfg *v1alpha1.ApiServerConfig) (field.ErrorList, error) {
	mine := apiserver.KeyspaceOf(&cfg.Spec.Etcd)
	var others []string
	for _, q := range mine.OverlapQueries() {
		list := &v1alpha1.ApiServerConfigList{}
		if err := r.List(ctx, list, client.MatchingFields{keyspaceIndex: q}); err != nil {
			return nil, fmt.Errorf("looking up the ApiServerConfigs that store on the same etcd: %w", err)
		}
		for _, o := range list.Items {
			if o.Namespace == cfg.Namespace && o.Name == cfg.Name {
				continue
			}
			other := "an ApiServerConfig in another namespace"
			if o.Namespace == cfg.Namespace {
				other = fmt.Sprintf("ApiServerConfig %s (prefix %s)", o.Name, apiserver.KeyspaceOf(&o.Spec.Etcd).Prefix)
			}
			if !slices.Contains(others, other) {
				others = append(others, other)
				ctrl.LoggerFrom(ctx).Info("Refused an etcd prefix that another tenant's overlaps", "apiServerConfig", klog.KObj(cfg),
					"other", klog.KObj(&o), "prefix", mine.Prefix)
			}
		}
	}
	if len(others) == 0 {
		return nil, nil
	}
	slices.Sort(others)
	return field.ErrorList{field.Invalid(field.NewPath("spec", "etcd", "prefix"), mine.Prefix, fmt.Sprintf(
		"the keys under it, on the same etcd servers, are also the data of %s: two tenants would read and write each other's objects; choose a prefix that is neither within nor above another tenant's, such as /tenants/%s/%s",
		strings.Join(others, " and "), cfg.Namespace, cfg.Name))}, nil
}

// nameCollisions refuses a new ApiServerConfig that would give one of its
// objects the name of another ApiServerConfig's object in the namespace:
// tenant x-front-proxy's CA would be x-front-proxy-ca, tenant x's
// front-proxy CA. One indexed lookup per generated name, in the cache.
func nameCollisions(ctx context.Context, r client.Reader, cfg *v1alpha1.ApiServerConfig) (field.ErrorList, error) {
	clashes := map[string][]string{} // other tenant → kind/name
	for _, name := range apiserver.GeneratedNames(cfg.Name) {
		others := &v1alpha1.ApiServerConfigList{}
		if err := r.List(ctx, others, client.InNamespace(cfg.Namespace), client.MatchingFields{generatedNamesIndex: name}); err != nil {
			return nil, fmt.Errorf("looking up the ApiServerConfigs whose objects are named %s: %w", name, err)
		}
		for _, o := range others.Items {
			if o.Name != cfg.Name {
				clashes[o.Name] = append(clashes[o.Name], name)
			}
		}
	}
	var errs field.ErrorList
	for _, other := range slices.Sorted(maps.Keys(clashes)) {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), cfg.Name, fmt.Sprintf(
			"ApiServerConfig %s in this namespace already names its objects as this one would name its own (%s): choose another name (two names collide when one is the other with a suffix the operator uses, such as x and x-front-proxy)",
			other, strings.Join(clashes[other], ", "))))
	}
	return errs, nil
}
