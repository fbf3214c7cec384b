// Package tenants is the tenant reconciler: a pass observes, decides the
// key material and where each rotation stands, renders every object with
// apiserver.Desired, applies each once with server-side apply and reports
// status (reconcile.go lists the steps, each in a file of its own). What it
// keeps of a tenant between passes has one owner, its memory (memory.go),
// which forget clears. What it talks to lives in rooms it imports:
// controllers/tenantio (a tenant's etcd and API), controllers/tenantwatch
// (the watches between passes), controllers/datastores (the platform's
// etcd datastores), controllers/backups (the restore engine its restore
// step runs), controllers/managercache (what the caches hold) and
// controllers/ownership (the proofs). No other reconciler imports it.
//
// The RBAC markers below are the permissions the manager needs; make
// manifests turns them into config/rbac/role.yaml.
//
// +kubebuilder:rbac:groups=controlplane.apiserver-operator.dev,resources=apiserverconfigs,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=controlplane.apiserver-operator.dev,resources=apiserverconfigs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=controlplane.apiserver-operator.dev,resources=apiserverconfigs/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
package tenants
