// Package controllers holds the reconcile loop of the operator: a pass
// observes, decides the key material and where each rotation stands,
// renders every object with apiserver.Desired, applies each once with
// server-side apply and reports status. What it talks to lives apart:
// controllers/tenantio (a tenant's etcd and API) and controllers/webhooks
// (the admission webhook and its certificates).
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
