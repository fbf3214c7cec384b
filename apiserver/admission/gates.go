package admission

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// Gates are the fields that grant power beyond the tenant's own apiserver,
// opened only as far as the platform's operator configuration says. They
// are checked when a spec sets or changes one of them: a tenant that
// already runs keeps what it was admitted with.
type Gates struct {
	// ImageRepositories are where spec.image may come from: an entry that
	// ends with "/" admits every image under it
	// ("registry.example.com/platform/"), any other entry that repository
	// with any tag or digest ("registry.example.com/platform/kube-apiserver").
	// Images are matched as written: a registry is named in full. The
	// image receives the tenant's service-account signing key and etcd
	// client key. Empty admits no spec.image.
	ImageRepositories []string
	// PriorityClasses are the classes spec.priorityClassName may name; nil
	// admits any class but the system's own (system-node-critical,
	// system-cluster-critical and any other system- class), which would
	// let a tenant's apiservers preempt the platform's pods.
	PriorityClasses []string
	// NamespacedEtcdPrefixes admits only etcd prefixes under
	// /tenants/<namespace>/ (the default a new tenant gets): on an etcd
	// that tenants of several namespaces share, no namespace can then take
	// a prefix above another's (/, /tenants) and so refuse its tenants, nor
	// learn from a refusal that another namespace's tenant exists.
	NamespacedEtcdPrefixes bool
	// DeletionConfirmation protects every tenant as
	// DeletionProtectionAnnotation protects one (see CheckDelete).
	DeletionConfirmation bool
}

// CheckDelete refuses the deletion of a protected tenant that holds data
// its deletion deletes (deletionPolicy Delete, and it stored data:
// status.dataPrefix) unless ConfirmDeletionAnnotation is "true", as
// Gardener asks of a cluster. A tenant is protected when it carries
// DeletionProtectionAnnotation "true", or every tenant is
// (DeletionConfirmation). Retain needs no confirmation: nothing is lost.
func (g Gates) CheckDelete(cfg *v1alpha1.ApiServerConfig) error {
	protected := g.DeletionConfirmation || cfg.Annotations[v1alpha1.DeletionProtectionAnnotation] == "true"
	if !protected || cfg.Status.DataPrefix == "" || cfg.Annotations[v1alpha1.ConfirmDeletionAnnotation] == "true" ||
		apiserver.DeletionPolicyOf(&cfg.Spec) != v1alpha1.DeletionPolicyDelete {
		return nil
	}
	why := "annotation " + v1alpha1.DeletionProtectionAnnotation + " protects it"
	if g.DeletionConfirmation {
		why = "the operator protects every tenant (--require-deletion-confirmation)"
	}
	return fmt.Errorf("ApiServerConfig %s holds data (etcd prefix %s) that deleting it deletes (deletionPolicy Delete), and %s: set annotation %s=true first to confirm, or set spec.deletionPolicy to Retain to keep the data",
		cfg.Name, cfg.Status.DataPrefix, why, v1alpha1.ConfirmDeletionAnnotation)
}

// DefaultImageRepositories admits imageRepository, the operator's bundled
// kube-apiserver repository, with any tag or digest, and nothing beside
// it (its registry path may hold any image).
func DefaultImageRepositories(imageRepository string) []string {
	return []string{imageRepository}
}

// Check refuses the gated fields of cfg that old (nil for a create) did
// not have and the gates do not admit.
func (g Gates) Check(old, cfg *v1alpha1.ApiServerConfig) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if image := cfg.Spec.Image; image != "" && (old == nil || old.Spec.Image != image) && !g.imageAdmitted(image) {
		errs = append(errs, field.Forbidden(spec.Child("image"), fmt.Sprintf(
			"%s is not under a repository the operator admits images from (%s): the image runs with the tenant's service-account signing key and etcd client key; use one of them, leave image out for the bundled kube-apiserver, or ask the platform to add the repository to the operator's --allowed-image-repositories",
			image, strings.Join(g.ImageRepositories, ", "))))
	}
	if g.NamespacedEtcdPrefixes && (old == nil || old.Spec.Etcd.Prefix != cfg.Spec.Etcd.Prefix) {
		own := apiserver.NewTenantEtcdPrefix(cfg.Namespace, "")
		if !apiserver.PrefixInNamespace(cfg.Namespace, cfg.Spec.Etcd.Prefix) {
			errs = append(errs, field.Forbidden(spec.Child("etcd", "prefix"), fmt.Sprintf(
				"the operator admits only prefixes under %s, this namespace's (the operator's --namespaced-etcd-prefixes): leave prefix out to get %s%s",
				own, own, cfg.Name)))
		}
	}
	if class := cfg.Spec.PriorityClassName; class != "" && (old == nil || old.Spec.PriorityClassName != class) && !g.classAdmitted(class) {
		admitted := "any class but the system's own (system-)"
		if g.PriorityClasses != nil {
			admitted = strings.Join(g.PriorityClasses, ", ")
			if admitted == "" {
				admitted = "none"
			}
		}
		errs = append(errs, field.Forbidden(spec.Child("priorityClassName"), fmt.Sprintf(
			"the operator admits the priority classes %s: a class above the platform's pods would let the tenant's apiservers preempt them; ask the platform to add %s to the operator's --allowed-priority-classes",
			admitted, class)))
	}
	return errs
}

func (g Gates) imageAdmitted(image string) bool {
	for _, r := range g.ImageRepositories {
		switch {
		case r == "":
		case strings.HasSuffix(r, "/"):
			if strings.HasPrefix(image, r) {
				return true
			}
		case image == r || strings.HasPrefix(image, r+":") || strings.HasPrefix(image, r+"@"):
			return true
		}
	}
	return false
}

func (g Gates) classAdmitted(class string) bool {
	if g.PriorityClasses == nil {
		return !strings.HasPrefix(class, "system-")
	}
	for _, c := range g.PriorityClasses {
		if c == class {
			return true
		}
	}
	return false
}
