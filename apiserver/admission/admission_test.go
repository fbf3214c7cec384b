package admission

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver/validatorpool"
)

// validators are the validators `make bundled` builds into bin/.
func validators(t testing.TB) *validatorpool.Pool {
	t.Helper()
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = filepath.Join("..", "..", "bin")
	}
	pool := validatorpool.NewPool(dir)
	for _, v := range v1alpha1.BundledVersions {
		if !pool.Has(v) {
			t.Fatalf("no validator for %s in %s: run make bundled", v, dir)
		}
	}
	t.Cleanup(pool.Close)
	return pool
}

func tenant(mutate func(*v1alpha1.ApiServerConfig)) *v1alpha1.ApiServerConfig {
	cfg := &v1alpha1.ApiServerConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: "tenants"},
		Spec: v1alpha1.ApiServerConfigSpec{
			Etcd: v1alpha1.EtcdSpec{Servers: []string{"https://etcd:2379"}, TLS: &v1alpha1.EtcdTLS{SecretName: "etcd-client"}},
		},
	}
	if mutate != nil {
		mutate(cfg)
	}
	return cfg
}

// auditWebhook sends the tenant's audit events to a webhook, as mutate
// sets it up.
func auditWebhook(mutate func(*v1alpha1.AuditWebhookSpec)) func(*v1alpha1.ApiServerConfig) {
	return func(cfg *v1alpha1.ApiServerConfig) {
		cfg.Spec.Audit.Webhook = &v1alpha1.AuditWebhookSpec{KubeconfigSecretName: "audit-webhook"}
		mutate(cfg.Spec.Audit.Webhook)
	}
}

func extraArgs(args ...string) func(*v1alpha1.ApiServerConfig) {
	return func(cfg *v1alpha1.ApiServerConfig) {
		for _, a := range args {
			name, value, _ := strings.Cut(a, "=")
			cfg.Spec.ExtraArgs = append(cfg.Spec.ExtraArgs, v1alpha1.ExtraArg{Name: name, Value: value})
		}
	}
}

// jwt gives the spec two JWT issuers (the second with its CA from a
// Secret, with CEL mappings and rules), then applies mutate.
func jwt(mutate func(*v1alpha1.ApiServerConfig)) func(*v1alpha1.ApiServerConfig) {
	return func(c *v1alpha1.ApiServerConfig) {
		c.Spec.Authentication.JWT = []v1alpha1.JWTAuthenticator{{
			Issuer: v1alpha1.JWTIssuer{URL: "https://a.example.com", Audiences: []string{"tenant"}},
			ClaimMappings: v1alpha1.ClaimMappings{
				Username: v1alpha1.PrefixedClaimOrExpression{Claim: "sub", Prefix: ptr.To("a:")},
				Groups:   v1alpha1.PrefixedClaimOrExpression{Claim: "groups", Prefix: ptr.To("a:")},
			},
		}, {
			Issuer: v1alpha1.JWTIssuer{URL: "https://b.example.com/realm", Audiences: []string{"tenant", "other"}, AudienceMatchPolicy: "MatchAny",
				CertificateAuthorityRef: &v1alpha1.CertificateAuthorityRef{SecretName: "b-ca", Key: "ca.crt"}},
			ClaimValidationRules: []v1alpha1.ClaimValidationRule{{Expression: `claims.tier == "gold"`, Message: "gold tier only"}},
			ClaimMappings: v1alpha1.ClaimMappings{
				Username: v1alpha1.PrefixedClaimOrExpression{Expression: `'b:' + claims.sub`},
				UID:      v1alpha1.ClaimOrExpression{Claim: "sub"},
				Extra:    []v1alpha1.ExtraMapping{{Key: "example.com/tier", ValueExpression: "claims.tier"}},
			},
			UserValidationRules: []v1alpha1.UserValidationRule{{Expression: `!user.username.startsWith('system:')`, Message: "no system users"}},
		}}
		if mutate != nil {
			mutate(c)
		}
	}
}

// authorizers gives the spec a chain of Node, RBAC and two webhooks, each
// asked only about requests its matchConditions select, then applies
// mutate.
func authorizers(mutate func(*v1alpha1.ApiServerConfig)) func(*v1alpha1.ApiServerConfig) {
	return func(c *v1alpha1.ApiServerConfig) {
		c.Spec.Authorization.Authorizers = []v1alpha1.Authorizer{
			{Type: "Node", Name: "node"},
			{Type: "RBAC", Name: "rbac"},
			{Type: "Webhook", Name: "payments", Webhook: &v1alpha1.AuthorizerWebhook{KubeconfigSecretName: "payments-authz",
				Timeout: &metav1.Duration{Duration: 2 * time.Second}, FailurePolicy: "NoOpinion",
				MatchConditions: []v1alpha1.AuthorizerMatchCondition{{Expression: "has(request.resourceAttributes) && request.resourceAttributes.namespace == 'payments'"}}}},
			{Type: "Webhook", Name: "audit-team", Webhook: &v1alpha1.AuthorizerWebhook{KubeconfigSecretName: "audit-authz",
				AuthorizedTTL: &metav1.Duration{Duration: time.Minute}, CacheUnauthorizedRequests: ptr.To(false),
				MatchConditions: []v1alpha1.AuthorizerMatchCondition{{Expression: "'auditors' in request.groups"}}}},
		}
		if mutate != nil {
			mutate(c)
		}
	}
}

// TestAdmission_KubeAPIServerJudges: specs the catalogs let through but
// kube-apiserver v1.37.1 would refuse at start are refused at admission,
// by its own code, at the field that produced the offending flag; valid
// specs are admitted.
func TestAdmission_KubeAPIServerJudges(t *testing.T) {
	a := Admission{Validator: validators(t)}
	cases := []struct {
		name   string
		mutate func(*v1alpha1.ApiServerConfig)
		// field is where the error must be; empty: admitted.
		field, message string
	}{
		{name: "the minimal spec", mutate: nil},
		{name: "DenyServiceExternalIPs turned off", mutate: func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Admission.DisablePlugins = []string{"DenyServiceExternalIPs"}
		}},
		{name: "valid extra arguments", mutate: extraArgs("goaway-chance=0.01", "livez-grace-period=10s", "cors-allowed-origins=^https://example\\.com$")},
		{name: "every optional feature", mutate: func(c *v1alpha1.ApiServerConfig) {
			c.Spec.ServiceClusterIPRange = []string{"10.112.0.0/16", "fd00:10:112::/108"}
			c.Spec.Etcd.Overrides = []v1alpha1.EtcdOverride{{Resource: "events", Servers: []string{"https://e:2379"}}}
			c.Spec.Authentication.OIDC = &v1alpha1.OIDCSpec{IssuerURL: "https://issuer.example.com", ClientID: "k", CAConfigMapName: "ca"}
			c.Spec.Authorization.Modes = []v1alpha1.AuthorizationMode{"Node", "RBAC", "Webhook"}
			c.Spec.Authorization.Webhook = &v1alpha1.AuthorizationWebhookSpec{KubeconfigSecretName: "authz"}
			c.Spec.Encryption = &v1alpha1.EncryptionSpec{Provider: "aescbc", Resources: []string{"secrets", "configmaps"}}
			c.Spec.RuntimeConfig = map[string]string{"api/beta": "true"}
			c.Spec.Admission.EnablePlugins = []string{"PodNodeSelector"}
		}},

		// Values out of upstream's ranges and formats, or not of the flag's
		// type (pflag's own parsing, which takes 0x10 for an int).
		{name: "a value of the wrong type", mutate: extraArgs("goaway-chance=often"), field: "spec.extraArgs[0].value", message: `invalid argument "often" for "--goaway-chance" flag`},
		{name: "a duration without a unit", mutate: extraArgs("shutdown-delay-duration=30"), field: "spec.extraArgs[0].value", message: `invalid argument "30" for "--shutdown-delay-duration" flag`},
		{name: "a hexadecimal int", mutate: extraArgs("max-connection-bytes-per-sec=0x10")},
		{name: "goaway chance above 0.02", mutate: extraArgs("goaway-chance=0.5"), field: "spec.extraArgs[0].value", message: "--goaway-chance can not be less than 0 or greater than 0.02"},
		{name: "a negative duration", mutate: extraArgs("livez-grace-period=-1s"), field: "spec.extraArgs[0].value", message: "--livez-grace-period can not be a negative value"},
		{name: "an invalid regexp", mutate: extraArgs("cors-allowed-origins=(["), field: "spec.extraArgs[0].value", message: "invalid regular expression"},
		{name: "a storage backend upstream refuses", mutate: extraArgs("storage-backend=etcd2"), field: "spec.extraArgs[0].value", message: "allowed values: etcd3"},
		{name: "a storage media type upstream refuses", mutate: extraArgs("storage-media-type=application/xml"), field: "spec.extraArgs[0].value", message: "--storage-media-type"},
		{name: "an audit log format upstream refuses", mutate: extraArgs("audit-log-format=xml"), field: "spec.extraArgs[0].value", message: "invalid audit log format xml"},
		{name: "an emulated version outside its window", mutate: extraArgs("emulated-version=1.20"), field: "spec.extraArgs[0].value", message: "emulation version 1.20 is not between"},

		// Flags that clash with what the operator renders, or each other.
		{name: "admission-control beside enable-admission-plugins", mutate: extraArgs("admission-control=NamespaceLifecycle"), field: "spec.extraArgs[0].value", message: "mutually exclusive"},
		{name: "a signing endpoint beside the signing key", mutate: extraArgs("service-account-signing-endpoint=/run/signer.sock"), field: "spec.extraArgs[0].value", message: "mutually exclusive"},
		{name: "a leadership lease not above the renew deadline", mutate: extraArgs("coordinated-leadership-lease-duration=5s"), field: "spec.extraArgs[0].value", message: "must be greater than --coordinated-leadership-renew-deadline"},
		{name: "a file the pod does not have", mutate: extraArgs("authentication-token-webhook-config-file=/etc/hosts"), field: "spec.extraArgs[0].value", message: "/etc/hosts: no such file or directory"},
		{name: "an error that names no flag is placed by elimination", mutate: extraArgs("goaway-chance=0.01", "log-text-split-stream=true"), field: "spec.extraArgs[1].value", message: "Feature LoggingAlphaOptions is disabled"},
		{name: "--version", mutate: extraArgs("version=true"), field: "spec.extraArgs[0].value", message: "print its version and exit"},

		// Feature gates whose dependencies break.
		{name: "a gate that an enabled-by-default gate depends on", mutate: func(c *v1alpha1.ApiServerConfig) {
			c.Spec.FeatureGates = map[string]bool{"ClusterTrustBundle": false}
		}, field: "spec.featureGates", message: "ClusterTrustBundleProjection"},

		// Admission plugins that need a configuration.
		{name: "ImagePolicyWebhook without its configuration", mutate: func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Admission.EnablePlugins = []string{"ImagePolicyWebhook"}
		}, field: "spec.admission.enablePlugins[0]", message: `couldn't init admission plugin "ImagePolicyWebhook"`},

		// EventRateLimit: the operator renders its configuration.
		{name: "EventRateLimit with the default limits", mutate: func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Admission.EventRateLimit = &v1alpha1.EventRateLimitSpec{}
		}},
		{name: "EventRateLimit with a limit of every type", mutate: func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Admission.EventRateLimit = &v1alpha1.EventRateLimitSpec{Limits: []v1alpha1.EventRateLimit{
				{Type: "Server", QPS: 100, Burst: 200}, {Type: "Namespace", QPS: 10, Burst: 20, CacheSize: ptr.To[int32](100)},
				{Type: "User", QPS: 5, Burst: 10}, {Type: "SourceAndObject", QPS: 1, Burst: 5, CacheSize: ptr.To[int32](1000)},
			}}
		}},
		{name: "EventRateLimit both turned on and disabled", mutate: func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Admission.EventRateLimit = &v1alpha1.EventRateLimitSpec{}
			c.Spec.Admission.DisablePlugins = []string{"EventRateLimit"}
		}, field: "spec.admission.disablePlugins", message: "overlapped"},
		{name: "an EventRateLimit limit upstream refuses", mutate: func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Admission.EventRateLimit = &v1alpha1.EventRateLimitSpec{Limits: []v1alpha1.EventRateLimit{{Type: "Namespace", QPS: 0, Burst: 10}}}
		}, field: "spec.admission.eventRateLimit.limits[0].qps", message: "limits[0].qps"},
		{name: "EventRateLimit listed in enablePlugins, without its limits", mutate: func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Admission.EnablePlugins = []string{"EventRateLimit"}
		}, field: "spec.admission.enablePlugins[0]", message: "limits: Invalid value"},

		// OIDC issuers upstream refuses.
		{name: "an issuer URL with a query", mutate: func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Authentication.OIDC = &v1alpha1.OIDCSpec{IssuerURL: "https://issuer.example.com?x=1", ClientID: "k"}
		}, field: "spec.authentication.oidc.issuerURL", message: "URL must not contain a query"},
		{name: "an issuer URL with user info", mutate: func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Authentication.OIDC = &v1alpha1.OIDCSpec{IssuerURL: "https://user:pw@issuer.example.com", ClientID: "k"}
		}, field: "spec.authentication.oidc.issuerURL", message: "URL must not contain"},
		{name: "an issuer URL equal to the service-account issuer", mutate: func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Authentication.OIDC = &v1alpha1.OIDCSpec{IssuerURL: "https://kubernetes.default.svc.cluster.local", ClientID: "k"}
		}, field: "spec.authentication.serviceAccount.issuers", message: "must not overlap with disallowed issuers"},

		// JWT authenticators, judged by upstream's loader (CEL compiled
		// there) and placed at the spec field of the file's field.
		{name: "two JWT issuers with CEL mappings and rules", mutate: jwt(func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Authentication.OIDC = &v1alpha1.OIDCSpec{IssuerURL: "https://issuer.example.com", ClientID: "k", CAConfigMapName: "ca"}
			c.Spec.Authentication.AnonymousPaths = []string{"/.well-known/openid-configuration", "/openid/v1/jwks"}
		})},
		{name: "a CEL claim rule that does not compile", mutate: jwt(func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Authentication.OIDC = &v1alpha1.OIDCSpec{IssuerURL: "https://issuer.example.com", ClientID: "k"}
			c.Spec.Authentication.JWT[1].ClaimValidationRules[0].Expression = "claims.tier =="
		}), field: "spec.authentication.jwt[1].claimValidationRules[0].expression", message: "compilation failed"},
		{name: "a user rule naming an undeclared variable", mutate: jwt(func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Authentication.JWT[1].UserValidationRules[0].Expression = "users.username != 'root'"
		}), field: "spec.authentication.jwt[1].userValidationRules[0].expression", message: "undeclared reference to 'users'"},
		{name: "a claim without its prefix", mutate: jwt(func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Authentication.JWT[1].ClaimMappings.Groups = v1alpha1.PrefixedClaimOrExpression{Claim: "groups"}
		}), field: "spec.authentication.jwt[1].claimMappings.groups.prefix", message: "Required value"},
		{name: "the same issuer twice", mutate: jwt(func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Authentication.JWT[1].Issuer.URL = c.Spec.Authentication.JWT[0].Issuer.URL
		}), field: "spec.authentication.jwt[1].issuer.url", message: "Duplicate value"},
		{name: "two audiences without a match policy", mutate: jwt(func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Authentication.JWT[0].Issuer.Audiences = []string{"a", "b"}
		}), field: "spec.authentication.jwt[0].issuer.audienceMatchPolicy", message: "audienceMatchPolicy must be MatchAny for multiple audiences"},

		// The ServiceAccount issuer's discovery for workload identity.
		{name: "a JWKS URI for the issuer's discovery", mutate: func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Authentication.ServiceAccount.JWKSURI = "https://keys.example.com/tenant/jwks"
			c.Spec.Authentication.ServiceAccount.Issuers = []string{"https://tenant.example.com", "https://kubernetes.default.svc.cluster.local"}
		}},

		// The authorization chain, judged by upstream's loader
		// (matchConditions compiled there), placed at the spec's field.
		{name: "a chain of two webhooks with matchConditions", mutate: authorizers(nil)},
		{name: "a matchCondition that does not compile", mutate: authorizers(func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Authorization.Authorizers[2].Webhook.MatchConditions[0].Expression = "request.resourceAttributes.namespace =="
		}), field: "spec.authorization.authorizers[2].webhook.matchConditions[0].expression", message: "compilation failed"},
		{name: "a matchCondition that is not a boolean", mutate: authorizers(func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Authorization.Authorizers[3].Webhook.MatchConditions = []v1alpha1.AuthorizerMatchCondition{{Expression: "request.user"}}
		}), field: "spec.authorization.authorizers[3].webhook.matchConditions[0].expression", message: "must evaluate to bool"},
		{name: "a webhook timeout past upstream's 30s", mutate: authorizers(func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Authorization.Authorizers[2].Webhook.Timeout = &metav1.Duration{Duration: time.Minute}
		}), field: "spec.authorization.authorizers[2].webhook.timeout", message: "must be"},
		{name: "two authorizers of one name", mutate: authorizers(func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Authorization.Authorizers[3].Name = c.Spec.Authorization.Authorizers[2].Name
		}), field: "spec.authorization.authorizers[3].name", message: "Duplicate value"},
		{name: "a chain without RBAC", mutate: authorizers(func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Authorization.Authorizers = slices.Delete(c.Spec.Authorization.Authorizers, 1, 2)
		}), field: "spec.authorization.authorizers", message: "must include RBAC"},
		{name: "AlwaysAllow in the chain", mutate: authorizers(func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Authorization.Authorizers = append(c.Spec.Authorization.Authorizers, v1alpha1.Authorizer{Type: "AlwaysAllow", Name: "open"})
		}), field: "spec.authorization.authorizers[4].type", message: "AlwaysAllow authorizes every request"},

		// The audit webhook: its kubeconfig is read at start (a stand-in
		// here), its settings judged by upstream.
		{name: "an audit webhook with every setting", mutate: auditWebhook(func(w *v1alpha1.AuditWebhookSpec) {
			w.InitialBackoff = &metav1.Duration{Duration: 5 * time.Second}
			w.Batch = &v1alpha1.AuditWebhookBatchSpec{BufferSize: ptr.To[int32](20000), MaxSize: ptr.To[int32](100),
				MaxWait: &metav1.Duration{Duration: 5 * time.Second}, ThrottleQPS: ptr.To[int32](20), ThrottleBurst: ptr.To[int32](40)}
			w.Truncate = &v1alpha1.AuditWebhookTruncateSpec{MaxEventBytes: ptr.To[int64](200000), MaxBatchBytes: ptr.To[int64](2000000)}
		})},
		{name: "a blocking-strict audit webhook", mutate: auditWebhook(func(w *v1alpha1.AuditWebhookSpec) { w.Mode = v1alpha1.AuditWebhookBlockingStrict })},
		{name: "an audit webhook event larger than upstream's default batch", mutate: auditWebhook(func(w *v1alpha1.AuditWebhookSpec) {
			w.Truncate = &v1alpha1.AuditWebhookTruncateSpec{MaxEventBytes: ptr.To[int64](20000000)}
		}), field: "spec.audit.webhook.truncate.maxEventBytes", message: "must be greater than max event size (20000000)"},
		// Upstream's messages name these in words of their own ("invalid
		// audit truncate webhook max batch size 5000"), and quote "batch",
		// the mode's value, within them.
		{name: "an audit webhook batch smaller than an event", mutate: auditWebhook(func(w *v1alpha1.AuditWebhookSpec) {
			w.Truncate = &v1alpha1.AuditWebhookTruncateSpec{MaxEventBytes: ptr.To[int64](100), MaxBatchBytes: ptr.To[int64](50)}
		}), field: "spec.audit.webhook.truncate.maxBatchBytes", message: "audit truncate webhook max batch size"},
		{name: "an audit webhook batch of a short size", mutate: auditWebhook(func(w *v1alpha1.AuditWebhookSpec) {
			w.Truncate = &v1alpha1.AuditWebhookTruncateSpec{MaxBatchBytes: ptr.To[int64](5000)}
		}), field: "spec.audit.webhook.truncate.maxBatchBytes", message: "audit truncate webhook max batch size"},
		{name: "the deprecated name of the audit webhook's backoff beside its field", mutate: func(c *v1alpha1.ApiServerConfig) {
			auditWebhook(func(w *v1alpha1.AuditWebhookSpec) { w.InitialBackoff = &metav1.Duration{Duration: time.Second} })(c)
			extraArgs("audit-webhook-batch-initial-backoff=3s")(c)
		}, field: "spec.extraArgs[0].name", message: "set it there only"},
		{name: "an audit webhook setting in extraArgs", mutate: extraArgs("audit-webhook-mode=blocking"), field: "spec.extraArgs[0].name", message: "managed by the operator from spec.audit.webhook.mode"},

		// Encryption resources upstream refuses.
		{name: "encryption of *", mutate: func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Encryption = &v1alpha1.EncryptionSpec{Provider: "secretbox", Resources: []string{"*"}}
		}, field: "spec.encryption.resources[0]", message: "use '*.' to encrypt all the resources from core API group"},
		{name: "a removed group spelling", mutate: func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Encryption = &v1alpha1.EncryptionSpec{Provider: "secretbox", Resources: []string{"secrets", "deployments.extensions"}}
		}, field: "spec.encryption.resources[1]", message: "'extensions' group has been removed"},

		// runtimeConfig keys.
		{name: "a version that is not registered", mutate: func(c *v1alpha1.ApiServerConfig) {
			c.Spec.RuntimeConfig = map[string]string{"batch/v2alpha1": "true"}
		}, field: "spec.runtimeConfig", message: "batch/v2alpha1 that has not been registered"},
		{name: "an unknown group", mutate: func(c *v1alpha1.ApiServerConfig) {
			c.Spec.RuntimeConfig = map[string]string{"foo.example.com/v1": "true"}
		}, field: "spec.runtimeConfig", message: "unknown api groups foo.example.com/v1"},
		{name: "api/all=false alone", mutate: func(c *v1alpha1.ApiServerConfig) {
			c.Spec.RuntimeConfig = map[string]string{"api/all": "false"}
		}, field: "spec.runtimeConfig", message: "api/all=false"},
		{name: "flowcontrol off with priority and fairness on", mutate: func(c *v1alpha1.ApiServerConfig) {
			c.Spec.RuntimeConfig = map[string]string{"flowcontrol.apiserver.k8s.io/v1": "false"}
		}, field: "spec.runtimeConfig", message: "conflicts with --enable-priority-and-fairness=true"},

		// Families.
		{name: "an IPv6 first range with an IPv4 pod network and the lease reconciler", mutate: func(c *v1alpha1.ApiServerConfig) {
			c.Spec.ServiceClusterIPRange = []string{"fd00:10:96::/108", "10.96.0.0/16"}
		}, field: "spec.serviceClusterIPRange", message: `service IP family "fd00:10:96::/108" must match public address family`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs, _ := a.Admit(context.Background(), nil, tenant(tc.mutate))
			expectRefusal(t, errs, tc.field, tc.message)
		})
	}
}

// TestAdmission_TheValidatorsDirectoryNamesNoField: the validator stands in
// for the pod's file system with a directory of random name, and a
// message quoting a path carries that name. Whatever the name holds (a
// flag with its dashes, a flag's name, a value the spec sets), the error
// is placed at the field that set the path, and only there.
func TestAdmission_TheValidatorsDirectoryNamesNoField(t *testing.T) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = filepath.Join("..", "..", "bin")
	}
	for _, name := range []string{"--secure-port=6443", "secure-port 6443", "6443", "profiling"} {
		t.Run(name, func(t *testing.T) {
			pool := validatorpool.NewPool(dir, validatorpool.WorkDir(filepath.Join(t.TempDir(), name)))
			t.Cleanup(pool.Close)
			a := Admission{Validator: pool}
			errs, _ := a.Admit(context.Background(), nil, tenant(extraArgs("show-hidden-metrics-for-version=/etc/kubernetes/nothing")))
			expectRefusal(t, errs, "spec.extraArgs[0].value", "/etc/kubernetes/nothing")
			if len(errs) != 1 {
				t.Fatalf("want the one field that set the path refused, got %v", errs.ToAggregate())
			}
		})
	}
}

// TestAdmission_FailsClosed: without an answer from kube-apiserver's code,
// nothing is admitted, and the refusal says why.
func TestAdmission_FailsClosed(t *testing.T) {
	for name, v := range map[string]validatorpool.Validator{
		"no validator binary":     validatorpool.NewPool(t.TempDir()),
		"a validator that dies":   brokenPool(t),
		"no validator configured": nil,
	} {
		t.Run(name, func(t *testing.T) {
			errs, _ := Admission{Validator: v}.Admit(context.Background(), nil, tenant(nil))
			if len(errs) == 0 {
				t.Fatal("admitted a spec that no validator checked")
			}
			if msg := errs.ToAggregate().Error(); !strings.Contains(msg, "nothing") || !strings.Contains(msg, "unchecked") {
				t.Fatalf("the refusal does not say that nothing is admitted unchecked: %s", msg)
			}
		})
	}
}

// brokenPool has a "validator" that exits without answering.
func brokenPool(t *testing.T) *validatorpool.Pool {
	t.Helper()
	dir := t.TempDir()
	script := "#!/bin/sh\necho ready\nexit 3\n"
	if err := os.WriteFile(filepath.Join(dir, validatorpool.BinaryPrefix+v1alpha1.BundledVersion), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	pool := validatorpool.NewPool(dir)
	t.Cleanup(pool.Close)
	return pool
}

// expectRefusal fails unless errs refuse path with message; an empty path
// expects no refusal.
func expectRefusal(t *testing.T, errs field.ErrorList, path, message string) {
	t.Helper()
	if path == "" {
		if len(errs) > 0 {
			t.Fatalf("refused: %v", errs.ToAggregate())
		}
		return
	}
	if !slices.ContainsFunc(errs, func(e *field.Error) bool { return e.Field == path && strings.Contains(e.Error(), message) }) {
		t.Fatalf("want %s refused with %q, got %v", path, message, errs.ToAggregate())
	}
	t.Logf("Refused at %s: %s", path, message)
}
