package admincredentials

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
	"github.com/apiserver-operator/apiserver-operator/controllers/controllertest"
)

// printedRequest is the row `kubectl get acr -o wide` prints for acr.
func printedRequest(t *testing.T, acr *v1alpha1.AdminCredentialRequest) map[string]string {
	t.Helper()
	return env.PrintedRow(t, "admincredentialrequests", acr)
}

// TestAdminCredentialRequest_AnsweredOnceAndEndedAtExpiry: a request waits
// for its tenant, then is answered once with a kubeconfig whose client
// certificate names the user and groups asked for, is signed by the
// tenant's CA and expires when asked; the request's spec cannot change
// after that. At expiry the Secret goes and the request says so. A Secret
// of the name the credential would take, that is not the request's, is
// neither overwritten nor handed out.
func TestAdminCredentialRequest_AnsweredOnceAndEndedAtExpiry(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	acr := controllertest.CredentialRequest(ns, "alice-oncall", "creds", "alice", 600, "platform:admins", "oncall")
	if err := env.Client.Create(ctx, acr); err != nil {
		t.Fatal(err)
	}
	controllertest.Eventually(t, 20*time.Second, "a request for a tenant that does not exist waits", func() error {
		got := controllertest.Get(t, env.Client, &v1alpha1.AdminCredentialRequest{ObjectMeta: acr.ObjectMeta})
		if c := controllertest.RequestReady(got); c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonTenantNotFound || !strings.Contains(c.Message, "no ApiServerConfig creds") {
			return fmt.Errorf("Ready is %v", c)
		}
		return nil
	})

	cfg := env.Tenant(ns, "creds", func(s *v1alpha1.ApiServerConfigSpec) {
		s.AdminCredentials.KubeconfigSecret = v1alpha1.AdminKubeconfigSecretDisabled
	})
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	var got *v1alpha1.AdminCredentialRequest
	controllertest.Eventually(t, 30*time.Second, "the request is answered once the tenant serves", func() error {
		got = controllertest.Get(t, env.Client, &v1alpha1.AdminCredentialRequest{ObjectMeta: acr.ObjectMeta})
		if c := controllertest.RequestReady(got); c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonCredentialIssued {
			return fmt.Errorf("Ready is %v", c)
		}
		return nil
	})
	created := got.CreationTimestamp.Time
	if got.Status.SecretName != "alice-oncall-credential" || got.Status.ExpirationTimestamp == nil || got.Status.SerialNumber == "" {
		t.Fatalf("status is %+v", got.Status)
	}
	if exp := got.Status.ExpirationTimestamp.Time; exp.Before(created.Add(600*time.Second-time.Second)) || exp.After(time.Now().Add(600*time.Second+time.Second)) {
		t.Errorf("the credential expires at %s, not 600 s after the request (created %s)", exp, created)
	}

	// The kubeconfig: the tenant's endpoint, its CA bundle, and a client
	// certificate of the tenant's CA for alice in her groups that ends
	// when status says.
	tenantNow := controllertest.Get(t, env.Client, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
	secret := controllertest.Get(t, env.Client, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: got.Status.SecretName}})
	if !metav1.IsControlledBy(secret, got) {
		t.Errorf("the credential's Secret is owned by %v, not the request", secret.OwnerReferences)
	}
	kc, err := clientcmd.Load(secret.Data[apiserver.KubeconfigKey])
	if err != nil {
		t.Fatal(err)
	}
	current := kc.Contexts[kc.CurrentContext]
	if current == nil || kc.Clusters[current.Cluster] == nil || kc.AuthInfos[current.AuthInfo] == nil {
		t.Fatalf("the kubeconfig has no usable current context: %+v", kc)
	}
	if server := kc.Clusters[current.Cluster].Server; server != tenantNow.Status.Endpoint || server == "" {
		t.Errorf("the kubeconfig's server is %q, the tenant's endpoint %q", server, tenantNow.Status.Endpoint)
	}
	kp, err := pki.ParseKeyPair(kc.AuthInfos[current.AuthInfo].ClientCertificateData, kc.AuthInfos[current.AuthInfo].ClientKeyData)
	if err != nil {
		t.Fatal(err)
	}
	cert := kp.Cert()
	// A certificate keeps its Organizations as a set (DER sorts them).
	if cert.Subject.CommonName != "alice" || !slices.Equal(slices.Sorted(slices.Values(cert.Subject.Organization)), []string{"oncall", "platform:admins"}) {
		t.Errorf("the certificate is for %q in %v", cert.Subject.CommonName, cert.Subject.Organization)
	}
	if !cert.NotAfter.Equal(got.Status.ExpirationTimestamp.Time) || cert.SerialNumber.Text(16) != got.Status.SerialNumber {
		t.Errorf("the certificate ends at %s with serial %s; status says %s and %s", cert.NotAfter, cert.SerialNumber.Text(16), got.Status.ExpirationTimestamp, got.Status.SerialNumber)
	}
	caSecret := controllertest.Get(t, env.Client, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.CASecretName("creds")}})
	roots := x509.NewCertPool()
	cas, err := certutil.ParseCertsPEM(caSecret.Data[apiserver.CABundleKey])
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cas {
		roots.AddCert(c)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the tenant's CA bundle does not verify the credential as a client: %v", err)
	}
	if !bytes.Equal(kc.Clusters[current.Cluster].CertificateAuthorityData, caSecret.Data[apiserver.CABundleKey]) {
		t.Error("the kubeconfig does not trust the tenant's CA bundle")
	}

	// kubectl get acr -o wide.
	row := printedRequest(t, got)
	for col, want := range map[string]string{"Tenant": "creds", "User": "alice", "Ready": "True", "Reason": "Issued",
		"Expires": got.Status.ExpirationTimestamp.UTC().Format(time.RFC3339), "Secret": "alice-oncall-credential"} {
		if row[col] != want {
			t.Errorf("column %s prints %q, want %q (row %v)", col, row[col], want, row)
		}
	}
	controllertest.Eventually(t, 20*time.Second, "an event on the tenant says who got what", func() error {
		events := &eventsv1.EventList{}
		if err := env.Client.List(ctx, events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == "AdminCredentialIssued" && e.Regarding.Name == "creds" && strings.Contains(e.Note, "user alice with groups platform:admins, oncall") &&
				strings.Contains(e.Note, "serial "+got.Status.SerialNumber) && strings.Contains(e.Note, "AdminCredentialRequest alice-oncall") {
				return nil
			}
		}
		return fmt.Errorf("no AdminCredentialIssued event among %d", len(events.Items))
	})

	// Answered once: the spec cannot be changed to another identity.
	changed := got.DeepCopy()
	changed.Spec.Groups = []string{"system:masters"}
	if err := env.Client.Update(ctx, changed); err == nil || !strings.Contains(err.Error(), "spec is immutable") {
		t.Errorf("changing an answered request's groups: %v", err)
	}

	// At expiry (a reconciler whose clock is past it), the Secret goes.
	expired := &Reconciler{Ownership: env.Ownership, Client: env.Client, APIReader: env.Client, Scheme: env.Scheme,
		Clock: clocktesting.NewFakePassiveClock(got.Status.ExpirationTimestamp.Add(time.Second))}
	if _, err := expired.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(got)}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(secret), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Secret of an expired credential is still there: %v", err)
	}
	got = controllertest.Get(t, env.Client, &v1alpha1.AdminCredentialRequest{ObjectMeta: acr.ObjectMeta})
	if c := controllertest.RequestReady(got); c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonCredentialExpired || got.Status.SecretName != "" || got.Status.ExpirationTimestamp == nil {
		t.Errorf("after expiry, Ready is %v and status %+v", c, got.Status)
	}
	if row := printedRequest(t, got); row["Ready"] != "False" || row["Reason"] != "Expired" || row["Secret"] != "" {
		t.Errorf("after expiry the row is %v", row)
	}

	// A Secret of the name the credential would take that is not the
	// request's stays as it is, and nothing is issued.
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bob-credential"}, Data: map[string][]byte{"value": []byte("not yours")}}
	if err := env.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	bob := controllertest.CredentialRequest(ns, "bob", "creds", "bob", 600)
	if err := env.Client.Create(ctx, bob); err != nil {
		t.Fatal(err)
	}
	controllertest.Eventually(t, 20*time.Second, "a request whose Secret name is taken says so", func() error {
		got := controllertest.Get(t, env.Client, &v1alpha1.AdminCredentialRequest{ObjectMeta: bob.ObjectMeta})
		if c := controllertest.RequestReady(got); c == nil || c.Reason != v1alpha1.ReasonSecretNameTaken || got.Status.ExpirationTimestamp != nil {
			return fmt.Errorf("Ready is %v, status %+v", c, got.Status)
		}
		return nil
	})
	if s := controllertest.Get(t, env.Client, foreign); string(s.Data["value"]) != "not yours" || len(s.OwnerReferences) != 0 {
		t.Errorf("the foreign Secret was changed: %v, owners %v", s.Data, s.OwnerReferences)
	}

	// A credential planted with the request's owner reference (its uid is
	// readable) while the request waits is never handed out as its answer.
	carol := controllertest.CredentialRequest(ns, "carol", "not-yet", "carol", 600)
	if err := env.Client.Create(ctx, carol); err != nil {
		t.Fatal(err)
	}
	controllertest.Eventually(t, 20*time.Second, "the request waits for its tenant", func() error {
		if c := controllertest.RequestReady(controllertest.Get(t, env.Client, &v1alpha1.AdminCredentialRequest{ObjectMeta: carol.ObjectMeta})); c == nil || c.Reason != v1alpha1.ReasonTenantNotFound {
			return fmt.Errorf("Ready is %v", c)
		}
		return nil
	})
	carol = controllertest.Get(t, env.Client, carol)
	theirs, err := pki.NewSelfSignedCA("theirs", v1alpha1.KeyAlgorithm("ECDSAP256"), time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, _, err := pki.Credential(theirs, "not-yet", "https://attacker.example.com", theirs.CertPEM(), "carol", nil, v1alpha1.KeyAlgorithm("ECDSAP256"), time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	planted := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: AdminCredentialSecretName(carol.Name),
			Labels: map[string]string{"app.kubernetes.io/managed-by": apiserver.FieldOwner, AdminCredentialRequestLabel: carol.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "AdminCredentialRequest",
				Name: carol.Name, UID: carol.UID, Controller: ptr.To(true)}}},
		Data: map[string][]byte{apiserver.KubeconfigKey: kubeconfig},
	}
	if err := env.Client.Create(ctx, planted); err != nil {
		t.Fatal(err)
	}
	controllertest.Eventually(t, 20*time.Second, "the request says the planted Secret is not its own", func() error {
		got := controllertest.Get(t, env.Client, &v1alpha1.AdminCredentialRequest{ObjectMeta: carol.ObjectMeta})
		if c := controllertest.RequestReady(got); c == nil || c.Reason != v1alpha1.ReasonSecretNameTaken || got.Status.ExpirationTimestamp != nil || got.Status.SecretName != "" {
			return fmt.Errorf("Ready is %v, status %+v", c, got.Status)
		}
		return nil
	})
}

// A namespace that asks for many credentials gets its burst, then one at
// the rate; another namespace's budget is its own, and a bucket that
// refilled goes from memory.
func TestNamespaceBudgets_ANamespaceFloodDelaysNoOther(t *testing.T) {
	var b namespaceBudgets
	r := CredentialRate{PerMinute: 60, Burst: 2}
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	for i := range 2 {
		if ok, _ := b.take("flood", r, now); !ok {
			t.Fatalf("credential %d of the burst refused", i+1)
		}
	}
	if ok, wait := b.take("flood", r, now); ok || wait != time.Second {
		t.Fatalf("past the burst: ok %v, wait %s; want a refusal for 1s", ok, wait)
	}
	if ok, _ := b.take("neighbour", r, now); !ok {
		t.Fatal("another namespace is refused while one floods")
	}
	if ok, _ := b.take("flood", r, now.Add(time.Second)); !ok {
		t.Fatal("a second later the flooding namespace gets none")
	}
	for i := range 1100 {
		b.take(fmt.Sprintf("ns-%d", i), r, now)
	}
	b.take("last", r, now.Add(time.Hour))
	if n := len(b.buckets); n > 2 {
		t.Fatalf("%d buckets kept an hour later, want those not full only", n)
	}
}
