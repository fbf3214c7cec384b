package webhooks

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	apiadmission "github.com/apiserver-operator/apiserver-operator/apiserver/admission"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantindex"
)

// +kubebuilder:webhook:path=/validate-controlplane-apiserver-operator-dev-v1alpha1-apiserverconfig,mutating=false,failurePolicy=fail,sideEffects=None,groups=controlplane.apiserver-operator.dev,resources=apiserverconfigs,verbs=create;update;delete,versions=v1alpha1,name=vapiserverconfig.controlplane.apiserver-operator.dev,admissionReviewVersions=v1,timeoutSeconds=10

// ApiServerConfigValidator is the validating admission webhook for what
// the CRD's CEL rules cannot check (apiadmission.Admission): the spec against
// the catalogs of the kube-apiserver it will run, the operator's policy,
// and then that kube-apiserver's own code judging the rendered command line
// and files. A refused spec never reaches a pod.
type ApiServerConfigValidator struct {
	Admission apiadmission.Admission
	// Client asks the management cluster, with a dry run, whether it takes
	// the tenant's objects (see DryRun); nil does not ask.
	Client client.Client
	// Live reads from the API server, not from a cache: whose an object
	// in a new tenant's way is (see DryRun).
	Live client.Reader
	// NodePorts is the management cluster's --service-node-port-range.
	NodePorts *utilnet.PortRange
	// Tenants are every ApiServerConfig, for the checks against the
	// others (see claims); nil skips them.
	Tenants *tenantindex.Tenants
}

var _ admission.Validator[*v1alpha1.ApiServerConfig] = ApiServerConfigValidator{}

// webhookBudget bounds the judging of one request, inside the webhook's
// timeoutSeconds, so that a slow validator gives a clear refusal rather
// than kube-apiserver's timeout.
const webhookBudget = 8 * time.Second

// SetupWithManager serves the webhooks from the manager's webhook server;
// the validator dry-runs the tenants' objects with the manager's client
// and compares each tenant with the others in tenants (which the caller
// adds to the manager). nodePorts is the management cluster's
// --service-node-port-range (DefaultManagementNodePortRange when empty).
func SetupWithManager(mgr ctrl.Manager, a apiadmission.Admission, nodePorts string, tenants *tenantindex.Tenants) error {
	ports, err := utilnet.ParsePortRange(cmp.Or(nodePorts, DefaultManagementNodePortRange))
	if err != nil {
		return fmt.Errorf("reading the management cluster's node port range %q: %w", nodePorts, err)
	}
	return ctrl.NewWebhookManagedBy(mgr, &v1alpha1.ApiServerConfig{}).
		WithDefaulter(ApiServerConfigDefaulter{}).
		WithValidator(ApiServerConfigValidator{Admission: a, Client: mgr.GetClient(), Live: mgr.GetAPIReader(), NodePorts: ports, Tenants: tenants}).
		Complete()
}

// ValidateCreate checks a new ApiServerConfig.
func (v ApiServerConfigValidator) ValidateCreate(ctx context.Context, obj *v1alpha1.ApiServerConfig) (admission.Warnings, error) {
	return v.validate(ctx, nil, obj)
}

// ValidateUpdate checks the new state of an ApiServerConfig and the change
// itself (the CRD has the rules CEL can express: no downgrade, immutable
// primary range).
func (v ApiServerConfigValidator) ValidateUpdate(ctx context.Context, oldObj, newObj *v1alpha1.ApiServerConfig) (admission.Warnings, error) {
	return v.validate(ctx, oldObj, newObj)
}

// ValidateDelete refuses the deletion of a protected tenant whose data it
// would delete, until the deletion is confirmed (Gates.CheckDelete).
func (v ApiServerConfigValidator) ValidateDelete(_ context.Context, obj *v1alpha1.ApiServerConfig) (admission.Warnings, error) {
	if v.Admission.Gates == nil {
		return nil, nil
	}
	if err := v.Admission.Gates.CheckDelete(obj); err != nil {
		return nil, apierrors.NewForbidden(v1alpha1.GroupVersion.WithResource("apiserverconfigs").GroupResource(), obj.Name, err)
	}
	return nil, nil
}

func (v ApiServerConfigValidator) validate(ctx context.Context, old, obj *v1alpha1.ApiServerConfig) (admission.Warnings, error) {
	ctx, cancel := context.WithTimeout(ctx, webhookBudget)
	defer cancel()
	if errs := v.claims(ctx, old, obj); len(errs) > 0 {
		// Cheaper than judging the spec, and a refusal either way.
		return nil, apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind("ApiServerConfig").GroupKind(), obj.Name, errs)
	}
	errs, warnings := v.Admission.Admit(ctx, old, obj)
	if len(errs) == 0 && v.Client != nil && obj.DeletionTimestamp.IsZero() && (old == nil || !apiequality.Semantic.DeepEqual(old.Spec, obj.Spec)) {
		// Only a new spec that kube-apiserver takes costs the management
		// cluster a request. A change of metadata alone (the finalizer's
		// removal, a label, a rotation's annotation) is not judged by it
		// again: a node port another Service took since, a namespace
		// being deleted, must not hold a deletion or a rotation.
		var dryRunWarnings []string
		errs, dryRunWarnings = DryRun(ctx, v.Client, v.Live, obj, old == nil, v.NodePorts)
		warnings = append(warnings, dryRunWarnings...)
	}
	for _, e := range errs {
		if e.Type == field.ErrorTypeInternal {
			ctrl.LoggerFrom(ctx).Error(e, "Admission could not judge an ApiServerConfig: it was refused", "apiServerConfig", klog.KObj(obj))
		}
	}
	if len(errs) > 0 {
		return warnings, apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind("ApiServerConfig").GroupKind(), obj.Name, errs)
	}
	return warnings, nil
}

// claims refuses an ApiServerConfig that would share what is another's:
// the names of its objects (checked when it is created: names do not
// change) and its etcd keys (checked again when spec.etcd changes).
func (v ApiServerConfigValidator) claims(ctx context.Context, old, obj *v1alpha1.ApiServerConfig) field.ErrorList {
	if v.Tenants == nil || !obj.DeletionTimestamp.IsZero() {
		return nil
	}
	var errs field.ErrorList
	if old == nil {
		collisions, err := nameCollisions(ctx, v.Tenants, obj)
		if err != nil {
			return field.ErrorList{field.InternalError(field.NewPath("metadata", "name"), err)}
		}
		errs = append(errs, collisions...)
	}
	if old == nil || !apiequality.Semantic.DeepEqual(old.Spec.Etcd, obj.Spec.Etcd) {
		shared, err := sharedKeyspaces(ctx, v.Tenants, obj)
		if err != nil {
			return field.ErrorList{field.InternalError(field.NewPath("spec", "etcd"), err)}
		}
		errs = append(errs, shared...)
	}
	return errs
}

// DrainingServer is a webhook server whose answers close their connection
// once Draining reports true (the manager got SIGTERM). kube-apiserver keeps
// connections to the webhook Service open; told to close them, it opens new
// ones, which the Service sends to the replicas that still serve, instead
// of sending a request on a connection the stopping server closes under it
// (an EOF that kube-apiserver does not retry: a failed write).
type DrainingServer struct {
	webhook.Server
	Draining func() bool
}

// Register serves hook at path, closing connections while draining.
func (s DrainingServer) Register(path string, hook http.Handler) {
	s.Server.Register(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.Draining() {
			w.Header().Set("Connection", "close")
		}
		hook.ServeHTTP(w, r)
	}))
}
