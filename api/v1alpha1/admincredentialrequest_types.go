package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AdminCredentialRequestSpec names the tenant, the identity the credential
// carries and how long it lives.
type AdminCredentialRequestSpec struct {
	// ApiServerConfigName names the tenant, an ApiServerConfig in the
	// request's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=52
	ApiServerConfigName string `json:"apiServerConfigName"`

	// User is the user name the tenant's apiservers see (the client
	// certificate's CommonName).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	User string `json:"user"`

	// Groups are the groups the tenant's apiservers see (the certificate's
	// Organizations). system:masters skips every authorizer: a credential
	// with it can be revoked only by a CA rotation, never by an
	// authorization webhook's deny. Bind a group of your own to the
	// cluster-admin ClusterRole in the tenant instead.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +listType=set
	// +optional
	Groups []string `json:"groups,omitempty"`

	// ExpirationSeconds is how long the credential works, from when it is
	// issued: at least 60, at most 86400 (a day).
	// +kubebuilder:default=3600
	// +kubebuilder:validation:Minimum=60
	// +kubebuilder:validation:Maximum=86400
	// +optional
	ExpirationSeconds int32 `json:"expirationSeconds,omitempty"`
}

// AdminCredentialRequestStatus says whether the credential was issued,
// where it is and until when it works.
type AdminCredentialRequestStatus struct {
	// Conditions: Ready is True while the credential works (reason
	// Issued); False with reason Expired once it expired and its Secret was
	// deleted, or with the reason it could not be issued (TenantNotFound,
	// TenantNotServing, SecretNameTaken).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// SecretName names the Secret, key value, that holds the kubeconfig.
	// The operator deletes it when the credential expires, and with the
	// request.
	// +optional
	SecretName string `json:"secretName,omitempty"`

	// ExpirationTimestamp is when the credential stops working (its client
	// certificate's NotAfter). Set once: a request is answered once.
	// +optional
	ExpirationTimestamp *metav1.Time `json:"expirationTimestamp,omitempty"`

	// SerialNumber is the client certificate's serial number, in hex, as
	// the tenant's audit log and TLS tooling show it.
	// +optional
	SerialNumber string `json:"serialNumber,omitempty"`
}

// AdminCredentialRequest asks for a kubeconfig of a tenant that expires: a
// client certificate for the user and groups it names, signed by the
// tenant's CA, in a Secret the operator deletes when it expires. Who may
// create one in a namespace, and read the Secrets there, may act as any
// identity of the tenants of that namespace: grant it as cluster-admin of
// those tenants. An operator started with --watch-filter answers only the
// requests that carry its label, as it reconciles only the tenants that do.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=acr,categories=controlplane
// +kubebuilder:printcolumn:name="Tenant",type=string,JSONPath=`.spec.apiServerConfigName`
// +kubebuilder:printcolumn:name="User",type=string,JSONPath=`.spec.user`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Expires",type=string,JSONPath=`.status.expirationTimestamp`
// +kubebuilder:printcolumn:name="Secret",type=string,JSONPath=`.status.secretName`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 242",message="metadata.name must be at most 242 characters: the credential's Secret is <name>-credential"
type AdminCredentialRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: a credential is issued once; create another request"
	// +required
	Spec AdminCredentialRequestSpec `json:"spec"`

	// +optional
	Status AdminCredentialRequestStatus `json:"status,omitempty"`
}

// AdminCredentialRequestList is a list of AdminCredentialRequest.
//
// +kubebuilder:object:root=true
type AdminCredentialRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AdminCredentialRequest `json:"items"`
}

// Reasons of an AdminCredentialRequest's Ready condition.
const (
	// ReasonCredentialIssued: the Secret holds a credential that works
	// until status.expirationTimestamp.
	ReasonCredentialIssued = "Issued"
	// ReasonCredentialExpired: the credential expired and its Secret was
	// deleted.
	ReasonCredentialExpired = "Expired"
	// ReasonTenantNotFound: no ApiServerConfig of that name in the
	// namespace; the request is answered once it exists.
	ReasonTenantNotFound = "TenantNotFound"
	// ReasonTenantNotServing: the tenant has no CA or endpoint yet; the
	// request is answered once it has.
	ReasonTenantNotServing = "TenantNotServing"
	// ReasonSecretNameTaken: a Secret that is not the request's holds the
	// name the credential's Secret would take.
	ReasonSecretNameTaken = "SecretNameTaken"
	// ReasonRateLimited: the namespace asked for more credentials than the
	// platform answers a minute; the request is answered when its turn
	// comes.
	ReasonRateLimited = "RateLimited"
)
