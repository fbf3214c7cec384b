package controllers

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// +kubebuilder:webhook:path=/validate-controlplane-apiserver-operator-dev-v1alpha1-apiserverconfig,mutating=false,failurePolicy=fail,sideEffects=None,groups=controlplane.apiserver-operator.dev,resources=apiserverconfigs,verbs=create;update,versions=v1alpha1,name=vapiserverconfig.controlplane.apiserver-operator.dev,admissionReviewVersions=v1,timeoutSeconds=10

// ApiServerConfigValidator is the validating admission webhook for what
// the CRD's CEL rules cannot check: the spec against the flags, feature
// gates, admission plugins and resources of the kube-apiserver it will run
// (apiserver.Validate). A refused spec never reaches a pod.
type ApiServerConfigValidator struct{}

var _ admission.Validator[*v1alpha1.ApiServerConfig] = ApiServerConfigValidator{}

// SetupWebhookWithManager serves the validator from the manager's webhook
// server.
func SetupWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &v1alpha1.ApiServerConfig{}).
		WithValidator(ApiServerConfigValidator{}).
		Complete()
}

// ValidateCreate checks a new ApiServerConfig.
func (ApiServerConfigValidator) ValidateCreate(_ context.Context, obj *v1alpha1.ApiServerConfig) (admission.Warnings, error) {
	return validate(obj)
}

// ValidateUpdate checks the new state of an ApiServerConfig. Transition
// rules (no downgrade, immutable primary range) are the CRD's.
func (ApiServerConfigValidator) ValidateUpdate(_ context.Context, _, newObj *v1alpha1.ApiServerConfig) (admission.Warnings, error) {
	return validate(newObj)
}

// ValidateDelete allows every deletion.
func (ApiServerConfigValidator) ValidateDelete(context.Context, *v1alpha1.ApiServerConfig) (admission.Warnings, error) {
	return nil, nil
}

func validate(obj *v1alpha1.ApiServerConfig) (admission.Warnings, error) {
	errs, warnings := apiserver.Validate(obj)
	if len(errs) > 0 {
		return warnings, apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind("ApiServerConfig").GroupKind(), obj.Name, errs)
	}
	return warnings, nil
}
