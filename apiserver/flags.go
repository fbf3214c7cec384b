package apiserver

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	utilversion "k8s.io/apimachinery/pkg/util/version"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// MinimumVersion is the oldest kube-apiserver the operator renders for.
// Only the bundled version is verified against a real binary; older ones
// rely on the version table below.
var MinimumVersion = utilversion.MustParseSemantic("v1.19.0")

// flagSpan is the range of versions in which a flag exists: from added
// (inclusive, empty for always) to removed (exclusive, empty for still
// there).
type flagSpan struct{ added, removed string }

// flagHistory records flags that appeared or disappeared in the versions the
// operator supports, from upstream's history (see the facts file in
// shared/reference). Flags absent from this table exist in every supported
// version. The catalog of the bundled version is the final word for it.
var flagHistory = map[string]flagSpan{
	// The cache heuristic flag: ignored since 1.19, removed in 1.24.
	"target-ram-mb": {removed: "v1.24.0"},
	// A no-op since 1.13, removed in 1.24.
	"deserialization-cache-size": {removed: "v1.24.0"},
	// The insecure port and its address, removed in 1.24.
	"insecure-port":         {removed: "v1.24.0"},
	"insecure-bind-address": {removed: "v1.24.0"},
	"port":                  {removed: "v1.24.0"},
	"address":               {removed: "v1.24.0"},
	// Structured authentication configuration: the operator uses it from
	// v1 (1.34), with anonymous access limited to the health endpoints.
	"authentication-config": {added: "v1.34.0"},
	// Structured authorization configuration, apiserver.config.k8s.io/v1
	// from 1.32.
	"authorization-config": {added: "v1.32.0"},
}

// FlagSupported reports whether kube-apiserver at version v has the flag.
func FlagSupported(name string, v *utilversion.Version, catalog *Catalog) bool {
	if catalog != nil {
		_, ok := catalog.Flags[name]
		return ok
	}
	span, ok := flagHistory[name]
	if !ok {
		return true
	}
	if span.added != "" && v.LessThan(utilversion.MustParseSemantic(span.added)) {
		return false
	}
	if span.removed != "" && !v.LessThan(utilversion.MustParseSemantic(span.removed)) {
		return false
	}
	return true
}

// usesAuthenticationConfig reports whether anonymous access and OIDC go in
// an AuthenticationConfiguration file rather than in flags.
func usesAuthenticationConfig(c *Completed) bool {
	return FlagSupported("authentication-config", c.Version, c.Catalog)
}

// managedFlag is one flag with its values in order, and the spec field that sets
// it (for the error when a user also sets it in extraArgs).
type managedFlag struct {
	name   string
	values []string
	field  string
}

// managedFlags are the flags the operator derives from the typed spec and its
// own PKI and files. They win over everything; extraArgs may not set them.
func managedFlags(c *Completed) []managedFlag {
	s := &c.Spec
	f := []managedFlag{
		{"advertise-address", []string{"$(" + PodIPEnv + ")"}, "the pod IP"},
		{"secure-port", []string{itoa(s.Serving.SecurePort)}, "spec.serving.securePort"},
		{"etcd-servers", []string{strings.Join(c.Etcd.Main, ",")}, "spec.etcd.servers"},
		{"etcd-prefix", []string{s.Etcd.Prefix}, "spec.etcd.prefix"},
		{"service-cluster-ip-range", []string{strings.Join(s.ServiceClusterIPRange, ",")}, "spec.serviceClusterIPRange"},
		{"service-node-port-range", []string{s.ServiceNodePortRange}, "spec.serviceNodePortRange"},
		{"endpoint-reconciler-type", []string{string(s.EndpointReconcilerType)}, "spec.endpointReconcilerType"},
		{"tls-cert-file", []string{ServingCertFile}, "spec.certificates"},
		{"tls-private-key-file", []string{ServingKeyFile}, "spec.certificates"},
		{"client-ca-file", []string{CAFile}, "spec.certificates"},
		{"tls-min-version", []string{s.Serving.TLS.MinVersion}, "spec.serving.tls.minVersion"},
		{"kubelet-client-certificate", []string{KubeletClientCertFile}, "spec.certificates"},
		{"kubelet-client-key", []string{KubeletClientKeyFile}, "spec.certificates"},
		{"proxy-client-cert-file", []string{FrontProxyClientCertFile}, "spec.certificates"},
		{"proxy-client-key-file", []string{FrontProxyClientKeyFile}, "spec.certificates"},
		{"requestheader-client-ca-file", []string{FrontProxyCAFile}, "spec.certificates"},
		{"requestheader-allowed-names", []string{"front-proxy-client"}, "spec.certificates"},
		{"requestheader-username-headers", []string{"X-Remote-User"}, "spec.certificates"},
		{"requestheader-group-headers", []string{"X-Remote-Group"}, "spec.certificates"},
		{"requestheader-extra-headers-prefix", []string{"X-Remote-Extra-"}, "spec.certificates"},
		{"service-account-issuer", c.ServiceAccountIssuers, "spec.authentication.serviceAccount.issuers"},
		{"service-account-key-file", []string{ServiceAccountKeyFile}, "spec.certificates"},
		{"service-account-signing-key-file", []string{ServiceAccountSigningKeyFile}, "spec.certificates"},
		{"service-account-extend-token-expiration", []string{strconv.FormatBool(*s.Authentication.ServiceAccount.ExtendTokenExpiration)}, "spec.authentication.serviceAccount.extendTokenExpiration"},
		{"authorization-mode", []string{joinModes(s.Authorization.Modes)}, "spec.authorization.modes"},
		{"enable-admission-plugins", []string{strings.Join(enabledPlugins(c), ",")}, "spec.admission.enablePlugins"},
		{"audit-log-path", []string{AuditLogFile}, "spec.audit"},
		{"audit-policy-file", []string{AuditPolicyFile}, "spec.audit.policyConfigMapName"},
		{"audit-log-maxage", []string{itoa(*s.Audit.MaxAge)}, "spec.audit.maxAge"},
		{"audit-log-maxbackup", []string{itoa(*s.Audit.MaxBackups)}, "spec.audit.maxBackups"},
		{"audit-log-maxsize", []string{itoa(*s.Audit.MaxSizeMB)}, "spec.audit.maxSizeMB"},
		{"event-ttl", []string{s.EventTTL.Duration.String()}, "spec.eventTTL"},
		{"profiling", []string{strconv.FormatBool(*s.Profiling)}, "spec.profiling"},
		{"max-requests-inflight", []string{strconv.FormatInt(c.Sizing.MaxInflight, 10)}, "spec.requests.maxInflight"},
		{"max-mutating-requests-inflight", []string{strconv.FormatInt(c.Sizing.MaxMutatingInflight, 10)}, "spec.requests.maxMutatingInflight"},
		{"watch-cache", []string{strconv.FormatBool(c.Sizing.WatchCache)}, "spec.cacheSizing.watchCache"},
		{"egress-selector-config-file", []string{EgressSelectorConfigFile}, "it sends etcd connections through the etcd dialer sidecar"},
	}
	add := func(name, field string, values ...string) { f = append(f, managedFlag{name, values, field}) }

	if s.Etcd.TLS != nil {
		add("etcd-cafile", "spec.etcd.tls", EtcdCAFile)
		add("etcd-certfile", "spec.etcd.tls", EtcdCertFile)
		add("etcd-keyfile", "spec.etcd.tls", EtcdKeyFile)
	}
	if len(c.Etcd.Overrides) > 0 {
		add("etcd-servers-overrides", "spec.etcd.overrides", c.Etcd.OverridesFlag())
	}
	if s.EndpointReconcilerType == v1alpha1.EndpointReconcilerMasterCount {
		// Only the master-count reconciler reads it; it must be > 0, so a
		// hibernated control plane keeps 1.
		add("apiserver-count", "spec.masterCount", itoa(max(*s.MasterCount, 1)))
	}
	if h := s.Serving.ExternalHostname; h != "" {
		add("external-hostname", "spec.serving.externalHostname", h)
	}
	if len(s.Serving.TLS.CipherSuites) > 0 {
		add("tls-cipher-suites", "spec.serving.tls.cipherSuites", strings.Join(s.Serving.TLS.CipherSuites, ","))
	}
	if u := s.Authentication.ServiceAccount.JWKSURI; u != "" {
		add("service-account-jwks-uri", "spec.authentication.serviceAccount.jwksURI", u)
	}
	if d := s.Authentication.ServiceAccount.MaxTokenExpiration; d != nil {
		add("service-account-max-token-expiration", "spec.authentication.serviceAccount.maxTokenExpiration", d.Duration.String())
	}
	if usesAuthenticationConfig(c) {
		add("authentication-config", "spec.authentication", AuthenticationConfigFile)
	} else {
		add("anonymous-auth", "spec.authentication.anonymous", strconv.FormatBool(*s.Authentication.Anonymous))
		if o := s.Authentication.OIDC; o != nil {
			add("oidc-issuer-url", "spec.authentication.oidc.issuerURL", o.IssuerURL)
			add("oidc-client-id", "spec.authentication.oidc.clientID", o.ClientID)
			add("oidc-username-claim", "spec.authentication.oidc.usernameClaim", o.UsernameClaim)
			if o.UsernamePrefix != "" {
				add("oidc-username-prefix", "spec.authentication.oidc.usernamePrefix", o.UsernamePrefix)
			}
			if o.GroupsClaim != "" {
				add("oidc-groups-claim", "spec.authentication.oidc.groupsClaim", o.GroupsClaim)
			}
			if o.GroupsPrefix != "" {
				add("oidc-groups-prefix", "spec.authentication.oidc.groupsPrefix", o.GroupsPrefix)
			}
			if o.CAConfigMapName != "" {
				add("oidc-ca-file", "spec.authentication.oidc.caConfigMapName", OIDCCAFile)
			}
		}
	}
	if s.Authorization.Webhook != nil {
		add("authorization-webhook-config-file", "spec.authorization.webhook", AuthorizationWebhookKubeconfigFile)
	}
	if w := s.Audit.Webhook; w != nil {
		f = append(f, auditWebhookFlags(w)...)
	}
	if usesAdmissionConfig(c) {
		add("admission-control-config-file", "spec.admission.eventRateLimit", AdmissionConfigFile)
	}
	if usesAuthorizers(c) {
		// In --authorization-mode's place: kube-apiserver refuses both.
		i := slices.IndexFunc(f, func(m managedFlag) bool { return m.name == "authorization-mode" })
		f[i] = managedFlag{"authorization-config", []string{AuthorizationConfigFile}, "spec.authorization.authorizers"}
	}
	if usesKonnectivity(c) {
		// The konnectivity agents' name: a certificate of the
		// konnectivity CA, which kube-apiserver reloads from its files as
		// it does its serving certificate.
		add("tls-sni-cert-key", "spec.konnectivity", KonnectivityAPIServerCertFile+","+KonnectivityAPIServerKeyFile+":"+KonnectivityAgentServerName)
	}
	if len(s.Admission.DisablePlugins) > 0 {
		disabled := slices.Sorted(slices.Values(s.Admission.DisablePlugins))
		add("disable-admission-plugins", "spec.admission.disablePlugins", strings.Join(disabled, ","))
	}
	if s.Encryption != nil {
		add("encryption-provider-config", "spec.encryption", EncryptionConfigFile)
	}
	if len(s.FeatureGates) > 0 {
		add("feature-gates", "spec.featureGates", joinMap(s.FeatureGates, strconv.FormatBool))
	}
	if len(s.RuntimeConfig) > 0 {
		add("runtime-config", "spec.runtimeConfig", joinMap(s.RuntimeConfig, func(v string) string { return v }))
	}
	if d := s.Requests.Timeout; d != nil {
		add("request-timeout", "spec.requests.timeout", d.Duration.String())
	}
	if t := s.Requests.MinTimeoutSeconds; t != nil {
		add("min-request-timeout", "spec.requests.minTimeoutSeconds", itoa(*t))
	}
	if c.Sizing.WatchCache && len(c.Sizing.DisabledWatchCaches) > 0 {
		sizes := make([]string, 0, len(c.Sizing.DisabledWatchCaches))
		for _, r := range c.Sizing.DisabledWatchCaches {
			sizes = append(sizes, r+"#0")
		}
		add("watch-cache-sizes", "spec.cacheSizing.disabledResources", strings.Join(sizes, ","))
	}
	if c.Sizing.TargetRAMMB > 0 && FlagSupported("target-ram-mb", c.Version, c.Catalog) {
		add("target-ram-mb", "spec.cacheSizing.targetRAMMB", strconv.FormatInt(c.Sizing.TargetRAMMB, 10))
	}
	return f
}

// auditWebhookFlags send audit events to spec.audit.webhook as well as to
// the log: its kubeconfig, its mode, and only the settings the spec sets,
// so that the others keep kube-apiserver's defaults.
func auditWebhookFlags(w *v1alpha1.AuditWebhookSpec) []managedFlag {
	const at = "spec.audit.webhook"
	f := []managedFlag{
		{"audit-webhook-config-file", []string{AuditWebhookKubeconfigFile}, at + ".kubeconfigSecretName"},
		{"audit-webhook-mode", []string{string(w.Mode)}, at + ".mode"},
	}
	add := func(name, field, value string) { f = append(f, managedFlag{name, []string{value}, at + "." + field}) }
	if d := w.InitialBackoff; d != nil {
		add("audit-webhook-initial-backoff", "initialBackoff", d.Duration.String())
	}
	if b := w.Batch; b != nil {
		if b.BufferSize != nil {
			add("audit-webhook-batch-buffer-size", "batch.bufferSize", itoa(*b.BufferSize))
		}
		if b.MaxSize != nil {
			add("audit-webhook-batch-max-size", "batch.maxSize", itoa(*b.MaxSize))
		}
		if b.MaxWait != nil {
			add("audit-webhook-batch-max-wait", "batch.maxWait", b.MaxWait.Duration.String())
		}
		if b.ThrottleQPS != nil {
			add("audit-webhook-batch-throttle-qps", "batch.throttleQPS", itoa(*b.ThrottleQPS))
		}
		if b.ThrottleBurst != nil {
			add("audit-webhook-batch-throttle-burst", "batch.throttleBurst", itoa(*b.ThrottleBurst))
		}
	}
	if t := w.Truncate; t != nil {
		add("audit-webhook-truncate-enabled", "truncate", "true")
		if t.MaxEventBytes != nil {
			add("audit-webhook-truncate-max-event-size", "truncate.maxEventBytes", strconv.FormatInt(*t.MaxEventBytes, 10))
		}
		if t.MaxBatchBytes != nil {
			add("audit-webhook-truncate-max-batch-size", "truncate.maxBatchBytes", strconv.FormatInt(*t.MaxBatchBytes, 10))
		}
	}
	return f
}

// cipherSuites are the suites the apiservers' port offers beyond TLS 1.3:
// spec.serving.tls.cipherSuites, or secureCipherSuites for TLS 1.2; none
// (Go's defaults) otherwise.
func cipherSuites(c *Completed) []string {
	switch {
	case len(c.Spec.Serving.TLS.CipherSuites) > 0:
		return c.Spec.Serving.TLS.CipherSuites
	case c.Spec.Serving.TLS.MinVersion == "VersionTLS12":
		return secureCipherSuites
	}
	return nil
}

// secureCipherSuites are the TLS 1.2 AEAD suites the CIS benchmark (1.2.29)
// allows, rendered when the user chose none.
var secureCipherSuites = []string{
	"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
	"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
	"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
	"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
	"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
	"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
}

// defaultFlags fill what neither the operator nor the user set. A user may
// override each of them in extraArgs.
func defaultFlags(c *Completed) []managedFlag {
	f := []managedFlag{
		// Privileged pods (CNI, CSI node plugins) are common; kubeadm's choice.
		{"allow-privileged", []string{"true"}, ""},
		// Nodes join with bootstrap tokens, as kubeadm does.
		{"enable-bootstrap-token-auth", []string{"true"}, ""},
		{"kubelet-preferred-address-types", []string{"InternalIP,ExternalIP,Hostname"}, ""},
		// CIS 1.2.5: kubelets' serving certificates are checked against the
		// cluster CA.
		{"kubelet-certificate-authority", []string{CAFile}, ""},
		// CIS 1.2.21 wants it explicit.
		{"service-account-lookup", []string{"true"}, ""},
		// On SIGTERM keep serving while the endpoints drop this pod, and
		// tell clients to retry elsewhere meanwhile: rollouts and scale-down
		// fail no request.
		{"shutdown-delay-duration", []string{"10s"}, ""},
		{"shutdown-send-retry-after", []string{"true"}, ""},
	}
	if c.Spec.Serving.TLS.MinVersion == "VersionTLS12" && len(c.Spec.Serving.TLS.CipherSuites) == 0 {
		f = append(f, managedFlag{"tls-cipher-suites", []string{strings.Join(cipherSuites(c), ",")}, ""})
	}
	if c.EtcdUser != "" {
		// Its etcd user may not compact (etcd allows Compact to root
		// alone): the platform compacts its datastore. A user's value
		// wins, and etcd refuses its compactions.
		f = append(f, managedFlag{"etcd-compaction-interval", []string{"0s"}, ""})
	}
	return f
}

// ManagedFlagFields maps each flag the operator sets to the spec field that
// sets it, for any spec: users may not set these in extraArgs. The caller
// must not modify the map.
var ManagedFlagFields = sync.OnceValue(func() map[string]string {
	fields := map[string]string{}
	// The widest specs set every managed flag the operator knows, in both
	// authentication styles.
	for _, c := range widestSpecs() {
		for _, f := range managedFlags(c) {
			fields[f.name] = f.field
		}
	}
	return fields
})

// Args renders the kube-apiserver command line: managed flags, then the
// user's extraArgs, then defaults, each as --name=value, sorted by name
// (repeated flags keep their order), so the same spec always gives the same
// bytes. Flags the target version does not have are never rendered. It
// fails if extraArgs set a flag the operator manages; Validate reports that
// earlier, at admission.
func Args(c *Completed) ([]string, error) {
	managed := managedFlags(c)
	owner := map[string]string{}
	merged := map[string][]string{}
	for _, f := range defaultFlags(c) {
		merged[f.name] = f.values
	}
	userSet := map[string]bool{}
	for _, a := range c.Spec.ExtraArgs {
		if !userSet[a.Name] {
			userSet[a.Name] = true
			merged[a.Name] = nil
		}
		merged[a.Name] = append(merged[a.Name], extraArgValue(a, c.Catalog))
	}
	for _, f := range managed {
		if userSet[f.name] {
			return nil, fmt.Errorf("extraArgs sets --%s, which the operator manages from %s: set it there instead", f.name, f.field)
		}
		owner[f.name] = f.field
		merged[f.name] = f.values
	}

	names := make([]string, 0, len(merged))
	for name := range merged {
		// A removed flag makes kube-apiserver exit; a user's flag is kept as
		// given (Validate checks it against the catalog).
		if !userSet[name] && !FlagSupported(name, c.Version, c.Catalog) {
			if _, isManaged := owner[name]; isManaged && c.Catalog != nil {
				return nil, fmt.Errorf("rendering the flags of kube-apiserver %s: the operator sets --%s but this version has no such flag", c.Version, name)
			}
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	var args []string
	for _, name := range names {
		for _, v := range merged[name] {
			args = append(args, "--"+name+"="+v)
		}
	}
	return args, nil
}

// extraArgValue is the value of a user's flag, with a bare boolean flag
// turned on explicitly (kube-bench reads --flag=value only).
func extraArgValue(a v1alpha1.ExtraArg, catalog *Catalog) string {
	if a.Value != "" {
		return a.Value
	}
	if catalog == nil {
		return "true"
	}
	if f, ok := catalog.Flags[a.Name]; ok && f.Type == "bool" {
		return "true"
	}
	return ""
}

// DenyServiceExternalIPs is the admission plugin that refuses new
// externalIPs on Services (CVE-2020-8554).
const DenyServiceExternalIPs = "DenyServiceExternalIPs"

// pluginsAdded records admission plugins that appeared in the versions the
// operator supports, like flagHistory for flags. The catalog of the
// bundled version is the final word for it.
var pluginsAdded = map[string]string{
	DenyServiceExternalIPs: "v1.21.0",
}

// PluginSupported reports whether kube-apiserver at version v has the
// admission plugin.
func PluginSupported(name string, v *utilversion.Version, catalog *Catalog) bool {
	if catalog != nil {
		_, ok := catalog.AdmissionPlugins[name]
		return ok
	}
	added, ok := pluginsAdded[name]
	return !ok || !v.LessThan(utilversion.MustParseSemantic(added))
}

// enabledPlugins are spec.admission.enablePlugins, the plugins of typed
// fields (EventRateLimit) and the plugins the operator turns on for every
// tenant, sorted: NodeRestriction (CIS 1.2.14; the CRD refuses to disable
// it) and DenyServiceExternalIPs (CIS 1.2.3), unless
// spec.admission.disablePlugins lists it: kube-apiserver refuses a plugin
// that is both enabled and disabled, and a user who disables a default
// means it.
func enabledPlugins(c *Completed) []string {
	a := c.Spec.Admission
	plugins := append([]string{"NodeRestriction"}, a.EnablePlugins...)
	if !slices.Contains(a.DisablePlugins, DenyServiceExternalIPs) && PluginSupported(DenyServiceExternalIPs, c.Version, c.Catalog) {
		plugins = append(plugins, DenyServiceExternalIPs)
	}
	if a.EventRateLimit != nil {
		plugins = append(plugins, EventRateLimit)
	}
	slices.Sort(plugins)
	return slices.Compact(plugins)
}

func joinModes(modes []v1alpha1.AuthorizationMode) string {
	s := make([]string, len(modes))
	for i, m := range modes {
		s[i] = string(m)
	}
	return strings.Join(s, ",")
}

func joinMap[V any](m map[string]V, format func(V) string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + format(m[k])
	}
	return strings.Join(parts, ",")
}

func itoa(i int32) string { return strconv.Itoa(int(i)) }

// FlagSource is a flag the operator renders and where its value comes
// from.
type FlagSource struct {
	Name   string
	Values []string
	// Field is the spec field it is rendered from ("spec.etcd.servers"),
	// or what else when it does not start with "spec." ("the pod IP").
	Field string
	// Default: a default of the operator's, which extraArgs may replace.
	Default bool
}

// FlagSources are the flags the operator renders for c: those it manages
// from the spec, then its defaults.
func FlagSources(c *Completed) []FlagSource {
	var out []FlagSource
	for _, f := range managedFlags(c) {
		out = append(out, FlagSource{Name: f.name, Values: f.values, Field: f.field})
	}
	for _, f := range defaultFlags(c) {
		out = append(out, FlagSource{Name: f.name, Values: f.values, Field: f.field, Default: true})
	}
	return out
}
