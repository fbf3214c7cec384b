package apiserver

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// SetCreateDefaults sets what a new ApiServerConfig keeps in its spec from
// its creation on (the mutating webhook writes it; render shows it), unlike
// the defaults of SetDefaults, which each completion applies again:
// spec.etcd.prefix, when none is given, is a prefix of the tenant's own
// (NewTenantEtcdPrefix), so that tenants that share an etcd never share
// keys by default. ApiServerConfigs created before keep the prefix they
// had: /registry, the default then (SetDefaults gives it to a spec with
// none, as the CRD did). Likewise spec.networkPolicy: a new tenant is
// isolated (mode Enforced), one created before the field keeps its
// network as it was until its spec says otherwise.
func SetCreateDefaults(cfg *v1alpha1.ApiServerConfig) {
	if cfg.Spec.Etcd.Prefix == "" {
		cfg.Spec.Etcd.Prefix = NewTenantEtcdPrefix(cfg.Namespace, cfg.Name)
	}
	if cfg.Spec.NetworkPolicy == nil {
		cfg.Spec.NetworkPolicy = &v1alpha1.NetworkPolicySpec{Mode: v1alpha1.NetworkPolicyEnforced}
	}
}

// DeletionPolicyOf is what deleting an ApiServerConfig of spec does to its
// data and keys: spec.deletionPolicy, or what certificates.pkiRetention,
// its former name, says.
func DeletionPolicyOf(spec *v1alpha1.ApiServerConfigSpec) v1alpha1.DeletionPolicy {
	switch {
	case spec.DeletionPolicy != "":
		return spec.DeletionPolicy
	case spec.Certificates.PKIRetention == "Retain":
		return v1alpha1.DeletionPolicyRetain
	}
	return v1alpha1.DeletionPolicyDelete
}

// NewTenantEtcdPrefix is the etcd prefix of a new tenant that names none.
func NewTenantEtcdPrefix(namespace, name string) string {
	return "/tenants/" + namespace + "/" + name
}

// PrefixInNamespace reports whether the etcd prefix (unset: the default)
// is below namespace's own, NewTenantEtcdPrefix(namespace, ""), and not
// that prefix itself.
func PrefixInNamespace(namespace, prefix string) bool {
	own := NewTenantEtcdPrefix(namespace, "")
	p := CleanEtcdPrefix(prefix) + "/"
	return strings.HasPrefix(p, own) && p != own
}

// SetDefaults fills unset fields of spec with the defaults that the CRD's
// schema applies on admission. The operator normally reads objects that the
// API server has already defaulted; this makes the same spec complete when it
// comes from elsewhere (a file given to the render command, a unit test).
// A test against the real API server keeps the two in step.
func SetDefaults(spec *v1alpha1.ApiServerConfigSpec) {
	setString(&spec.Version, v1alpha1.BundledVersion)
	if spec.MasterCount == nil {
		spec.MasterCount = ptr.To[int32](1)
	}
	if spec.EndpointReconcilerType == "" {
		spec.EndpointReconcilerType = v1alpha1.EndpointReconcilerLease
	}
	setString(&spec.Etcd.Prefix, DefaultEtcdPrefix)
	if tls := spec.Etcd.TLS; tls != nil {
		setString(&tls.CAKey, "ca.crt")
		setString(&tls.CertKey, "tls.crt")
		setString(&tls.KeyKey, "tls.key")
	}
	if len(spec.ServiceClusterIPRange) == 0 {
		spec.ServiceClusterIPRange = []string{"10.96.0.0/12"}
	}
	setString(&spec.ServiceNodePortRange, "30000-32767")
	setString(&spec.ClusterDomain, "cluster.local")

	setInt32(&spec.Serving.SecurePort, 6443)
	setString(&spec.Serving.TLS.MinVersion, "VersionTLS12")
	if spec.Serving.Service.Type == "" {
		spec.Serving.Service.Type = corev1.ServiceTypeClusterIP
	}
	setInt32(&spec.Serving.Service.Port, 443)
	if k := spec.Konnectivity; k != nil {
		setInt32(&k.Port, DefaultKonnectivityPort)
	}

	setBool(&spec.Authentication.Anonymous, false)
	if oidc := spec.Authentication.OIDC; oidc != nil {
		setString(&oidc.UsernameClaim, "sub")
	}
	setBool(&spec.Authentication.ServiceAccount.ExtendTokenExpiration, false)
	if e := spec.Admission.EventRateLimit; e != nil && len(e.Limits) == 0 {
		e.Limits = DefaultEventRateLimits()
	}
	if len(spec.Authorization.Modes) == 0 {
		spec.Authorization.Modes = []v1alpha1.AuthorizationMode{"Node", "RBAC"}
	}

	if spec.Encryption == nil {
		spec.Encryption = &v1alpha1.EncryptionSpec{Provider: v1alpha1.EncryptionSecretbox}
	}

	setInt32Ptr(&spec.Audit.MaxAge, 30)
	setInt32Ptr(&spec.Audit.MaxBackups, 10)
	setInt32Ptr(&spec.Audit.MaxSizeMB, 100)
	if w := spec.Audit.Webhook; w != nil && w.Mode == "" {
		w.Mode = v1alpha1.AuditWebhookBatch
	}

	setDuration(&spec.EventTTL, time.Hour)
	setBool(&spec.Profiling, false)

	if spec.CacheSizing.Policy == "" {
		spec.CacheSizing.Policy = v1alpha1.CacheSizingStatic
	}
	setBool(&spec.CacheSizing.WatchCache, true)
	setDuration(&spec.CacheSizing.ObservationInterval, 5*time.Minute)
	setInt32Ptr(&spec.CacheSizing.ResizeThresholdPercent, 20)
	setDuration(&spec.CacheSizing.MinResizeInterval, 10*time.Minute)

	setDuration(&spec.Certificates.Validity, 8760*time.Hour)
	setDuration(&spec.Certificates.CAValidity, 87600*time.Hour)
	setInt32(&spec.Certificates.RenewalPercent, 80)
	if spec.Certificates.KeyAlgorithm == "" {
		spec.Certificates.KeyAlgorithm = "ECDSAP256"
	}
	setDuration(&spec.Certificates.RotationOverlap, 24*time.Hour)
	if spec.Certificates.PKIRetention == "" {
		spec.Certificates.PKIRetention = "Delete"
	}
	setDuration(&spec.AdminCredentials.Lifetime, DefaultAdminCredentialLifetime)
	if spec.AdminCredentials.KubeconfigSecret == "" {
		spec.AdminCredentials.KubeconfigSecret = v1alpha1.AdminKubeconfigSecretEnabled
	}
}

// DefaultAdminCredentialLifetime is the lifetime of the admin kubeconfig's
// certificate when spec.adminCredentials.lifetime names none: a working
// day, so that a copy taken out of the Secret is worth little by the next.
const DefaultAdminCredentialLifetime = 8 * time.Hour

// PublishesAdminKubeconfig reports whether the tenant's admin kubeconfig
// is published in its Secret (spec.adminCredentials.kubeconfigSecret).
func PublishesAdminKubeconfig(c *Completed) bool {
	return c.Spec.AdminCredentials.KubeconfigSecret != v1alpha1.AdminKubeconfigSecretDisabled
}

// DefaultEventRateLimits are the limits of spec.admission.eventRateLimit
// when it names none, as the CRD defaults them (see the field's doc
// comment for why these).
func DefaultEventRateLimits() []v1alpha1.EventRateLimit {
	return []v1alpha1.EventRateLimit{
		{Type: "Server", QPS: 5000, Burst: 20000},
		{Type: "Namespace", QPS: 50, Burst: 100},
	}
}

func setString(s *string, v string) {
	if *s == "" {
		*s = v
	}
}

func setInt32(i *int32, v int32) {
	if *i == 0 {
		*i = v
	}
}

func setInt32Ptr(i **int32, v int32) {
	if *i == nil {
		*i = ptr.To(v)
	}
}

func setBool(b **bool, v bool) {
	if *b == nil {
		*b = ptr.To(v)
	}
}

func setDuration(d **metav1.Duration, v time.Duration) {
	if *d == nil {
		*d = &metav1.Duration{Duration: v}
	}
}
