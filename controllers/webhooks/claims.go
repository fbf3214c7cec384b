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

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantindex"
)

// nameCollisions refuses a new ApiServerConfig that would give one of its
// objects the name of another ApiServerConfig's object in the namespace:
// tenant x-front-proxy's CA would be x-front-proxy-ca, tenant x's
// front-proxy CA.
func nameCollisions(ctx context.Context, tenants *tenantindex.Tenants, cfg *v1alpha1.ApiServerConfig) (field.ErrorList, error) {
	clashes, err := tenants.NameCollisions(ctx, cfg)
	if err != nil {
		return nil, err
	}
	var errs field.ErrorList
	for _, other := range slices.Sorted(maps.Keys(clashes)) {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), cfg.Name, fmt.Sprintf(
			"ApiServerConfig %s in this namespace already names its objects as this one would name its own (%s): choose another name (two names collide when one is the other with a suffix the operator uses, such as x and x-front-proxy)",
			other, strings.Join(clashes[other], ", "))))
	}
	return errs, nil
}

// sharedKeyspaces refuses an ApiServerConfig whose etcd keyspace overlaps
// another's, in any namespace: both would read and write the same keys.
// Another namespace's tenant is not named to this one: that it exists is
// all it learns.
func sharedKeyspaces(ctx context.Context, tenants *tenantindex.Tenants, cfg *v1alpha1.ApiServerConfig) (field.ErrorList, error) {
	overlapping, err := tenants.Overlapping(ctx, cfg)
	if err != nil {
		return nil, err
	}
	prefix := apiserver.KeyspaceOf(&cfg.Spec.Etcd).Prefix
	if len(overlapping) == 0 {
		if !tenants.HoldsRetainedData() {
			// The webhook may not read Secrets (config/webhook): the
			// controllers hold such a tenant instead (RetainedKeyspace).
			return nil, nil
		}
		return retainedKeyspaces(ctx, tenants, cfg, prefix)
	}
	var others []string
	for _, o := range overlapping {
		other := tenantindex.Named(&o, cfg.Namespace)
		if o.Namespace == cfg.Namespace {
			other += fmt.Sprintf(" (prefix %s)", apiserver.KeyspaceOf(&o.Spec.Etcd).Prefix)
		}
		if !slices.Contains(others, other) {
			others = append(others, other)
		}
		ctrl.LoggerFrom(ctx).Info("Refused an etcd prefix that another tenant's overlaps", "apiServerConfig", klog.KObj(cfg),
			"other", klog.KObj(&o), "prefix", prefix)
	}
	slices.Sort(others)
	return field.ErrorList{field.Invalid(field.NewPath("spec", "etcd", "prefix"), prefix, fmt.Sprintf(
		"the keys under it, on the same etcd servers, are also the data of %s: two tenants would read and write each other's objects; choose a prefix that is neither within nor above another tenant's, such as /tenants/%s/%s",
		strings.Join(others, " and "), cfg.Namespace, cfg.Name))}, nil
}

// retainedKeyspaces refuses a prefix that overlaps the data a deleted
// tenant of another name kept (deletionPolicy Retain): it is still that
// tenant's, for an ApiServerConfig of its name to take back.
func retainedKeyspaces(ctx context.Context, tenants *tenantindex.Tenants, cfg *v1alpha1.ApiServerConfig, prefix string) (field.ErrorList, error) {
	retained, err := tenants.RetainedOverlapping(ctx, cfg)
	if err != nil || len(retained) == 0 {
		return nil, err
	}
	var others []string
	for _, r := range retained {
		other := tenantindex.NamedRetained(r, cfg.Namespace)
		if r.Namespace == cfg.Namespace {
			other += fmt.Sprintf(" (prefix %s)", r.Keyspace.Prefix)
		}
		if !slices.Contains(others, other) {
			others = append(others, other)
		}
	}
	ctrl.LoggerFrom(ctx).Info("Refused an etcd prefix that overlaps data a deleted tenant kept", "apiServerConfig", klog.KObj(cfg),
		"retainedBy", retained[0].Namespace+"/"+retained[0].Name, "prefix", prefix)
	return field.ErrorList{field.Invalid(field.NewPath("spec", "etcd", "prefix"), prefix, fmt.Sprintf(
		"the keys under it, on the same etcd servers, are data that %s kept (deletionPolicy Retain), with the keys that read it: they are for an ApiServerConfig of that name to take back; choose another prefix, such as /tenants/%s/%s, or delete that data and then the Secrets labelled %s",
		strings.Join(others, " and "), cfg.Namespace, cfg.Name, apiserver.RetainedDataLabel))}, nil
}
