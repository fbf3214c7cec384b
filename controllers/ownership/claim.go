package ownership

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// Claim says whose obj is for cfg: a Secret or the Deployment only with
// the operator's proof (apiserver.Ownership.Claim), but for what a release
// before proofs wrote, until the tenant's objects are all proven
// (status.objectsProven).
func Claim(o *apiserver.Ownership, cfg *v1alpha1.ApiServerConfig, obj metav1.Object) apiserver.Claim {
	legacy := !cfg.Status.ObjectsProven
	if legacy && o != nil && !cfg.CreationTimestamp.Time.Before(o.Since()) {
		// A tenant newer than the key had nothing written before it but
		// what Retain kept for its name: a Secret of no controller, marked
		// retained. A Deployment, or an object controlled by it, was
		// written with a proof.
		_, isSecret := obj.(*corev1.Secret)
		legacy = isSecret && metav1.GetControllerOfNoCopy(obj) == nil && obj.GetLabels()[apiserver.RetainedDataLabel] != ""
	}
	return o.Claim(cfg.Name, cfg.UID, obj, legacy)
}

// NameConflict says that an object of a name the ApiServerConfig generates
// exists and is someone else's (Claim): the operator neither writes it nor
// reads it.
type NameConflict struct {
	Kind, Namespace, Name, Holder string
}

func (e *NameConflict) Error() string {
	return fmt.Sprintf("%s %s/%s, a name this ApiServerConfig gives one of its objects, belongs to %s: it is left untouched; delete or rename it, or give the ApiServerConfig another name",
		e.Kind, e.Namespace, e.Name, e.Holder)
}
