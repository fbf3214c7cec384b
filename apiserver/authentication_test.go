package apiserver

import (
	"bytes"
	"strings"
	"testing"
	"time"

	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
)

// withJWT is the minimal sample with an OIDC issuer whose CA is in a
// ConfigMap, and two JWT issuers, the second with its CA in a Secret.
func withJWT(t *testing.T) *v1alpha1.ApiServerConfig {
	t.Helper()
	cfg := sample(t, "minimal")
	cfg.Spec.Authentication.OIDC = &v1alpha1.OIDCSpec{IssuerURL: "https://legacy.example.com", ClientID: "kube", UsernameClaim: "sub", CAConfigMapName: "legacy-ca"}
	cfg.Spec.Authentication.JWT = []v1alpha1.JWTAuthenticator{{
		Issuer:        v1alpha1.JWTIssuer{URL: "https://a.example.com", Audiences: []string{"tenant"}},
		ClaimMappings: v1alpha1.ClaimMappings{Username: v1alpha1.PrefixedClaimOrExpression{Claim: "sub", Prefix: ptr.To("")}},
	}, {
		Issuer: v1alpha1.JWTIssuer{URL: "https://b.example.com", Audiences: []string{"tenant", "other"}, AudienceMatchPolicy: "MatchAny",
			CertificateAuthorityRef: &v1alpha1.CertificateAuthorityRef{SecretName: "b-ca", Key: "bundle.pem"}},
		ClaimValidationRules: []v1alpha1.ClaimValidationRule{{Expression: `claims.tier == "gold"`, Message: "gold only"}},
		ClaimMappings: v1alpha1.ClaimMappings{
			Username: v1alpha1.PrefixedClaimOrExpression{Expression: `'b:' + claims.sub`},
			Extra:    []v1alpha1.ExtraMapping{{Key: "example.com/tier", ValueExpression: "claims.tier"}},
		},
		UserValidationRules: []v1alpha1.UserValidationRule{{Expression: `!user.username.startsWith('system:')`}},
	}}
	return cfg
}

// TestAuthenticationConfig_RendersOIDCThenEachJWTIssuerWithItsCA: the
// file lists spec.authentication.oidc first, then jwt in order, field for
// field, each with the CA read from the object its reference names.
func TestAuthenticationConfig_RendersOIDCThenEachJWTIssuerWithItsCA(t *testing.T) {
	c := complete(t, withJWT(t), Inputs{})
	refs := IssuerCARefs(&c.Spec)
	if len(refs) != 2 || refs[0].Key() != "ConfigMap/legacy-ca/ca.crt" || refs[1].Key() != "Secret/b-ca/bundle.pem" || !refs[1].PEM {
		t.Fatalf("issuer CA references: %+v", refs)
	}
	out, err := AuthenticationConfig(c, map[string][]byte{refs[0].Key(): []byte("LEGACY CA"), refs[1].Key(): []byte("B CA")})
	if err != nil {
		t.Fatal(err)
	}
	var cfg apiserverv1.AuthenticationConfiguration
	if err := yaml.UnmarshalStrict(out, &cfg); err != nil {
		t.Fatalf("the file is not an AuthenticationConfiguration: %v\n%s", err, out)
	}
	if len(cfg.JWT) != 3 {
		t.Fatalf("%d authenticators, want oidc's and jwt's two:\n%s", len(cfg.JWT), out)
	}
	legacy, a, b := cfg.JWT[0], cfg.JWT[1], cfg.JWT[2]
	if legacy.Issuer.URL != "https://legacy.example.com" || legacy.Issuer.CertificateAuthority != "LEGACY CA" {
		t.Errorf("oidc's authenticator: %+v", legacy.Issuer)
	}
	if a.Issuer.URL != "https://a.example.com" || a.Issuer.CertificateAuthority != "" || ptr.Deref(a.ClaimMappings.Username.Prefix, "unset") != "" {
		t.Errorf("jwt[0]: %+v", a)
	}
	if b.Issuer.CertificateAuthority != "B CA" || b.Issuer.AudienceMatchPolicy != "MatchAny" || len(b.Issuer.Audiences) != 2 ||
		b.ClaimValidationRules[0].Expression != `claims.tier == "gold"` || b.ClaimValidationRules[0].Message != "gold only" ||
		b.ClaimMappings.Username.Expression != `'b:' + claims.sub` || b.ClaimMappings.Extra[0].Key != "example.com/tier" ||
		b.UserValidationRules[0].Expression != `!user.username.startsWith('system:')` {
		t.Errorf("jwt[1]: %+v", b)
	}
}

// TestConfigHash_ReloadsJWTButRollsForWhatKubeAPIServerReadsAtStart: a
// change of spec.authentication.jwt, or of an issuer's CA, leaves the pod
// template's hash alone (kube-apiserver reloads them); a change of
// anonymous access or of oidc rolls the pods, since upstream refuses to
// reload anonymous settings and oidc always rolled.
func TestConfigHash_ReloadsJWTButRollsForWhatKubeAPIServerReadsAtStart(t *testing.T) {
	hash := func(cfg *v1alpha1.ApiServerConfig, cas map[string][]byte) string {
		t.Helper()
		c := complete(t, cfg, Inputs{})
		args, err := Args(c)
		if err != nil {
			t.Fatal(err)
		}
		authn, err := AuthenticationConfig(c, cas)
		if err != nil {
			t.Fatal(err)
		}
		return ConfigHash(c, args, map[string][]byte{AuthenticationConfigFile: authn})
	}
	cas := map[string][]byte{"ConfigMap/legacy-ca/ca.crt": []byte("LEGACY CA"), "Secret/b-ca/bundle.pem": []byte("B CA")}
	base := hash(withJWT(t), cas)

	reloaded := map[string]func(*v1alpha1.ApiServerConfig, map[string][]byte){
		"an issuer added": func(cfg *v1alpha1.ApiServerConfig, _ map[string][]byte) {
			cfg.Spec.Authentication.JWT = append(cfg.Spec.Authentication.JWT, cfg.Spec.Authentication.JWT[0])
			cfg.Spec.Authentication.JWT[2].Issuer.URL = "https://c.example.com"
		},
		"an issuer removed": func(cfg *v1alpha1.ApiServerConfig, _ map[string][]byte) {
			cfg.Spec.Authentication.JWT = cfg.Spec.Authentication.JWT[1:]
		},
		"a rule changed": func(cfg *v1alpha1.ApiServerConfig, _ map[string][]byte) {
			cfg.Spec.Authentication.JWT[1].ClaimValidationRules[0].Expression = `claims.tier != "lead"`
		},
		"a jwt issuer's CA renewed": func(_ *v1alpha1.ApiServerConfig, cas map[string][]byte) {
			cas["Secret/b-ca/bundle.pem"] = []byte("B CA 2")
		},
	}
	for name, change := range reloaded {
		cfg, changed := withJWT(t), map[string][]byte{}
		for k, v := range cas {
			changed[k] = v
		}
		change(cfg, changed)
		if got := hash(cfg, changed); got != base {
			t.Errorf("%s: the pods would roll, where kube-apiserver reloads it", name)
		}
	}

	rolls := map[string]func(*v1alpha1.ApiServerConfig, map[string][]byte){
		"an anonymous path added": func(cfg *v1alpha1.ApiServerConfig, _ map[string][]byte) {
			cfg.Spec.Authentication.AnonymousPaths = []string{"/openid/v1/jwks"}
		},
		"anonymous access everywhere": func(cfg *v1alpha1.ApiServerConfig, _ map[string][]byte) {
			cfg.Spec.Authentication.Anonymous = ptr.To(true)
		},
		"oidc's client changed": func(cfg *v1alpha1.ApiServerConfig, _ map[string][]byte) {
			cfg.Spec.Authentication.OIDC.ClientID = "kube2"
		},
		"oidc's CA renewed": func(_ *v1alpha1.ApiServerConfig, cas map[string][]byte) {
			cas["ConfigMap/legacy-ca/ca.crt"] = []byte("LEGACY CA 2")
		},
	}
	for name, change := range rolls {
		cfg, changed := withJWT(t), map[string][]byte{}
		for k, v := range cas {
			changed[k] = v
		}
		change(cfg, changed)
		if got := hash(cfg, changed); got == base {
			t.Errorf("%s: the pods would not roll, and kube-apiserver reads it only at start", name)
		}
	}

	// The first issuer added without oidc, or the last removed, reloads
	// too: kube-apiserver takes JWT authenticators by reload even when it
	// started with none.
	noIssuer, oneIssuer := withJWT(t), withJWT(t)
	noIssuer.Spec.Authentication.OIDC, oneIssuer.Spec.Authentication.OIDC = nil, nil
	noIssuer.Spec.Authentication.JWT = nil
	oneIssuer.Spec.Authentication.JWT = oneIssuer.Spec.Authentication.JWT[:1]
	if hash(noIssuer, cas) != hash(oneIssuer, cas) {
		t.Error("the first JWT issuer of a spec without oidc rolls the pods")
	}

	// Without jwt the whole file counts, as before jwt existed: a spec
	// that does not use it hashes as in the previous release.
	plain := withJWT(t)
	plain.Spec.Authentication.JWT = nil
	c := complete(t, plain, Inputs{})
	authn, err := AuthenticationConfig(c, cas)
	if err != nil {
		t.Fatal(err)
	}
	if got := authenticationStartPart(c, authn); !bytes.Equal(got, authn) {
		t.Errorf("without jwt the start part is not the whole file:\n%s\nwant\n%s", got, authn)
	}
	// With jwt, the start part is byte for byte the file of the same
	// spec without jwt.
	withC := complete(t, withJWT(t), Inputs{})
	full, err := AuthenticationConfig(withC, cas)
	if err != nil {
		t.Fatal(err)
	}
	if got := authenticationStartPart(withC, full); !bytes.Equal(got, authn) {
		t.Errorf("the start part of the file with jwt:\n%s\nwant the file without jwt:\n%s", got, authn)
	}
	if !strings.Contains(string(full), "https://b.example.com") {
		t.Errorf("the file lacks jwt's issuers:\n%s", full)
	}
}

// TestValidate_JWTIssuerThroughTheTunnelNeedsKonnectivity: an issuer to
// be called through the konnectivity tunnel needs one; upstream would
// call it directly without a word.
func TestValidate_JWTIssuerThroughTheTunnelNeedsKonnectivity(t *testing.T) {
	cfg := withJWT(t)
	cfg.Spec.Authentication.JWT[1].Issuer.EgressSelectorType = "cluster"
	errs, _ := Validate(cfg)
	if len(errs) != 1 || errs[0].Field != "spec.authentication.jwt[1].issuer.egressSelectorType" || !strings.Contains(errs[0].Detail, "set spec.konnectivity") {
		t.Fatalf("errors: %v", errs)
	}
	cfg.Spec.Konnectivity = &v1alpha1.KonnectivitySpec{}
	if errs, _ := Validate(cfg); len(errs) != 0 {
		t.Fatalf("with konnectivity: %v", errs)
	}
}

// TestNetworkPolicyWarnings_NameEveryIssuerNoRuleReaches: with an
// enforced policy, every issuer the apiservers call directly needs an
// egress rule for its port; one called through the tunnel does not.
func TestNetworkPolicyWarnings_NameEveryIssuerNoRuleReaches(t *testing.T) {
	cfg := withJWT(t)
	cfg.Spec.Authentication.JWT[0].Issuer.DiscoveryURL = ptr.To("https://dex.idp.svc:5556/.well-known/openid-configuration")
	cfg.Spec.Konnectivity = &v1alpha1.KonnectivitySpec{}
	cfg.Spec.Authentication.JWT[1].Issuer.EgressSelectorType = "cluster"
	cfg.Spec.NetworkPolicy = &v1alpha1.NetworkPolicySpec{Mode: v1alpha1.NetworkPolicyEnforced}
	_, warnings := Validate(cfg)
	var issuers []string
	for _, w := range warnings {
		if strings.Contains(w, "cannot fetch its keys") {
			issuers = append(issuers, w)
		}
	}
	if len(issuers) != 2 || !strings.Contains(issuers[0], "port 443, where the OIDC issuer https://legacy.example.com serves") ||
		!strings.Contains(issuers[1], "port 5556, where the issuer of spec.authentication.jwt[0] (https://dex.idp.svc:5556/") {
		t.Fatalf("warnings about issuers: %q", issuers)
	}
}

// An issuer's CA named in a Secret key that also holds a private key (a
// combined PEM, or the tenant's own CA Secret) brings its certificates
// into the configuration, which is in a ConfigMap the namespace's viewers
// read, and never the key.
func TestAuthenticationConfig_TakesOnlyTheCertificatesOfAnIssuersCA(t *testing.T) {
	ca, err := pki.NewSelfSignedCA("issuer", v1alpha1.KeyAlgorithm("ECDSAP256"), time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	c := complete(t, withJWT(t), Inputs{})
	refs := IssuerCARefs(&c.Spec)
	combined := append(append([]byte{}, key...), ca.CertPEM()...)
	out, err := AuthenticationConfig(c, map[string][]byte{refs[0].Key(): ca.CertPEM(), refs[1].Key(): combined})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out, []byte("PRIVATE KEY")) {
		t.Fatalf("the authentication configuration holds the private key:\n%s", out)
	}
	var cfg apiserverv1.AuthenticationConfiguration
	if err := yaml.UnmarshalStrict(out, &cfg); err != nil {
		t.Fatal(err)
	}
	for i, j := range []int{0, 2} {
		if got := cfg.JWT[j].Issuer.CertificateAuthority; got != string(ca.CertPEM()) {
			t.Errorf("issuer %d: its CA is %q, want the certificate alone", i, got)
		}
	}
}
