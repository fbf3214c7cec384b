package apiserver

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	apiserverv1beta1 "k8s.io/apiserver/pkg/apis/apiserver/v1beta1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// healthPaths are reachable without credentials even when anonymous access
// is off, so that kubelet's probes (which cannot authenticate) work. RBAC's
// built-in system:public-info-viewer role already lets anyone read them.
var healthPaths = []string{"/healthz", "/livez", "/readyz"}

// AuthenticationConfig renders the AuthenticationConfiguration file:
// anonymous access (everywhere, or only on the health endpoints and
// spec.authentication.anonymousPaths), the OIDC issuer of
// spec.authentication.oidc as the first JWT authenticator, then those of
// spec.authentication.jwt. issuerCAs are the issuers' CAs as read from the
// objects the spec names, by Reference.Key (IssuerCARefs); an issuer
// without one is publicly trusted.
func AuthenticationConfig(c *Completed, issuerCAs map[string][]byte) ([]byte, error) {
	a := c.Spec.Authentication
	cfg := apiserverv1.AuthenticationConfiguration{
		TypeMeta:  metav1.TypeMeta{APIVersion: apiserverv1.SchemeGroupVersion.String(), Kind: "AuthenticationConfiguration"},
		Anonymous: &apiserverv1.AnonymousAuthConfig{Enabled: true},
	}
	if !*a.Anonymous {
		for _, p := range append(slices.Clone(healthPaths), a.AnonymousPaths...) {
			cfg.Anonymous.Conditions = append(cfg.Anonymous.Conditions, apiserverv1.AnonymousAuthCondition{Path: p})
		}
	}
	if o := a.OIDC; o != nil {
		var ca []byte
		if refs := IssuerCARefs(&c.Spec); len(refs) > 0 && o.CAConfigMapName != "" {
			ca = certificatesOnly(issuerCAs[refs[0].Key()])
		}
		jwt := apiserverv1.JWTAuthenticator{
			Issuer: apiserverv1.Issuer{
				URL:                  o.IssuerURL,
				Audiences:            []string{o.ClientID},
				CertificateAuthority: string(ca),
				EgressSelectorType:   issuerEgress(""),
			},
			ClaimMappings: apiserverv1.ClaimMappings{
				Username: apiserverv1.PrefixedClaimOrExpression{Claim: o.UsernameClaim, Prefix: ptr.To(oidcUsernamePrefix(o))},
			},
		}
		if o.GroupsClaim != "" {
			jwt.ClaimMappings.Groups = apiserverv1.PrefixedClaimOrExpression{Claim: o.GroupsClaim, Prefix: ptr.To(o.GroupsPrefix)}
		}
		cfg.JWT = append(cfg.JWT, jwt)
	}
	for i, j := range a.JWT {
		var ca []byte
		if ref, ok := jwtCARef(j, i); ok {
			ca = certificatesOnly(issuerCAs[ref.Key()])
		}
		cfg.JWT = append(cfg.JWT, jwtAuthenticator(j, ca))
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("rendering the authentication configuration: %w", err)
	}
	return out, nil
}

// certificatesOnly is data without its PEM blocks that are not
// certificates: an issuer's CA may be named in a Secret key that also holds
// a private key, and the authentication configuration is in a ConfigMap,
// readable by the namespace's viewers. Data holding certificates only is
// kept byte for byte (the file, and so the pods, stay as they were).
func certificatesOnly(data []byte) []byte {
	var certs []byte
	foreign := false
	for rest := data; ; {
		block, next := pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type == "CERTIFICATE" && len(block.Headers) == 0 {
			certs = append(certs, pem.EncodeToMemory(block)...)
		} else {
			foreign = true
		}
		rest = next
	}
	if !foreign {
		return data
	}
	return certs
}

// issuerEgress is the egress selection of an issuer's calls: kube-apiserver
// dials an issuer without one directly, past the egress filter, so an
// issuer whose spec says none is called through "controlplane", which is
// what the spec means by it (from the apiserver pods).
func issuerEgress(t string) apiserverv1.EgressSelectorType {
	if t == "" {
		return apiserverv1.EgressSelectorControlPlane
	}
	return apiserverv1.EgressSelectorType(t)
}

// jwtAuthenticator is upstream's form of an authenticator of
// spec.authentication.jwt, whose fields are upstream's but for the CA,
// given here as read.
func jwtAuthenticator(j v1alpha1.JWTAuthenticator, ca []byte) apiserverv1.JWTAuthenticator {
	out := apiserverv1.JWTAuthenticator{
		Issuer: apiserverv1.Issuer{
			URL:                  j.Issuer.URL,
			DiscoveryURL:         j.Issuer.DiscoveryURL,
			CertificateAuthority: string(ca),
			Audiences:            j.Issuer.Audiences,
			AudienceMatchPolicy:  apiserverv1.AudienceMatchPolicyType(j.Issuer.AudienceMatchPolicy),
			EgressSelectorType:   issuerEgress(j.Issuer.EgressSelectorType),
		},
		ClaimMappings: apiserverv1.ClaimMappings{
			Username: apiserverv1.PrefixedClaimOrExpression(j.ClaimMappings.Username),
			Groups:   apiserverv1.PrefixedClaimOrExpression(j.ClaimMappings.Groups),
			UID:      apiserverv1.ClaimOrExpression(j.ClaimMappings.UID),
		},
	}
	for _, r := range j.ClaimValidationRules {
		out.ClaimValidationRules = append(out.ClaimValidationRules, apiserverv1.ClaimValidationRule(r))
	}
	for _, e := range j.ClaimMappings.Extra {
		out.ClaimMappings.Extra = append(out.ClaimMappings.Extra, apiserverv1.ExtraMapping(e))
	}
	for _, r := range j.UserValidationRules {
		out.UserValidationRules = append(out.UserValidationRules, apiserverv1.UserValidationRule(r))
	}
	return out
}

// authenticationStartPart is the part of a rendered authentication
// configuration that kube-apiserver reads only at start: all of it but the
// authenticators of spec.authentication.jwt, which its reload takes up
// (upstream refuses a reload that changes anonymous access). It is what
// ConfigHash hashes of the file: a spec without jwt hashes the whole file,
// as before jwt existed. A file that does not parse is hashed whole.
func authenticationStartPart(c *Completed, data []byte) []byte {
	n := len(c.Spec.Authentication.JWT)
	if n == 0 {
		return data
	}
	var cfg apiserverv1.AuthenticationConfiguration
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil || len(cfg.JWT) < n {
		return data
	}
	cfg.JWT = cfg.JWT[:len(cfg.JWT)-n]
	if len(cfg.JWT) == 0 {
		cfg.JWT = nil // as rendered without any: "jwt: null"
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return data
	}
	return out
}

// oidcUsernamePrefix keeps the meaning of the --oidc-username-prefix flag:
// "-" is no prefix, and when unset, user names other than emails are
// prefixed with the issuer URL and '#', so that they cannot pose as other
// users.
func oidcUsernamePrefix(o *v1alpha1.OIDCSpec) string {
	switch {
	case o.UsernamePrefix == "-":
		return ""
	case o.UsernamePrefix != "":
		return o.UsernamePrefix
	case o.UsernameClaim == "email":
		return ""
	default:
		return o.IssuerURL + "#"
	}
}

// EventRateLimit is the admission plugin that limits the rate of Event
// writes; spec.admission.eventRateLimit turns it on.
const EventRateLimit = "EventRateLimit"

// usesAdmissionConfig reports whether a plugin the spec turns on needs a
// configuration, so that the operator renders an AdmissionConfiguration
// (kube-apiserver refuses to start EventRateLimit without one).
func usesAdmissionConfig(c *Completed) bool {
	return c.Spec.Admission.EventRateLimit != nil
}

// eventRateLimitConfiguration is an eventratelimit.admission.k8s.io/v1alpha1
// Configuration, with upstream's field names. Upstream's own types live in
// k8s.io/kubernetes, which the operator's module does not import (it would
// pull the whole of kubernetes' module graph in); the bundled
// kube-apiserver's validator decodes and validates what this renders.
type eventRateLimitConfiguration struct {
	metav1.TypeMeta `json:",inline"`
	Limits          []eventRateLimit `json:"limits"`
}

type eventRateLimit struct {
	Type      string `json:"type"`
	QPS       int32  `json:"qps"`
	Burst     int32  `json:"burst"`
	CacheSize int32  `json:"cacheSize,omitempty"`
}

// AdmissionConfig renders the AdmissionConfiguration of the plugins that
// need one, their configurations embedded: EventRateLimit's limits from
// spec.admission.eventRateLimit. The other plugins keep their defaults.
func AdmissionConfig(c *Completed) ([]byte, error) {
	e := c.Spec.Admission.EventRateLimit
	if e == nil {
		return nil, fmt.Errorf("rendering the admission configuration: no plugin of the spec needs one")
	}
	erl := eventRateLimitConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: "eventratelimit.admission.k8s.io/v1alpha1", Kind: "Configuration"},
	}
	for _, l := range e.Limits {
		erl.Limits = append(erl.Limits, eventRateLimit{Type: string(l.Type), QPS: l.QPS, Burst: l.Burst, CacheSize: ptr.Deref(l.CacheSize, 0)})
	}
	raw, err := json.Marshal(erl)
	if err != nil {
		return nil, fmt.Errorf("rendering the EventRateLimit configuration: %w", err)
	}
	cfg := apiserverv1.AdmissionConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: apiserverv1.SchemeGroupVersion.String(), Kind: "AdmissionConfiguration"},
		Plugins:  []apiserverv1.AdmissionPluginConfiguration{{Name: EventRateLimit, Configuration: &runtime.Unknown{Raw: raw}}},
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("rendering the admission configuration: %w", err)
	}
	return out, nil
}

// DefaultAuditPolicy is the policy used when spec.audit names none: every
// request at the Metadata level (who did what, when, to which object,
// without bodies that may hold secrets), without the RequestReceived stage
// that only doubles the volume.
func DefaultAuditPolicy() ([]byte, error) {
	policy := auditv1.Policy{
		TypeMeta:          metav1.TypeMeta{APIVersion: auditv1.SchemeGroupVersion.String(), Kind: "Policy"},
		OmitStages:        []auditv1.Stage{auditv1.StageRequestReceived},
		OmitManagedFields: true,
		Rules:             []auditv1.PolicyRule{{Level: auditv1.LevelMetadata}},
	}
	out, err := yaml.Marshal(policy)
	if err != nil {
		return nil, fmt.Errorf("rendering the default audit policy: %w", err)
	}
	return out, nil
}

// EgressSelectorConfig renders the EgressSelectorConfiguration of the
// apiservers' outbound connections, each an HTTP CONNECT (or gRPC) over a
// Unix socket of a sidecar; TLS stays end to end, the sidecars relay bytes.
//
//   - "etcd" (the main etcd and every override) goes to the etcd dialer,
//     which, while etcd is down, keeps kube-apiserver's connection attempt
//     waiting instead of refusing it, so kube-apiserver's gRPC client, whose
//     reconnect backoff grows with every refused attempt (1 s by 1.6 up to
//     120 s, no flag changes it), is connected again within moments of
//     etcd's return (package etcddialer).
//   - "controlplane" (admission and conversion webhooks given by URL, the
//     authentication, authorization and audit webhooks, the JWT issuers)
//     goes to the same sidecar's egress filter, which refuses the pod's
//     node, the management cluster's networks, the pod itself and the
//     link-local and metadata addresses: the tenant's administrator and the
//     spec's author aim these calls, and a NetworkPolicy does not police a
//     pod's traffic to its own node everywhere.
//   - "cluster" (webhooks and aggregated APIs given by Service, kubelets,
//     the proxy subresources) goes through the konnectivity server into the
//     tenant's nodes with spec.konnectivity (gRPC over the server's
//     socket), and to the egress filter without.
func EgressSelectorConfig(c *Completed) ([]byte, error) {
	cfg := apiserverv1beta1.EgressSelectorConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: apiserverv1beta1.SchemeGroupVersion.String(), Kind: "EgressSelectorConfiguration"},
		EgressSelections: []apiserverv1beta1.EgressSelection{{
			Name: "etcd",
			Connection: apiserverv1beta1.Connection{
				ProxyProtocol: apiserverv1beta1.ProtocolHTTPConnect,
				Transport:     &apiserverv1beta1.Transport{UDS: &apiserverv1beta1.UDSTransport{UDSName: EtcdDialerSocket}},
			},
		}},
	}
	filtered := apiserverv1beta1.Connection{
		ProxyProtocol: apiserverv1beta1.ProtocolHTTPConnect,
		Transport:     &apiserverv1beta1.Transport{UDS: &apiserverv1beta1.UDSTransport{UDSName: EgressFilterSocket}},
	}
	cluster := apiserverv1beta1.Connection{
		ProxyProtocol: apiserverv1beta1.ProtocolHTTPConnect,
		Transport:     &apiserverv1beta1.Transport{UDS: &apiserverv1beta1.UDSTransport{UDSName: EgressClusterSocket}},
	}
	if usesKonnectivity(c) {
		cluster = apiserverv1beta1.Connection{
			ProxyProtocol: apiserverv1beta1.ProtocolGRPC,
			Transport:     &apiserverv1beta1.Transport{UDS: &apiserverv1beta1.UDSTransport{UDSName: KonnectivitySocket}},
		}
	}
	cfg.EgressSelections = append(cfg.EgressSelections,
		apiserverv1beta1.EgressSelection{Name: "controlplane", Connection: filtered},
		apiserverv1beta1.EgressSelection{Name: "cluster", Connection: cluster})
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("rendering the egress selector configuration: %w", err)
	}
	return out, nil
}

// usesAuthorizers reports whether authorization comes from an
// AuthorizationConfiguration (spec.authorization.authorizers) rather than
// from --authorization-mode.
func usesAuthorizers(c *Completed) bool {
	return len(c.Spec.Authorization.Authorizers) > 0
}

// WebhookKubeconfigKey is the key, in the authorization Secret, of the
// kubeconfig of the webhook authorizer name whose content is kubeconfig:
// its hash is part of the name, so that a new kubeconfig changes the
// configuration that names it, which is what makes kube-apiserver load
// the chain again (it does not watch the kubeconfigs themselves).
func WebhookKubeconfigKey(name string, kubeconfig []byte) string {
	sum := sha256.Sum256(kubeconfig)
	return fmt.Sprintf("%s-%s.kubeconfig", name, hex.EncodeToString(sum[:])[:12])
}

// AuthorizationConfig renders the AuthorizationConfiguration of
// spec.authorization.authorizers and the kubeconfigs of its webhooks,
// keyed as the authorization Secret holds them. kubeconfig gives the
// content of the key kubeconfig of a Secret the spec names (nil when it
// is not known).
func AuthorizationConfig(c *Completed, kubeconfig func(secretName string) []byte) (map[string][]byte, error) {
	files := map[string][]byte{}
	cfg := apiserverv1.AuthorizationConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: apiserverv1.SchemeGroupVersion.String(), Kind: "AuthorizationConfiguration"},
	}
	for _, a := range c.Spec.Authorization.Authorizers {
		out := apiserverv1.AuthorizerConfiguration{Type: string(a.Type), Name: a.Name}
		if w := a.Webhook; w != nil {
			data := kubeconfig(w.KubeconfigSecretName)
			key := WebhookKubeconfigKey(a.Name, data)
			files[key] = data
			out.Webhook = &apiserverv1.WebhookConfiguration{
				Timeout:                                  ptr.Deref(w.Timeout, metav1.Duration{Duration: 3 * time.Second}),
				FailurePolicy:                            orDefault(w.FailurePolicy, "NoOpinion"),
				AuthorizedTTL:                            ptr.Deref(w.AuthorizedTTL, metav1.Duration{Duration: 5 * time.Minute}),
				UnauthorizedTTL:                          ptr.Deref(w.UnauthorizedTTL, metav1.Duration{Duration: 30 * time.Second}),
				CacheAuthorizedRequests:                  w.CacheAuthorizedRequests,
				CacheUnauthorizedRequests:                w.CacheUnauthorizedRequests,
				SubjectAccessReviewVersion:               "v1",
				MatchConditionSubjectAccessReviewVersion: "v1",
				ConnectionInfo: apiserverv1.WebhookConnectionInfo{
					Type:           apiserverv1.AuthorizationWebhookConnectionInfoTypeKubeConfigFile,
					KubeConfigFile: ptr.To(AuthorizationKubeconfigDir + "/" + key),
				},
			}
			for _, m := range w.MatchConditions {
				out.Webhook.MatchConditions = append(out.Webhook.MatchConditions, apiserverv1.WebhookMatchCondition{Expression: m.Expression})
			}
		}
		cfg.Authorizers = append(cfg.Authorizers, out)
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("rendering the authorization configuration: %w", err)
	}
	files[AuthorizationConfigKey] = data
	return files, nil
}

// authorizersBuiltAtStart are the types of the chain other than Webhook:
// kube-apiserver builds Node's graph and RBAC's informers only when it
// starts, and refuses a reload that adds a type it did not start with or
// drops one it did (requireNonWebhookTypes), and every reload after it. A
// change of them rolls the pods (ConfigHash); webhooks come and go by
// reload.
func authorizersBuiltAtStart(c *Completed) []string {
	var out []string
	for _, t := range []v1alpha1.AuthorizerType{"Node", "RBAC", "AlwaysAllow", "AlwaysDeny"} {
		if slices.ContainsFunc(c.Spec.Authorization.Authorizers, func(a v1alpha1.Authorizer) bool { return a.Type == t }) {
			out = append(out, string(t))
		}
	}
	return out
}
