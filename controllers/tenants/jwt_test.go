package tenants

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
)

// TestApiServerConfigReconciler_JWTIssuersAreReloadedWithoutARoll: the CAs
// spec.authentication.jwt names are references like any other (missing:
// ReferenceMissing; not PEM: ReferenceInvalid, stalled at once, since
// kube-apiserver would refuse the file). Once they are there the
// authentication configuration carries every issuer with its CA; adding an
// issuer or renewing a CA rewrites the file and leaves the pod template
// alone, for kube-apiserver's reload to take up, while a change of the
// anonymous paths, which kube-apiserver reads only at start, rolls the
// pods.
func TestApiServerConfigReconciler_JWTIssuersAreReloadedWithoutARoll(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	issuer := func(url string, ref *v1alpha1.CertificateAuthorityRef) v1alpha1.JWTAuthenticator {
		return v1alpha1.JWTAuthenticator{
			Issuer:        v1alpha1.JWTIssuer{URL: url, Audiences: []string{"tenant"}, CertificateAuthorityRef: ref},
			ClaimMappings: v1alpha1.ClaimMappings{Username: v1alpha1.PrefixedClaimOrExpression{Claim: "sub", Prefix: ptr.To(url + "#")}},
		}
	}
	cfg := tenant(ns, "jwt", func(s *v1alpha1.ApiServerConfigSpec) {
		s.Authentication.JWT = []v1alpha1.JWTAuthenticator{
			issuer("https://a.example.com", &v1alpha1.CertificateAuthorityRef{SecretName: "a-ca", Key: "ca.crt"}),
			issuer("https://b.example.com", &v1alpha1.CertificateAuthorityRef{ConfigMapName: "b-ca", Key: "bundle.pem"}),
		}
	})
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	held := func(reason, says string, stalled bool) {
		t.Helper()
		eventually(t, 30*time.Second, "the tenant is held: "+says, func() error {
			got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
			c := conditionOf(got, v1alpha1.ConditionDegraded)
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason || !strings.Contains(c.Message, says) {
				return fmt.Errorf("Degraded is %v", c)
			}
			if s := conditionOf(got, v1alpha1.ConditionStalled); stalled && (s == nil || s.Status != metav1.ConditionTrue || s.Reason != reason) {
				return fmt.Errorf("Stalled is %v", s)
			}
			return nil
		})
	}
	held(v1alpha1.ReasonReferenceMissing, "Secret "+ns+"/a-ca named by spec.authentication.jwt[0].issuer.certificateAuthorityRef does not exist", false)

	pem := func(name string) string {
		ca, err := pki.NewSelfSignedCA(name, pki.KeyAlgorithmECDSAP256, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return string(ca.CertPEM())
	}
	bCA := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "b-ca"}, Data: map[string]string{"bundle.pem": pem("b-1")}}
	if err := env.Client.Create(ctx, bCA); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a-ca"}, Data: map[string][]byte{"ca.crt": []byte("not a certificate")}}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	// Every object is there; the Secret's key is not a CA.
	held(v1alpha1.ReasonReferenceInvalid, "Secret "+ns+"/a-ca named by spec.authentication.jwt[0].issuer.certificateAuthorityRef: key ca.crt: holds no PEM certificate", true)

	aCA := pem("a-1")
	secret.Data["ca.crt"] = []byte(aCA)
	if err := env.Client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	d := waitForDeployment(t, cfg)
	config := func() apiserverv1.AuthenticationConfiguration {
		t.Helper()
		cm := get(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.ConfigMapName(cfg.Name)}})
		var out apiserverv1.AuthenticationConfiguration
		if err := yaml.UnmarshalStrict([]byte(cm.Data[apiserver.AuthenticationConfigKey]), &out); err != nil {
			t.Fatalf("the authentication configuration: %v", err)
		}
		return out
	}
	issuers := func(a apiserverv1.AuthenticationConfiguration) string {
		var out []string
		for _, j := range a.JWT {
			out = append(out, j.Issuer.URL+"="+strings.TrimSpace(j.Issuer.CertificateAuthority))
		}
		return strings.Join(out, " ")
	}
	want := "https://a.example.com=" + strings.TrimSpace(aCA) + " https://b.example.com=" + strings.TrimSpace(bCA.Data["bundle.pem"])
	if got := issuers(config()); got != want {
		t.Fatalf("issuers and CAs in the file:\n%s\nwant\n%s", got, want)
	}

	hash := func() string {
		return get(t, &appsv1.Deployment{ObjectMeta: d.ObjectMeta}).Spec.Template.Annotations[apiserver.ConfigHashAnnotation]
	}
	before := hash()
	// converged waits for a pass that has taken up the spec's generation
	// and the file that says what, so that the hash read after it is the
	// one of the change.
	converged := func(what string, done func(apiserverv1.AuthenticationConfiguration) bool) {
		t.Helper()
		eventually(t, 30*time.Second, what, func() error {
			got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
			if got.Status.ObservedGeneration != got.Generation {
				return fmt.Errorf("status describes generation %d of %d", got.Status.ObservedGeneration, got.Generation)
			}
			if a := config(); !done(a) {
				return fmt.Errorf("the file has %s", issuers(a))
			}
			return nil
		})
	}

	// A third issuer, publicly trusted: the file gains it, the pods stay.
	updateTenant(t, cfg, func(s *v1alpha1.ApiServerConfigSpec) {
		s.Authentication.JWT = append(s.Authentication.JWT, issuer("https://c.example.com", nil))
	})
	converged("the file lists the third issuer", func(a apiserverv1.AuthenticationConfiguration) bool {
		return len(a.JWT) == 3 && a.JWT[2].Issuer.URL == "https://c.example.com" && a.JWT[2].Issuer.CertificateAuthority == ""
	})
	if got := hash(); got != before {
		t.Errorf("adding an issuer rolls the pods (config hash %s, was %s): kube-apiserver reloads it", got, before)
	}

	// A renewed CA: the file carries the new one, the pods stay.
	renewed := pem("b-2")
	bCA.Data["bundle.pem"] = renewed
	if err := env.Client.Update(ctx, bCA); err != nil {
		t.Fatal(err)
	}
	converged("the file carries b's renewed CA", func(a apiserverv1.AuthenticationConfiguration) bool {
		return len(a.JWT) == 3 && a.JWT[1].Issuer.CertificateAuthority == renewed
	})
	if got := hash(); got != before {
		t.Errorf("a renewed issuer CA rolls the pods (config hash %s, was %s): kube-apiserver reloads it", got, before)
	}

	// Anonymous paths are read only at start: the pods roll.
	updateTenant(t, cfg, func(s *v1alpha1.ApiServerConfigSpec) {
		s.Authentication.AnonymousPaths = []string{"/openid/v1/jwks"}
	})
	eventually(t, 30*time.Second, "a new anonymous path rolls the pods", func() error {
		if hash() == before {
			return fmt.Errorf("the pod template's %s is still %s", apiserver.ConfigHashAnnotation, before)
		}
		return nil
	})
	var paths []string
	for _, c := range config().Anonymous.Conditions {
		paths = append(paths, c.Path)
	}
	if got := strings.Join(paths, " "); got != "/healthz /livez /readyz /openid/v1/jwks" {
		t.Errorf("anonymous paths in the file: %s", got)
	}
}
