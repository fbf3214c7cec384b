package webhooks

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/admission"
)

// dryRunField maps a field of an object the operator applies to the spec
// field whose value it carries, by the longest prefix of the object's
// field (as the API server names it in a refusal).
type dryRunField struct {
	object string
	spec   *field.Path
}

var (
	serviceSpec      = field.NewPath("spec", "serving", "service")
	konnectivitySpec = field.NewPath("spec", "konnectivity")
	podSpec          = "spec.template.spec."
	// dryRunFields are the fields of the Service, the Deployment and the
	// budget that come from the spec; what none of them matches is placed
	// at the object's own field (dryRunDefault).
	dryRunFields = map[string][]dryRunField{
		"Service": {
			{"spec.ports[0].nodePort", serviceSpec.Child("nodePort")},
			{"spec.ports[0].port", serviceSpec.Child("port")},
			{"spec.ports", serviceSpec.Child("port")},
			{"spec.type", serviceSpec.Child("type")},
			{"metadata.annotations", serviceSpec.Child("annotations")},
		},
		// The konnectivity agents' Service (its type is the tenant
		// Service's).
		konnectivityServiceKind: {
			{"spec.ports[0].nodePort", konnectivitySpec.Child("nodePort")},
			{"spec.ports", konnectivitySpec.Child("port")},
			{"spec.type", serviceSpec.Child("type")},
			{"metadata.annotations", konnectivitySpec.Child("serviceAnnotations")},
		},
		"Deployment": {
			{"spec.replicas", field.NewPath("spec", "masterCount")},
			{podSpec + "containers[0].resources", field.NewPath("spec", "resources")},
			{podSpec + "containers[0].image", field.NewPath("spec", "image")},
			{podSpec + "nodeSelector", field.NewPath("spec", "nodeSelector")},
			{podSpec + "tolerations", field.NewPath("spec", "tolerations")},
			{podSpec + "affinity", field.NewPath("spec", "affinity")},
			{podSpec + "topologySpreadConstraints", field.NewPath("spec", "topologySpreadConstraints")},
			{podSpec + "priorityClassName", field.NewPath("spec", "priorityClassName")},
		},
	}
	dryRunDefault = map[string]*field.Path{
		"Service":               serviceSpec,
		konnectivityServiceKind: konnectivitySpec,
		"Deployment":            field.NewPath("spec"),
		"PodDisruptionBudget":   field.NewPath("spec", "masterCount"),
		// The spec's egress rules come first in the policy's, at the same
		// index (the refusal's field names it).
		"NetworkPolicy": field.NewPath("spec", "networkPolicy", "egress"),
	}
)

// konnectivityServiceKind maps the fields of the agents' Service, a
// Service whose values come from spec.konnectivity.
const konnectivityServiceKind = "KonnectivityService"

// specFieldOf is the spec field that produced the field f of an object of
// kind.
func specFieldOf(kind, f string) *field.Path {
	best, length := dryRunDefault[kind], 0
	for _, m := range dryRunFields[kind] {
		if (f == m.object || strings.HasPrefix(f, m.object+".") || strings.HasPrefix(f, m.object+"[")) && len(m.object) > length {
			best, length = m.spec, len(m.object)
		}
	}
	return best
}

// DefaultManagementNodePortRange is kube-apiserver's default
// --service-node-port-range, which the management cluster most likely has.
const DefaultManagementNodePortRange = "30000-32767"

// DryRun asks the management cluster, with a server-side dry run, whether
// it would take the objects of cfg that carry values of the spec (its
// Service, Deployment, disruption budget and NetworkPolicy): a node port already taken,
// requests above limits, a policy engine's refusal. The API server
// validates and runs its admission on them and stores nothing. What it
// refuses is returned at the spec field that produced it; a failure to ask
// (the management cluster overloaded) is returned as a warning, not a
// refusal: the controller reports such objects in status anyway.
//
// A dry run does not check that a node port lies in the cluster's range
// (k8s.io/kubernetes' portallocator checks only that it is free when it
// does not allocate), and no API tells the range: nodePorts, the
// management cluster's --service-node-port-range, is checked here.
//
// live reads what exists from the API server, not from a cache, which
// holds only the operator's own objects: it says whose an object in a new
// tenant's way is.
func DryRun(ctx context.Context, c client.Client, live client.Reader, cfg *v1alpha1.ApiServerConfig, created bool, nodePorts *utilnet.PortRange) (field.ErrorList, []string) {
	if s := cfg.Spec.Serving.Service; s.NodePort != nil && nodePorts != nil && s.Type != corev1.ServiceTypeClusterIP && !nodePorts.Contains(int(*s.NodePort)) {
		return field.ErrorList{field.Invalid(serviceSpec.Child("nodePort"), *s.NodePort, fmt.Sprintf(
			"the management cluster's node ports are %s (its --service-node-port-range, as the operator's --management-node-port-range says): choose one of them, or leave nodePort out to have one allocated", nodePorts))}, nil
	}
	if k, s := cfg.Spec.Konnectivity, cfg.Spec.Serving.Service; k != nil && k.NodePort != nil && nodePorts != nil && s.Type != corev1.ServiceTypeClusterIP && !nodePorts.Contains(int(*k.NodePort)) {
		return field.ErrorList{field.Invalid(konnectivitySpec.Child("nodePort"), *k.NodePort, fmt.Sprintf(
			"the management cluster's node ports are %s (its --service-node-port-range, as the operator's --management-node-port-range says): choose one of them, or leave nodePort out to have one allocated", nodePorts))}, nil
	}
	completed, err := apiserver.Complete(cfg, apiserver.Inputs{})
	if err != nil {
		return field.ErrorList{field.Invalid(field.NewPath("spec"), "", err.Error())}, nil
	}
	m, env, err := admission.StandIns(completed)
	if err != nil {
		return nil, []string{fmt.Sprintf("the management cluster was not asked whether it takes the tenant's objects: %v", err)}
	}
	objs, err := apiserver.Desired(completed, m, env)
	if err != nil {
		return field.ErrorList{field.Invalid(field.NewPath("spec"), "", fmt.Sprintf("rendering the tenant's objects: %v", err))}, nil
	}
	asked := []client.Object{objs.Service, objs.Deployment}
	if objs.KonnectivityService != nil {
		asked = append(asked, objs.KonnectivityService)
	}
	if objs.PodDisruptionBudget != nil {
		asked = append(asked, objs.PodDisruptionBudget)
	}
	if objs.NetworkPolicy != nil {
		asked = append(asked, objs.NetworkPolicy)
	}
	results := make([]error, len(asked))
	g, gctx := errgroup.WithContext(ctx)
	for i, obj := range asked {
		g.Go(func() error {
			results[i] = dryRunWrite(gctx, c, live, cfg, obj, created)
			return nil
		})
	}
	_ = g.Wait() // the results hold the errors
	var errs field.ErrorList
	var warnings []string
	for i, err := range results {
		if err == nil {
			continue
		}
		kind := asked[i].GetObjectKind().GroupVersionKind().Kind
		if taken := (*nameTaken)(nil); errors.As(err, &taken) {
			errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), cfg.Name, taken.Error()))
			continue
		}
		fields := kind
		if objs.KonnectivityService != nil && asked[i] == client.Object(objs.KonnectivityService) {
			fields = konnectivityServiceKind
		}
		if refused := refusal(kind, fields, asked[i].GetName(), err); refused != nil {
			errs = append(errs, refused...)
			continue
		}
		warnings = append(warnings, fmt.Sprintf("the management cluster could not say whether it takes %s %s (it is checked again when the operator applies it): %v", kind, asked[i].GetName(), err))
	}
	return errs, warnings
}

// dryRunWrite writes obj as the controller would, without storing it: a
// create for a new tenant's (cheaper for the management cluster than an
// apply, which computes the fields' owners), a server-side apply for an
// object that exists. A new tenant's object that exists already and is not
// its own (apiserver.ClaimOf) is a *nameTaken: the operator would leave it
// alone and the tenant would never start.
func dryRunWrite(ctx context.Context, c client.Client, live client.Reader, cfg *v1alpha1.ApiServerConfig, obj client.Object, created bool) error {
	// Without blockOwnerDeletion: where OwnerReferencesPermissionEnforcement
	// runs (OpenShift), setting it takes the right to update the owner's
	// finalizers, which the controllers have and the webhook's
	// ServiceAccount does not; it changes nothing else a dry run judges.
	obj = obj.DeepCopyObject().(client.Object)
	refs := obj.GetOwnerReferences()
	for i := range refs {
		refs[i].BlockOwnerDeletion = nil
	}
	obj.SetOwnerReferences(refs)
	if created {
		err := c.Create(ctx, obj.DeepCopyObject().(client.Object), client.DryRunAll, client.FieldOwner(apiserver.FieldOwner))
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		existing := &metav1.PartialObjectMetadata{}
		existing.SetGroupVersionKind(obj.GetObjectKind().GroupVersionKind())
		if err := live.Get(ctx, client.ObjectKeyFromObject(obj), existing); err != nil {
			return err
		}
		if claim := apiserver.ClaimOf(cfg.Name, cfg.UID, existing); !claim.Own() && !claim.Predecessor {
			return &nameTaken{kind: obj.GetObjectKind().GroupVersionKind().Kind, namespace: obj.GetNamespace(), name: obj.GetName(), holder: claim.Holder}
		}
	}
	u, err := apiserver.ApplyForm(obj)
	if err != nil {
		return err
	}
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
		client.FieldOwner(apiserver.FieldOwner), client.ForceOwnership, client.DryRunAll)
}

// refusal turns the management cluster's refusal of the object name of
// kind into errors at the spec fields that produced what it refused (as
// the fields of dryRunFields[fields]); nil for an error that is no refusal
// of the object (the API server could not answer).
func refusal(kind, fields, name string, err error) field.ErrorList {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || transient(err) {
		return nil
	}
	s := status.Status()
	prefix := fmt.Sprintf("the management cluster refuses the tenant's %s %s", kind, name)
	var errs field.ErrorList
	if s.Details != nil {
		for _, cause := range s.Details.Causes {
			errs = append(errs, field.Invalid(specFieldOf(fields, cause.Field), field.OmitValueType{}, fmt.Sprintf("%s: %s: %s", prefix, cause.Field, cause.Message)))
		}
	}
	if len(errs) == 0 {
		errs = append(errs, field.Invalid(specFieldOf(fields, ""), field.OmitValueType{}, fmt.Sprintf("%s: %s", prefix, s.Message)))
	}
	return errs
}

// transient: the API server could not answer now, which says nothing of
// the object.
func transient(err error) bool {
	return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) || apierrors.IsUnexpectedServerError(err)
}

// nameTaken says that an object of a name a new ApiServerConfig would give
// one of its objects exists and is someone else's.
type nameTaken struct {
	kind, namespace, name, holder string
}

func (e *nameTaken) Error() string {
	return fmt.Sprintf("the name gives the tenant's %s the name %s, and %s/%s exists and belongs to %s (the operator never takes over an object that is not its own): choose another name, or delete or rename that %s",
		e.kind, e.name, e.namespace, e.name, e.holder, e.kind)
}
