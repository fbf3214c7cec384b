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
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the objects in this package.
	GroupVersion = schema.GroupVersion{Group: "controlplane.apiserver-operator.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
