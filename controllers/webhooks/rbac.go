package webhooks

// What the webhook's own ServiceAccount may do (config/rbac/webhook, made
// from these markers by `make manifests`), and nothing else: it reads no
// Secret of any tenant.
//
// Every ApiServerConfig, to compare a spec with the others (claims):
// +kubebuilder:rbac:groups=controlplane.apiserver-operator.dev,resources=apiserverconfigs,verbs=get;list;watch
//
// The server-side dry run of a tenant's objects (DryRun): a dry run needs
// the rights of the write it stands for, and config/webhook's
// ValidatingAdmissionPolicy refuses every write of this ServiceAccount
// that is not a dry run; get tells whose an object in a new tenant's way
// is.
// +kubebuilder:rbac:groups="",resources=services,verbs=get;create;patch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;create;patch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;create;patch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;create;patch
//
// That policy and its binding, by name, so that the webhook is not ready
// without them (DryRunGuardCheck): OLM does not install them.
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=get,resourceNames=apiserver-operator-webhook-dry-run-only
//
// Its serving certificate's Secret, which the controllers issue and renew
// (Certificates.ReadOnly), in its own namespace only, by name: no create
// (a ServiceAccount token Secret it created would be filled with another
// ServiceAccount's token) and no patch of any webhook configuration.
// +kubebuilder:rbac:groups="",namespace=system,resources=secrets,verbs=get,resourceNames=apiserver-operator-webhook-cert
