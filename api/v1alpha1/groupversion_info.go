// Package v1alpha1 contains the ApiServerConfig API of the
// controlplane.apiserver-operator.dev group.
//
// It imports only apimachinery-level packages so that it can be vendored by
// platforms that drive the operator without pulling in its implementation.
//
// +kubebuilder:object:generate=true
// +groupName=controlplane.apiserver-operator.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the objects in this package.
	GroupVersion = schema.GroupVersion{Group: "controlplane.apiserver-operator.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme
	// (apimachinery's builder, as k8s.io/api uses: controller-runtime's is
	// deprecated for API packages, which should not depend on it).
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// addKnownTypes adds the kinds of this package, and the options types that
// list, get and watch requests of its group version decode into.
func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &ApiServerConfig{}, &ApiServerConfigList{}, &ApiServerBackup{}, &ApiServerBackupList{}, &ApiServerBackupSchedule{}, &ApiServerBackupScheduleList{}, &AdminCredentialRequest{}, &AdminCredentialRequestList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
