package webhooks

import (
	"context"
	"encoding/json"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// +kubebuilder:webhook:path=/mutate-controlplane-apiserver-operator-dev-v1alpha1-apiserverconfig,mutating=true,failurePolicy=fail,sideEffects=None,groups=controlplane.apiserver-operator.dev,resources=apiserverconfigs,verbs=create;update,versions=v1alpha1,name=mapiserverconfig.controlplane.apiserver-operator.dev,admissionReviewVersions=v1,timeoutSeconds=5

// maxEtcdPrefix is spec.etcd.prefix's longest (the CRD's maxLength);
// randomSuffix is how many random characters make a generated name's
// prefix unique.
const (
	maxEtcdPrefix = 128
	randomSuffix  = 10
)

// ApiServerConfigDefaulter is the mutating admission webhook: it gives a
// new ApiServerConfig what it keeps from its creation on
// (apiserver.SetCreateDefaults: an etcd prefix of its own), and keeps it
// through updates that leave it out (kubectl replace with the manifest,
// which names none: the change of an immutable field, refused otherwise).
// A server-side apply of the manifest keeps it anyway: what a webhook sets
// belongs to no field manager.
type ApiServerConfigDefaulter struct{}

var _ admission.Defaulter[*v1alpha1.ApiServerConfig] = ApiServerConfigDefaulter{}

// Default implements admission.Defaulter.
func (ApiServerConfigDefaulter) Default(ctx context.Context, cfg *v1alpha1.ApiServerConfig) error {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return err
	}
	switch req.Operation {
	case admissionv1.Create:
		if cfg.Name == "" && cfg.Spec.Etcd.Prefix == "" {
			// generateName: the name is chosen after admission; the
			// prefix is made as unique, within spec.etcd.prefix's length.
			base := apiserver.NewTenantEtcdPrefix(cfg.Namespace, "")
			generate := cfg.GenerateName[:min(len(cfg.GenerateName), maxEtcdPrefix-len(base)-randomSuffix)]
			cfg.Spec.Etcd.Prefix = base + generate + utilrand.String(randomSuffix)
		}
		apiserver.SetCreateDefaults(cfg)
	case admissionv1.Update:
		if cfg.Spec.Etcd.Prefix == "" && len(req.OldObject.Raw) > 0 {
			old := &v1alpha1.ApiServerConfig{}
			if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
				return fmt.Errorf("reading the ApiServerConfig as it was: %w", err)
			}
			cfg.Spec.Etcd.Prefix = old.Spec.Etcd.Prefix
		}
	}
	return nil
}
