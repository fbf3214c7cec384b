package render

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/admission"
	"github.com/apiserver-operator/apiserver-operator/apiserver/validatorpool"
)

// TestAdmission_AgreesWithKubeAPIServer is the differential test of
// admission: random specs, most of them wrong in some way (extra arguments
// drawn from the flag catalog with random values of each flag's type,
// random feature gates, admission plugins, runtime-config keys, encryption
// resources, service ranges), go through admission as a user's apply does
// (the CRD's schema and CEL rules, then the webhook's Admit). Every spec
// admitted is then rendered as the controller renders it (with the
// Service's ClusterIP known) and judged again by the bundled kube-apiserver's
// own code: a spec admitted that kube-apiserver would refuse fails the test,
// with the spec printed. The other way round, a spec that the catalog checks
// refuse in kube-apiserver's stead (a flag, gate or plugin it does not have)
// must be refused by kube-apiserver's code too. ADMISSION_FUZZ_SPECS sets how many specs (make
// test runs a few hundred; make fuzz-admission 10 000), ADMISSION_FUZZ_SEED
// which (1 by default; CI draws other specs on each commit).
func TestAdmission_AgreesWithKubeAPIServer(t *testing.T) {
	n := 200
	if v := os.Getenv("ADMISSION_FUZZ_SPECS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatalf("ADMISSION_FUZZ_SPECS=%q: %v", v, err)
		}
	}
	opts := options(t)
	// What admission accepted is judged again exactly as the pod's
	// start-up runs, without the Pool's shortcuts.
	exact := exactValidator(t)
	// Each bundled version in turn, judged by its own code; gates and
	// plugins are drawn from every version's catalog, so that what one
	// version removed or added is tried on the other.
	catalogs := bundledCatalogs(t)
	gens := make([]*generator, len(catalogs))
	for i, c := range catalogs {
		gens[i] = newGenerator(c, catalogs)
	}
	seed := fuzzSeed(t, n)

	var admitted, refused atomic.Int64
	var mu sync.Mutex
	var failures []string
	work := make(chan uint64)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range work {
				if msg := checkOne(opts, exact, gens[s%uint64(len(gens))], s, &admitted, &refused); msg != "" {
					mu.Lock()
					failures = append(failures, msg)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range uint64(n) {
		work <- seed*1_000_003 + i
		if i > 0 && i%1000 == 0 {
			t.Logf("%d specs: %d admitted, %d refused", i, admitted.Load(), refused.Load())
		}
	}
	close(work)
	wg.Wait()
	t.Logf("%d specs over %s: %d admitted, %d refused", n, strings.Join(v1alpha1.BundledVersions, ", "), admitted.Load(), refused.Load())
	if admitted.Load() == 0 || refused.Load() == 0 {
		t.Errorf("the generator is off: %d admitted, %d refused", admitted.Load(), refused.Load())
	}
	for _, f := range failures {
		t.Error(f)
	}
}

// checkOne admits one random spec and, if admitted, judges the
// controller's rendering of it; it returns a failure, or "".
func checkOne(opts Options, exact validatorpool.Validator, gen *generator, seed uint64, admitted, refused *atomic.Int64) string {
	cfg := gen.spec(seed)
	manifest, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Sprintf("seed %d: %v", seed, err)
	}
	got, err := admit(manifest, opts.CRD, opts.Admission)
	if err != nil {
		if strings.Contains(err.Error(), "Internal error") {
			return fmt.Sprintf("seed %d: admission could not judge:\n%s\n%v", seed, manifest, err)
		}
		refused.Add(1)
		if f := misplacedAuthentication(err); f != "" {
			return fmt.Sprintf("seed %d: refused for its authentication or authorization configuration at %s, outside the spec field that renders it:\n%s\n%v", seed, f, manifest, err)
		}
		return checkCatalogRefusal(opts, exact, cfg, seed, manifest)
	}
	admitted.Add(1)
	c, err := apiserver.Complete(got, apiserver.Inputs{ServiceClusterIP: serviceClusterIP(got)})
	if err != nil {
		return fmt.Sprintf("seed %d: admitted, then the controller could not complete it: %v\n%s", seed, err, manifest)
	}
	req, err := admission.ValidationRequest(c, opts.Admission.PodIP)
	if err != nil {
		return fmt.Sprintf("seed %d: admitted, then the controller could not render it: %v\n%s", seed, err, manifest)
	}
	res, err := exact.Validate(context.Background(), c.Spec.Version, req)
	if err != nil {
		return fmt.Sprintf("seed %d: the validator did not answer: %v", seed, err)
	}
	if len(res.Problems) > 0 {
		return fmt.Sprintf("seed %d: admitted, but kube-apiserver %s refuses its rendering: %v\n%s", seed, res.Version, res.Problems, manifest)
	}
	return ""
}

// misplacedAuthentication is the field of a refusal of upstream's
// authentication or authorization configuration loaders that is not under
// spec.authentication or spec.authorization.authorizers, where everything
// the files hold comes from; "" when there is none.
func misplacedAuthentication(err error) string {
	var status *apierrors.StatusError
	if !errors.As(err, &status) || status.ErrStatus.Details == nil {
		return ""
	}
	for _, cause := range status.ErrStatus.Details.Causes {
		if strings.Contains(cause.Message, "authentication configuration") && !strings.HasPrefix(cause.Field, "spec.authentication") {
			return cause.Field
		}
		if strings.Contains(cause.Message, "authorizers[") && !strings.HasPrefix(cause.Field, "spec.authorization.authorizers") {
			return cause.Field
		}
	}
	return ""
}

// catalogPhrases are the refusals of the catalog checks that stand for
// kube-apiserver's own (a flag, gate or plugin it does not have, a gate
// locked to its default), as opposed to the operator's policy.
var catalogPhrases = []string{"has no flag", "has no feature gate", "is locked to", "has no admission plugin"}

// checkCatalogRefusal checks the other direction for a spec the catalog
// checks refused in kube-apiserver's stead, and for nothing else: its
// rendering must be refused by kube-apiserver's code too.
func checkCatalogRefusal(opts Options, exact validatorpool.Validator, cfg *v1alpha1.ApiServerConfig, seed uint64, manifest []byte) string {
	errs, _ := apiserver.Validate(cfg)
	if len(errs) == 0 {
		return ""
	}
	for _, e := range errs {
		if !slices.ContainsFunc(catalogPhrases, func(p string) bool { return strings.Contains(e.Detail, p) }) {
			return "" // the operator's own rule, or a CRD rule
		}
	}
	defaulted := cfg.DeepCopy()
	apiserver.SetDefaults(&defaulted.Spec)
	c, err := apiserver.Complete(defaulted, apiserver.Inputs{})
	if err != nil {
		return ""
	}
	req, err := admission.ValidationRequest(c, opts.Admission.PodIP)
	if err != nil {
		return ""
	}
	res, err := exact.Validate(context.Background(), c.Spec.Version, req)
	if err != nil {
		return fmt.Sprintf("seed %d: the validator did not answer: %v", seed, err)
	}
	if len(res.Problems) == 0 {
		return fmt.Sprintf("seed %d: the catalog checks refuse what kube-apiserver %s accepts: %v\n%s", seed, res.Version, errs.ToAggregate(), manifest)
	}
	return ""
}

// bundledCatalogs are the catalogs of every bundled version.
func bundledCatalogs(t *testing.T) []*apiserver.Catalog {
	t.Helper()
	var catalogs []*apiserver.Catalog
	for _, v := range v1alpha1.BundledVersions {
		catalog, err := apiserver.CatalogFor(utilversion.MustParseSemantic(v))
		if err != nil || catalog == nil {
			t.Fatalf("no catalog of the bundled version %s: %v", v, err)
		}
		catalogs = append(catalogs, catalog)
	}
	return catalogs
}

// serviceClusterIP is an address of the first range that is not its first
// one, as a Service would get.
func serviceClusterIP(cfg *v1alpha1.ApiServerConfig) string {
	ranges := cfg.Spec.ServiceClusterIPRange
	if len(ranges) == 0 {
		return ""
	}
	p, err := netip.ParsePrefix(ranges[0])
	if err != nil {
		return ""
	}
	a := p.Addr()
	for range 5 {
		a = a.Next()
	}
	return a.String()
}

// generator draws specs of one bundled version from what its
// kube-apiserver knows, and from what it does not (misspellings, and what
// the other bundled versions have).
type generator struct {
	catalog   *apiserver.Catalog
	flags     []string // not managed by the operator
	gates     []string
	plugins   []string
	resources []string // resource.group, as encryption names them
}

func newGenerator(c *apiserver.Catalog, all []*apiserver.Catalog) *generator {
	g := &generator{catalog: c}
	managed := apiserver.ManagedFlagFields()
	for _, name := range c.FlagNames() {
		if _, ok := managed[name]; !ok {
			g.flags = append(g.flags, name)
		}
	}
	gates, plugins := map[string]bool{}, map[string]bool{}
	for _, other := range all {
		for name := range other.FeatureGates {
			gates[name] = true
		}
		for name := range other.AdmissionPlugins {
			plugins[name] = true
		}
	}
	for name := range gates {
		g.gates = append(g.gates, name)
	}
	for name := range plugins {
		g.plugins = append(g.plugins, name)
	}
	for gr := range c.Resources {
		if gr.Group == "" {
			g.resources = append(g.resources, gr.Resource)
		} else {
			g.resources = append(g.resources, gr.Resource+"."+gr.Group)
		}
	}
	sort.Strings(g.gates)
	sort.Strings(g.plugins)
	sort.Strings(g.resources)
	return g
}

// value is a value for a flag of typ: usually well formed, sometimes out of
// range or malformed.
func (g *generator) value(r *rand.Rand, typ string) string {
	pick := func(vs ...string) string { return vs[r.IntN(len(vs))] }
	switch typ {
	case "bool":
		return pick("true", "false", "true", "false", "maybe")
	case "int", "int32", "int64", "uint", "uint32":
		return pick(fmt.Sprint(r.IntN(100)), fmt.Sprint(r.IntN(100000)), "0", "-1", "1", "x")
	case "float32", "float64":
		return pick("0", "0.01", "0.02", "0.5", "-0.1", "1e3")
	case "duration":
		return pick(fmt.Sprintf("%ds", r.IntN(600)), "0s", "-1s", "1h", "10ms", "5")
	case "ip":
		return pick("10.0.0.1", "fd00::1", "0.0.0.0", "not-an-ip")
	case "stringSlice", "stringArray":
		return pick("a,b", "", "https://example.com", "*", "^x$,(y")
	case "mapStringString", "mapStringBool", "stringToString":
		return pick("a=b", "a=true", "x", "a=b,c=d")
	default:
		return pick("", "x", "/etc/kubernetes/nothing", "json", "legacy", "application/json", "etcd3", "1.36", "1.37", "v1", "none")
	}
}

func (g *generator) spec(seed uint64) *v1alpha1.ApiServerConfig {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	coin := func(p int) bool { return r.IntN(100) < p }
	pick := func(vs []string) string { return vs[r.IntN(len(vs))] }
	s := v1alpha1.ApiServerConfigSpec{
		Version: g.catalog.Version,
		Etcd:    v1alpha1.EtcdSpec{Servers: []string{"https://etcd-0:2379"}, Prefix: fmt.Sprintf("/tenants/t%d", r.IntN(100))},
		ServiceClusterIPRange: [][]string{
			{"10.96.0.0/12"}, {"10.96.0.0/12"}, {"172.20.0.0/16", "fd00:20::/108"},
			{"fd00:30::/112"}, {"fd00:30::/112", "10.30.0.0/16"}, {"10.40.0.0/16", "fd00:40::/48"},
		}[r.IntN(6)],
		EndpointReconcilerType: v1alpha1.EndpointReconcilerType(pick([]string{"lease", "lease", "none", "master-count"})),
	}
	if coin(50) {
		s.Etcd.TLS = &v1alpha1.EtcdTLS{SecretName: "etcd-client"}
	}
	for range r.IntN(3) {
		name := pick(g.flags)
		if coin(5) {
			name = pick([]string{"enable-admision-plugins", "goaway-chanse", "insecure-port"})
		}
		if slices.ContainsFunc(s.ExtraArgs, func(a v1alpha1.ExtraArg) bool { return a.Name == name }) {
			continue
		}
		s.ExtraArgs = append(s.ExtraArgs, v1alpha1.ExtraArg{Name: name, Value: g.value(r, g.catalog.Flags[name].Type)})
	}
	if coin(30) {
		s.FeatureGates = map[string]bool{}
		for range 1 + r.IntN(2) {
			s.FeatureGates[pick(append([]string{"NoSuchGate"}, g.gates...))] = coin(50)
		}
	}
	if coin(30) {
		p := pick(append([]string{"NoSuchPlugin"}, g.plugins...))
		if coin(70) {
			s.Admission.EnablePlugins = []string{p}
		} else if !slices.Contains([]string{"ServiceAccount", "NamespaceLifecycle", "NodeRestriction"}, p) {
			s.Admission.DisablePlugins = []string{p}
		}
	}
	if coin(15) {
		// EventRateLimit's own field: the default limits, or random ones,
		// some of them refused by the CRD (0, a type twice); sometimes
		// disabled too.
		s.Admission.EventRateLimit = &v1alpha1.EventRateLimitSpec{}
		for range r.IntN(3) {
			s.Admission.EventRateLimit.Limits = append(s.Admission.EventRateLimit.Limits, v1alpha1.EventRateLimit{
				Type: v1alpha1.EventRateLimitType(pick([]string{"Server", "Namespace", "User", "SourceAndObject"})),
				QPS:  int32(r.IntN(100)), Burst: int32(r.IntN(1000)),
			})
		}
		if coin(10) {
			s.Admission.DisablePlugins = append(s.Admission.DisablePlugins, "EventRateLimit")
		}
	}
	if coin(25) {
		s.RuntimeConfig = map[string]string{pick([]string{
			"api/all", "api/beta", "api/alpha", "api/ga", "batch/v1", "batch/v2alpha1", "flowcontrol.apiserver.k8s.io/v1",
			"resource.k8s.io/v1beta1", "resource.k8s.io/v1alpha3", "storage.k8s.io/v1alpha1", "foo.example.com/v1",
			"apps/v1/deployments", "admissionregistration.k8s.io/v1beta1",
		}): pick([]string{"true", "false"})}
	}
	if coin(25) {
		s.Encryption = &v1alpha1.EncryptionSpec{Provider: v1alpha1.EncryptionProvider(pick([]string{"secretbox", "aescbc", "aesgcm"}))}
		for range 1 + r.IntN(2) {
			res := pick(append([]string{"*.", "*.*", "*", "*.apps", "secret", "widgets.example.com", "deployments.extensions"}, g.resources...))
			if !slices.Contains(s.Encryption.Resources, res) {
				s.Encryption.Resources = append(s.Encryption.Resources, res)
			}
		}
	}
	if coin(20) {
		s.Authentication.OIDC = &v1alpha1.OIDCSpec{ClientID: "kube", IssuerURL: pick([]string{
			"https://login.example.com", "https://login.example.com/path", "https://login.example.com?q=1",
			"https://u:p@login.example.com", "https://kubernetes.default.svc.cluster.local",
		})}
	}
	if coin(15) {
		// An audit webhook with random settings, some of them refused by
		// the CRD (0, batch settings in a blocking mode) or by upstream
		// (an event larger than the batch).
		w := &v1alpha1.AuditWebhookSpec{KubeconfigSecretName: "audit-webhook",
			Mode: v1alpha1.AuditWebhookMode(pick([]string{"", "batch", "blocking", "blocking-strict"}))}
		count := func() *int32 { return ptr.To([]int32{0, 1, 15, 400, 10000}[r.IntN(5)]) }
		bytes := func() *int64 { return ptr.To([]int64{0, 1, 102400, 10485760, 20000000}[r.IntN(5)]) }
		wait := func() *metav1.Duration {
			return &metav1.Duration{Duration: []time.Duration{0, time.Millisecond, time.Second, time.Minute}[r.IntN(4)]}
		}
		if coin(50) {
			w.InitialBackoff = wait()
		}
		if coin(50) {
			b := &v1alpha1.AuditWebhookBatchSpec{}
			for _, set := range []func(){
				func() { b.BufferSize = count() }, func() { b.MaxSize = count() }, func() { b.MaxWait = wait() },
				func() { b.ThrottleQPS = count() }, func() { b.ThrottleBurst = count() },
			} {
				if coin(40) {
					set()
				}
			}
			w.Batch = b
		}
		if coin(30) {
			w.Truncate = &v1alpha1.AuditWebhookTruncateSpec{}
			if coin(60) {
				w.Truncate.MaxEventBytes = bytes()
			}
			if coin(60) {
				w.Truncate.MaxBatchBytes = bytes()
			}
		}
		s.Audit.Webhook = w
	}
	if coin(20) {
		g.jwt(r, &s)
	}
	if coin(15) {
		modes := [][]v1alpha1.AuthorizationMode{{"Node", "RBAC"}, {"RBAC"}, {"Node"}, {"AlwaysDeny", "RBAC"}, {"RBAC", "AlwaysAllow"}}
		s.Authorization.Modes = modes[r.IntN(len(modes))]
	} else if coin(15) {
		g.authorizers(r, &s)
	}
	return &v1alpha1.ApiServerConfig{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ApiServerConfig"},
		ObjectMeta: metav1.ObjectMeta{Name: "fuzz", Namespace: "fuzz"},
		Spec:       s,
	}
}

// jwt gives s one to three JWT issuers drawn from right and wrong
// values: URLs upstream refuses (a query, http, the ServiceAccount
// issuer, one issuer twice), CEL expressions that do not compile or give
// the wrong type, claims without their prefix, several audiences without
// a match policy, extra keys that are not domain-prefixed, and anonymous
// paths (refused by the CRD with anonymous on).
func (g *generator) jwt(r *rand.Rand, s *v1alpha1.ApiServerConfigSpec) {
	coin := func(p int) bool { return r.IntN(100) < p }
	pick := func(vs []string) string { return vs[r.IntN(len(vs))] }
	urls := []string{"https://a.example.com", "https://b.example.com/realm", "https://c.example.com:8443",
		"https://a.example.com?q=1", "http://d.example.com", "https://kubernetes.default.svc.cluster.local"}
	claimRules := []string{`claims.tier == "gold"`, `has(claims.email_verified) && claims.email_verified`, `claims.tier ==`, `claims.sub`, `user.username == "x"`}
	usernames := []string{`claims.sub`, `'b:' + claims.sub`, `claims.exp > 0`, `claims.email`, `claims.sub +`}
	values := []string{`claims.tier`, `'gold'`, `claims.groups`, `1`, `claims.`}
	userRules := []string{`!user.username.startsWith('system:')`, `user.groups.all(g, g != 'system:masters')`, `users.username != ''`, `user.username`}
	for range 1 + r.IntN(3) {
		j := v1alpha1.JWTAuthenticator{Issuer: v1alpha1.JWTIssuer{URL: pick(urls), Audiences: []string{"tenant"}}}
		if coin(20) {
			j.Issuer.Audiences = append(j.Issuer.Audiences, "other")
			if coin(70) {
				j.Issuer.AudienceMatchPolicy = "MatchAny"
			}
		}
		if coin(15) {
			j.Issuer.DiscoveryURL = ptr.To(pick([]string{"https://dex.idp.svc/.well-known/openid-configuration", j.Issuer.URL}))
		}
		if coin(20) {
			j.Issuer.CertificateAuthorityRef = &v1alpha1.CertificateAuthorityRef{ConfigMapName: "issuer-ca", Key: "ca.crt"}
		}
		if coin(10) {
			j.Issuer.EgressSelectorType = pick([]string{"controlplane", "cluster"})
		}
		if coin(60) {
			j.ClaimMappings.Username = v1alpha1.PrefixedClaimOrExpression{Claim: pick([]string{"sub", "email"})}
			if coin(85) {
				j.ClaimMappings.Username.Prefix = ptr.To(pick([]string{"", "oidc:"}))
			}
		} else {
			j.ClaimMappings.Username = v1alpha1.PrefixedClaimOrExpression{Expression: pick(usernames)}
		}
		if coin(40) {
			j.ClaimMappings.Groups = v1alpha1.PrefixedClaimOrExpression{Claim: "groups"}
			if coin(85) {
				j.ClaimMappings.Groups.Prefix = ptr.To("oidc:")
			}
		}
		if coin(20) {
			j.ClaimMappings.UID = v1alpha1.ClaimOrExpression{Claim: "sub"}
		}
		if coin(25) {
			j.ClaimMappings.Extra = []v1alpha1.ExtraMapping{{Key: pick([]string{"example.com/tier", "Example.com/Tier", "tier"}), ValueExpression: pick(values)}}
		}
		if coin(40) {
			rule := v1alpha1.ClaimValidationRule{Expression: pick(claimRules), Message: "refused by a rule"}
			if coin(20) {
				rule = v1alpha1.ClaimValidationRule{Claim: "hd", RequiredValue: "example.com"}
			}
			j.ClaimValidationRules = append(j.ClaimValidationRules, rule)
		}
		if coin(30) {
			j.UserValidationRules = append(j.UserValidationRules, v1alpha1.UserValidationRule{Expression: pick(userRules)})
		}
		s.Authentication.JWT = append(s.Authentication.JWT, j)
	}
	if coin(20) {
		s.Authentication.AnonymousPaths = []string{pick([]string{"/openid/v1/jwks", "/.well-known/openid-configuration", "/version"})}
		s.Authentication.Anonymous = ptr.To(coin(20))
	}
}

// authorizers gives s an authorization chain drawn from right and wrong
// values: types in any order (AlwaysAllow and a chain without RBAC,
// refused by the operator's policy), names taken twice or not DNS labels,
// webhooks with matchConditions that do not compile or are not booleans,
// timeouts and TTLs out of upstream's ranges, a webhook without its
// settings or settings without a webhook (refused by the CRD).
func (g *generator) authorizers(r *rand.Rand, s *v1alpha1.ApiServerConfigSpec) {
	coin := func(p int) bool { return r.IntN(100) < p }
	pick := func(vs []string) string { return vs[r.IntN(len(vs))] }
	names := []string{"node", "rbac", "payments", "audit", "payments", "Bad_Name"}
	matches := []string{"request.resourceAttributes.namespace == 'payments'", "'auditors' in request.groups",
		"has(request.nonResourceAttributes)", "request.user", "request.resourceAttributes.namespace ==", "object.spec"}
	wait := func() *metav1.Duration {
		return &metav1.Duration{Duration: []time.Duration{0, time.Millisecond, 3 * time.Second, 30 * time.Second, time.Minute}[r.IntN(5)]}
	}
	for range 1 + r.IntN(4) {
		a := v1alpha1.Authorizer{Type: v1alpha1.AuthorizerType(pick([]string{"Node", "RBAC", "Webhook", "Webhook", "AlwaysDeny", "AlwaysAllow"})), Name: pick(names)}
		if a.Type == "Webhook" || coin(5) {
			w := &v1alpha1.AuthorizerWebhook{KubeconfigSecretName: "authz-" + a.Name, FailurePolicy: pick([]string{"", "Deny", "NoOpinion"})}
			if coin(30) {
				w.Timeout = wait()
			}
			if coin(20) {
				w.AuthorizedTTL = wait()
			}
			if coin(20) {
				w.UnauthorizedTTL = wait()
			}
			if coin(20) {
				w.CacheUnauthorizedRequests = ptr.To(coin(50))
			}
			for range r.IntN(3) {
				w.MatchConditions = append(w.MatchConditions, v1alpha1.AuthorizerMatchCondition{Expression: pick(matches)})
			}
			if a.Type == "Webhook" || coin(50) {
				a.Webhook = w
			}
		}
		s.Authorization.Authorizers = append(s.Authorization.Authorizers, a)
	}
	if coin(5) {
		s.Authorization.Modes = []v1alpha1.AuthorizationMode{"RBAC"}
	}
}

// fuzzSeed is ADMISSION_FUZZ_SEED, 1 when it is unset: which n specs the
// random tests draw (CI sets it from the commit). It logs both, so that a
// failing run can be drawn again.
func fuzzSeed(t *testing.T, n int) uint64 {
	t.Helper()
	seed := uint64(1)
	if v := os.Getenv("ADMISSION_FUZZ_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("ADMISSION_FUZZ_SEED=%q: %v", v, err)
		}
	}
	t.Logf("%d specs from seed %d (ADMISSION_FUZZ_SEED)", n, seed)
	return seed
}
