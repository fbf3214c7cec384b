// Package controllers holds the reconcile loops of the operator. They stay
// thin: read the ApiServerConfig, call the pure functions of package
// apiserver, apply the result with server-side apply and report status.
//
// The RBAC markers below are the permissions the manager needs; make
// manifests turns them into config/rbac/role.yaml.
//
// +kubebuilder:rbac:groups=controlplane.apiserver-operator.dev,resources=apiserverconfigs,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=controlplane.apiserver-operator.dev,resources=apiserverconfigs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=controlplane.apiserver-operator.dev,resources=apiserverconfigs/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
package controllers
