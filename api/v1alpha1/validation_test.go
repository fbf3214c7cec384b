package v1alpha1_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	controlplanev1alpha1 "github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// baseManifest is a valid ApiServerConfig; each case below breaks it with a
// JSON merge patch, the way a user edits a manifest.
const baseManifest = `{
  "apiVersion": "controlplane.apiserver-operator.dev/v1alpha1",
  "kind": "ApiServerConfig",
  "metadata": {"name": "tenant"},
  "spec": {
    "etcd": {"servers": ["https://etcd-0.etcd:2379"], "tls": {"secretName": "etcd-client"}},
    "serviceClusterIPRange": ["10.96.0.0/12"]
  }
}`

// manifest applies merge patches to baseManifest and returns the object.
func manifest(t *testing.T, namespace string, patches ...string) *unstructured.Unstructured {
	t.Helper()
	doc := []byte(baseManifest)
	for _, p := range patches {
		var err error
		doc, err = jsonpatch.MergePatch(doc, []byte(p))
		if err != nil {
			t.Fatalf("applying merge patch %s: %v", p, err)
		}
	}
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(doc, &u.Object); err != nil {
		t.Fatalf("decoding manifest: %v", err)
	}
	u.SetNamespace(namespace)
	return u
}

// rejectCase is a spec the apiserver must refuse at admission, with the field
// path and the words that the user must see in the error.
type rejectCase struct {
	name    string
	patch   string
	field   string
	message string
}

func TestApiServerConfig_RejectsInvalidSpecsAtAdmission(t *testing.T) {
	cases := []rejectCase{
		// metadata
		{"name too long for the Service", `{"metadata":{"name":"a-very-long-tenant-name-that-cannot-name-a-service-xyz"}}`, "<nil>", "metadata.name must be a DNS label of at most 52 characters"},
		{"name starting with a digit", `{"metadata":{"name":"1tenant"}}`, "<nil>", "metadata.name must be a DNS label of at most 52 characters starting with a letter"},
		// etcd
		{"etcd missing", `{"spec":{"etcd":null}}`, "spec.etcd", "Required value"},
		{"no etcd server", `{"spec":{"etcd":{"servers":[]}}}`, "spec.etcd.servers", "at least 1 items"},
		{"etcd server without scheme", `{"spec":{"etcd":{"servers":["etcd-0:2379"]}}}`, "spec.etcd.servers[0]", "must be an http:// or https:// URL"},
		{"etcd server with unix scheme", `{"spec":{"etcd":{"servers":["unix:///var/run/etcd.sock"]}}}`, "spec.etcd.servers[0]", "must be an http:// or https:// URL"},
		{"etcd server without port", `{"spec":{"etcd":{"servers":["https://etcd-0.etcd"]}}}`, "spec.etcd.servers[0]", "with a host and a port"},
		{"override server without port", `{"spec":{"etcd":{"overrides":[{"group":"","resource":"events","servers":["http://e"]}]}}}`, "spec.etcd.overrides[0].servers[0]", "with a host and a port"},
		{"etcd server with separator", `{"spec":{"etcd":{"servers":["https://a:2379;https://b:2379"]}}}`, "spec.etcd.servers[0]", "must not contain ',', ';' or '#'"},
		{"etcd prefix not absolute", `{"spec":{"etcd":{"prefix":"registry"}}}`, "spec.etcd.prefix", "should match"},
		{"etcd TLS secret name empty", `{"spec":{"etcd":{"tls":{"secretName":""}}}}`, "spec.etcd.tls.secretName", "at least 1 chars"},
		{"override listed twice", `{"spec":{"etcd":{"overrides":[{"group":"","resource":"events","servers":["https://e:2379"]},{"group":"","resource":"events","servers":["https://f:2379"]}]}}}`, "spec.etcd.overrides", "each group/resource may be overridden once"},
		{"override without servers", `{"spec":{"etcd":{"overrides":[{"group":"","resource":"events","servers":[]}]}}}`, "spec.etcd.overrides[0].servers", "at least 1 items"},
		{"override resource not lower case", `{"spec":{"etcd":{"overrides":[{"group":"","resource":"Events","servers":["https://e:2379"]}]}}}`, "spec.etcd.overrides[0].resource", "should match"},
		{"override group malformed", `{"spec":{"etcd":{"overrides":[{"group":"apps_v1","resource":"deployments","servers":["https://e:2379"]}]}}}`, "spec.etcd.overrides[0].group", "should match"},
		{"override server with fragment", `{"spec":{"etcd":{"overrides":[{"group":"","resource":"events","servers":["https://e:2379#x"]}]}}}`, "spec.etcd.overrides[0].servers[0]", "must not contain"},
		// service ranges
		{"service range not a CIDR", `{"spec":{"serviceClusterIPRange":["10.96.0.0"]}}`, "spec.serviceClusterIPRange[0]", "must be a CIDR"},
		{"service range with host bits", `{"spec":{"serviceClusterIPRange":["10.96.0.1/12"]}}`, "spec.serviceClusterIPRange[0]", "host bits must be zero"},
		{"IPv4 service range under 8 addresses", `{"spec":{"serviceClusterIPRange":["10.96.0.0/30"]}}`, "spec.serviceClusterIPRange[0]", "at least 8 addresses"},
		{"IPv6 service range under 8 addresses", `{"spec":{"serviceClusterIPRange":["fd00::/126"]}}`, "spec.serviceClusterIPRange[0]", "at least 8 addresses"},
		{"three service ranges", `{"spec":{"serviceClusterIPRange":["10.96.0.0/12","fd00::/108","10.200.0.0/16"]}}`, "spec.serviceClusterIPRange", "at most 2 items"},
		{"two IPv4 service ranges", `{"spec":{"serviceClusterIPRange":["10.96.0.0/12","10.200.0.0/16"]}}`, "spec.serviceClusterIPRange", "different IP families"},
		{"node port range without end", `{"spec":{"serviceNodePortRange":"30000"}}`, "spec.serviceNodePortRange", "should match"},
		{"node port range reversed", `{"spec":{"serviceNodePortRange":"32767-30000"}}`, "spec.serviceNodePortRange", "1 <= FIRST <= LAST <= 65535"},
		{"node port range past 65535", `{"spec":{"serviceNodePortRange":"30000-70000"}}`, "spec.serviceNodePortRange", "1 <= FIRST <= LAST <= 65535"},
		// replicas, version, reconciler
		{"negative masterCount", `{"spec":{"masterCount":-1}}`, "spec.masterCount", "greater than or equal to 0"},
		{"unknown endpoint reconciler", `{"spec":{"endpointReconcilerType":"leases"}}`, "spec.endpointReconcilerType", "Unsupported value"},
		{"other version without an image", `{"spec":{"version":"v1.38.0"}}`, "spec.version", "v1.38.0 is not a bundled version (" + strings.Join(controlplanev1alpha1.BundledVersions, ", ") + ")"},
		{"version without v prefix and patch", `{"spec":{"version":"1.37"}}`, "spec.version", "should match"},
		// serving
		{"secure port 0", `{"spec":{"serving":{"securePort":0}}}`, "spec.serving.securePort", "greater than or equal to 1"},
		{"secure port past 65535", `{"spec":{"serving":{"securePort":70000}}}`, "spec.serving.securePort", "less than or equal to 65535"},
		{"TLS 1.0 allowed", `{"spec":{"serving":{"tls":{"minVersion":"VersionTLS10"}}}}`, "spec.serving.tls.minVersion", "Unsupported value"},
		{"CBC cipher suite", `{"spec":{"serving":{"tls":{"cipherSuites":["TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"]}}}}`, "spec.serving.tls.cipherSuites[0]", "Unsupported value"},
		{"cipher suites with TLS 1.3", `{"spec":{"serving":{"tls":{"minVersion":"VersionTLS13","cipherSuites":["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"]}}}}`, "spec.serving.tls.cipherSuites", "cannot be set with minVersion VersionTLS13"},
		{"cipher suites unusable with ECDSA key", `{"spec":{"serving":{"tls":{"cipherSuites":["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]}}}}`, "spec.serving.tls.cipherSuites", "must include at least one suite that matches the serving key"},
		{"extra SAN with underscore", `{"spec":{"serving":{"extraSANs":["api_server.example.com"]}}}`, "spec.serving.extraSANs[0]", "IP address or a lower-case DNS name"},
		{"external hostname is a URL", `{"spec":{"serving":{"externalHostname":"https://api.example.com"}}}`, "spec.serving.externalHostname", "IP address or a lower-case DNS name"},
		{"node port on a ClusterIP service", `{"spec":{"serving":{"service":{"type":"ClusterIP","nodePort":30443}}}}`, "spec.serving.service.nodePort", "requires type NodePort or LoadBalancer"},
		{"unknown service type", `{"spec":{"serving":{"service":{"type":"ExternalName"}}}}`, "spec.serving.service.type", "Unsupported value"},
		// authentication
		{"OIDC issuer over http", `{"spec":{"authentication":{"oidc":{"issuerURL":"http://login.example.com","clientID":"k"}}}}`, "spec.authentication.oidc.issuerURL", "must be an https:// URL"},
		{"OIDC without client ID", `{"spec":{"authentication":{"oidc":{"issuerURL":"https://login.example.com"}}}}`, "spec.authentication.oidc.clientID", "Required value"},
		{"duplicate service account issuer", `{"spec":{"authentication":{"serviceAccount":{"issuers":["https://a.example.com","https://a.example.com"]}}}}`, "spec.authentication.serviceAccount.issuers[1]", "Duplicate value"},
		{"service account issuer with colon not a URL", `{"spec":{"authentication":{"serviceAccount":{"issuers":["issuer:tenant"]}}}}`, "spec.authentication.serviceAccount.issuers[0]", "must be an https:// URL"},
		{"token expiration under 1h", `{"spec":{"authentication":{"serviceAccount":{"maxTokenExpiration":"30m"}}}}`, "spec.authentication.serviceAccount.maxTokenExpiration", "between 1h and 4294967296s"},
		{"token expiration not a duration", `{"spec":{"authentication":{"serviceAccount":{"maxTokenExpiration":"one day"}}}}`, "spec.authentication.serviceAccount.maxTokenExpiration", "should match"},
		// authorization and admission
		{"ABAC authorization", `{"spec":{"authorization":{"modes":["ABAC"]}}}`, "spec.authorization.modes[0]", "Unsupported value"},
		{"Webhook mode without webhook", `{"spec":{"authorization":{"modes":["Node","RBAC","Webhook"]}}}`, "spec.authorization.webhook", "webhook is required"},
		{"no authorization mode", `{"spec":{"authorization":{"modes":[]}}}`, "spec.authorization.modes", "at least 1 items"},
		{"plugin enabled and disabled", `{"spec":{"admission":{"enablePlugins":["PodNodeSelector"],"disablePlugins":["PodNodeSelector"]}}}`, "spec.admission", "both enabled and disabled"},
		{"AlwaysAdmit enabled", `{"spec":{"admission":{"enablePlugins":["AlwaysAdmit"]}}}`, "spec.admission.enablePlugins", "AlwaysAdmit"},
		{"NodeRestriction disabled", `{"spec":{"admission":{"disablePlugins":["NodeRestriction"]}}}`, "spec.admission.disablePlugins", "cannot be disabled"},
		{"EventRateLimit listed without its limits", `{"spec":{"admission":{"enablePlugins":["EventRateLimit"]}}}`, "spec.admission.enablePlugins", "turn it on with spec.admission.eventRateLimit"},
		{"EventRateLimit turned on and disabled", `{"spec":{"admission":{"eventRateLimit":{},"disablePlugins":["EventRateLimit"]}}}`, "spec.admission.disablePlugins", "cannot also be disabled"},
		{"event rate limit of 0 qps", `{"spec":{"admission":{"eventRateLimit":{"limits":[{"type":"Namespace","qps":0,"burst":10}]}}}}`, "spec.admission.eventRateLimit.limits[0].qps", "greater than or equal to 1"},
		{"event rate limit of an unknown type", `{"spec":{"admission":{"eventRateLimit":{"limits":[{"type":"Pod","qps":1,"burst":10}]}}}}`, "spec.admission.eventRateLimit.limits[0].type", "Unsupported value"},
		{"two event rate limits of one type", `{"spec":{"admission":{"eventRateLimit":{"limits":[{"type":"User","qps":1,"burst":10},{"type":"User","qps":2,"burst":10}]}}}}`, "spec.admission.eventRateLimit.limits[1]", "Duplicate value"},
		{"no event rate limit", `{"spec":{"admission":{"eventRateLimit":{"limits":[]}}}}`, "spec.admission.eventRateLimit.limits", "at least 1 items"},
		// audit, encryption, sizing, limits
		{"negative audit max age", `{"spec":{"audit":{"maxAge":-1}}}`, "spec.audit.maxAge", "greater than or equal to 0"},
		{"negative audit backups", `{"spec":{"audit":{"maxBackups":-5}}}`, "spec.audit.maxBackups", "greater than or equal to 0"},
		{"audit webhook without its kubeconfig", `{"spec":{"audit":{"webhook":{"mode":"batch"}}}}`, "spec.audit.webhook.kubeconfigSecretName", "Required value"},
		{"unknown audit webhook mode", `{"spec":{"audit":{"webhook":{"kubeconfigSecretName":"w","mode":"async"}}}}`, "spec.audit.webhook.mode", "Unsupported value"},
		{"audit webhook batch settings when blocking", `{"spec":{"audit":{"webhook":{"kubeconfigSecretName":"w","mode":"blocking","batch":{"maxSize":10}}}}}`, "spec.audit.webhook.batch", "only read with mode batch"},
		{"audit webhook buffer of 0", `{"spec":{"audit":{"webhook":{"kubeconfigSecretName":"w","batch":{"bufferSize":0}}}}}`, "spec.audit.webhook.batch.bufferSize", "greater than or equal to 1"},
		{"audit webhook batch wait of 0", `{"spec":{"audit":{"webhook":{"kubeconfigSecretName":"w","batch":{"maxWait":"0s"}}}}}`, "spec.audit.webhook.batch.maxWait", "must be more than 0"},
		{"audit webhook backoff not a duration", `{"spec":{"audit":{"webhook":{"kubeconfigSecretName":"w","initialBackoff":"-1s"}}}}`, "spec.audit.webhook.initialBackoff", "should match"},
		{"audit webhook event size of 0", `{"spec":{"audit":{"webhook":{"kubeconfigSecretName":"w","truncate":{"maxEventBytes":0}}}}}`, "spec.audit.webhook.truncate.maxEventBytes", "greater than or equal to 1"},
		{"encryption provider and config both", `{"spec":{"encryption":{"provider":"aescbc","configSecretName":"enc"}}}`, "spec.encryption", "exactly one of provider and configSecretName"},
		{"unknown encryption provider", `{"spec":{"encryption":{"provider":"none"}}}`, "spec.encryption.provider", "Unsupported value"},
		{"rotation period with the user's configuration", `{"spec":{"encryption":{"configSecretName":"enc","rotationPeriod":"720h"}}}`, "spec.encryption.rotationPeriod", "rotates only the keys it generates"},
		{"rotation period too short", `{"spec":{"encryption":{"provider":"secretbox","rotationPeriod":"10m"}}}`, "spec.encryption.rotationPeriod", "at least 1h"},
		{"negative max inflight", `{"spec":{"requests":{"maxInflight":-1}}}`, "spec.requests.maxInflight", "greater than or equal to 0"},
		{"request timeout of 0", `{"spec":{"requests":{"timeout":"0s"}}}`, "spec.requests.timeout", "at least 1s"},
		{"event TTL of seconds", `{"spec":{"eventTTL":"10s"}}`, "spec.eventTTL", "at least 1m"},
		{"unknown cache sizing policy", `{"spec":{"cacheSizing":{"policy":"Dynamic"}}}`, "spec.cacheSizing.policy", "Unsupported value"},
		{"negative target RAM", `{"spec":{"cacheSizing":{"targetRAMMB":-512}}}`, "spec.cacheSizing.targetRAMMB", "greater than or equal to 0"},
		{"watch cache disabled twice for a resource", `{"spec":{"cacheSizing":{"disabledResources":[{"group":"","resource":"events"},{"group":"","resource":"events"}]}}}`, "spec.cacheSizing.disabledResources", "listed once"},
		// certificates
		{"leaf validity beyond CA validity", `{"spec":{"certificates":{"validity":"87600h","caValidity":"8760h"}}}`, "spec.certificates.validity", "shorter than caValidity"},
		{"leaf validity beyond a year", `{"spec":{"certificates":{"validity":"8761h"}}}`, "spec.certificates.validity", "must be at most 8760h (a year)"},
		{"CA validity beyond ten years", `{"spec":{"certificates":{"caValidity":"87601h"}}}`, "spec.certificates.caValidity", "must be at most 87600h (ten years)"},
		{"renewal at 99 percent", `{"spec":{"certificates":{"renewalPercent":99}}}`, "spec.certificates.renewalPercent", "less than or equal to 95"},
		{"unknown key algorithm", `{"spec":{"certificates":{"keyAlgorithm":"DSA"}}}`, "spec.certificates.keyAlgorithm", "Unsupported value"},
		// extra args, feature gates, runtime config
		{"removed flag in extra args", `{"spec":{"extraArgs":[{"name":"insecure-port","value":"8080"}]}}`, "spec.extraArgs[0].name", "--insecure-port was removed from kube-apiserver"},
		{"managed apiserver-count in extra args", `{"spec":{"extraArgs":[{"name":"apiserver-count","value":"3"}]}}`, "spec.extraArgs[0].name", "follows spec.masterCount"},
		{"static token file in extra args", `{"spec":{"extraArgs":[{"name":"token-auth-file","value":"/tokens.csv"}]}}`, "spec.extraArgs[0].name", "CIS 1.2.2"},
		{"extra arg with dashes", `{"spec":{"extraArgs":[{"name":"--v","value":"4"}]}}`, "spec.extraArgs[0].name", "should match"},
		{"feature gate not CamelCase", `{"spec":{"featureGates":{"my-gate":true}}}`, "spec.featureGates", "CamelCase"},
		{"runtime config value not boolean", `{"spec":{"runtimeConfig":{"api/all":"yes"}}}`, "spec.runtimeConfig", "must be \"true\" or \"false\""},
	}

	ns := newNamespace(t)
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := manifest(t, ns, tc.patch)
			err := env.Client.Create(ctx, obj)
			if err == nil {
				t.Fatalf("the apiserver accepted the invalid spec %s; want an error on %s", tc.patch, tc.field)
			}
			assertInvalid(t, err, tc.field, tc.message)
			t.Logf("Refused as expected: %v", err)
		})
	}
}

// assertInvalid checks that err is a 422 Invalid that names field and says
// message, as `kubectl apply` would print it.
func assertInvalid(t *testing.T, err error, field, message string) {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want an Invalid (422) error naming %s, got %v", field, err)
	}
	var causes []string
	found := false
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Details != nil {
		for _, c := range status.Status().Details.Causes {
			causes = append(causes, c.Field+": "+c.Message)
			if c.Field == field && strings.Contains(c.Message, message) {
				found = true
			}
		}
	}
	if !found {
		t.Fatalf("want a cause on %s saying %q, got causes:\n  %s\nerror: %v", field, message, strings.Join(causes, "\n  "), err)
	}
	if !strings.Contains(err.Error(), field) {
		t.Fatalf("the message the user sees does not name %s: %v", field, err)
	}
}

// updateCase is a change to an existing object that must be refused.
type updateCase struct {
	name    string
	initial string
	patch   string
	field   string
	message string
}

func TestApiServerConfig_RejectsUnsafeUpdatesAndKeepsTheObject(t *testing.T) {
	cases := []updateCase{
		{"primary service range changed", `{}`, `{"spec":{"serviceClusterIPRange":["10.100.0.0/16"]}}`, "spec.serviceClusterIPRange", "primary (first) range is immutable"},
		{"single stack swapped for another family", `{}`, `{"spec":{"serviceClusterIPRange":["fd00::/108"]}}`, "spec.serviceClusterIPRange", "primary (first) range is immutable"},
		{"minor version downgrade", `{"spec":{"version":"v1.37.1"}}`, `{"spec":{"version":"v1.36.4","image":"registry.example.com/kube-apiserver:v1.36.4"}}`, "spec.version", "may not be downgraded"},
		{"patch version downgrade", `{"spec":{"version":"v1.37.1"}}`, `{"spec":{"version":"v1.37.0","image":"registry.example.com/kube-apiserver:v1.37.0"}}`, "spec.version", "may not be downgraded"},
	}
	ns := newNamespace(t)
	ctx := context.Background()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := manifest(t, ns, tc.initial)
			obj.SetName(obj.GetName() + "-" + string(rune('a'+i)))
			if err := env.Client.Create(ctx, obj); err != nil {
				t.Fatalf("creating the initial object: %v", err)
			}
			before := obj.GetResourceVersion()
			err := env.Client.Patch(ctx, obj.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(tc.patch)))
			if err == nil {
				t.Fatalf("the apiserver accepted the update %s; want an error on %s", tc.patch, tc.field)
			}
			assertInvalid(t, err, tc.field, tc.message)

			stored := &controlplanev1alpha1.ApiServerConfig{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), stored); err != nil {
				t.Fatalf("reading the object back: %v", err)
			}
			if stored.ResourceVersion != before {
				t.Fatalf("the rejected update changed the stored object (resourceVersion %s -> %s)", before, stored.ResourceVersion)
			}
		})
	}
}

func TestApiServerConfig_AcceptsSafeUpdates(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	obj := manifest(t, ns, `{"spec":{"version":"v1.37.0","image":"registry.example.com/kube-apiserver:v1.37.0"}}`)
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatalf("creating the object: %v", err)
	}
	// Upgrading, and turning a single-stack control plane into a dual-stack
	// one by adding a secondary range, are the changes users make in place.
	patch := `{"spec":{"version":"v1.37.1","image":null,"serviceClusterIPRange":["10.96.0.0/12","fd00:10:96::/108"],"masterCount":3}}`
	if err := env.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatalf("upgrading and adding an IPv6 range was refused: %v", err)
	}
	stored := &controlplanev1alpha1.ApiServerConfig{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), stored); err != nil {
		t.Fatalf("reading the object back: %v", err)
	}
	if stored.Spec.Version != "v1.37.1" || len(stored.Spec.ServiceClusterIPRange) != 2 || *stored.Spec.MasterCount != 3 {
		t.Fatalf("the update was not stored: version %s, ranges %v, masterCount %d",
			stored.Spec.Version, stored.Spec.ServiceClusterIPRange, *stored.Spec.MasterCount)
	}
}
