package webhooks

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestCertificates_IssuesPublishesAndRenews(t *testing.T) {
	ctx := context.Background()
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "certs-"}}
	if err := env.Client.Create(ctx, namespace); err != nil {
		t.Fatal(err)
	}
	ns := namespace.Name
	// A configuration shaped like config/webhook's, that matches no object,
	// so that it cannot disturb the other tests.
	none := admissionregistrationv1.SideEffectClassNone
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "webhook-certs-" + ns},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "v.example.dev",
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             &none,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
				Namespace: ns, Name: "webhook-service", Path: ptr.To("/validate"),
			}},
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"never": "matches"}},
		}},
	}
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, cfg) })
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "webhook-certs-mutating-" + ns},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "m.example.dev",
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             &none,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
				Namespace: ns, Name: "webhook-service", Path: ptr.To("/mutate"),
			}},
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"never": "matches"}},
		}},
	}
	if err := env.Client.Create(ctx, mutating); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, mutating) })

	clock := clocktesting.NewFakePassiveClock(time.Now())
	w := &Certificates{Client: env.Client, Clock: clock, Namespace: ns, ServiceName: "webhook-service",
		SecretName: "webhook-cert", WebhookConfiguration: cfg.Name, MutatingWebhookConfiguration: mutating.Name, CertDir: t.TempDir()}
	renewAt, err := w.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check := func() (*x509.Certificate, []byte) {
		t.Helper()
		current := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cfg), current); err != nil {
			t.Fatal(err)
		}
		bundle := current.Webhooks[0].ClientConfig.CABundle
		m := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(mutating), m); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m.Webhooks[0].ClientConfig.CABundle, bundle) {
			t.Fatal("the mutating webhook configuration's caBundle is not the validating one's")
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(bundle) {
			t.Fatal("the webhook configuration has no caBundle")
		}
		certPEM, err := os.ReadFile(filepath.Join(w.CertDir, corev1.TLSCertKey))
		if err != nil {
			t.Fatalf("the webhook server's certificate file: %v", err)
		}
		certs, err := certutil.ParseCertsPEM(certPEM)
		if err != nil {
			t.Fatalf("the webhook server's certificate file: %v", err)
		}
		cert := certs[0]
		// What kube-apiserver does when it calls the webhook Service.
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "webhook-service." + ns + ".svc", CurrentTime: clock.Now()}); err != nil {
			t.Fatalf("the webhook certificate does not verify as the Service name: %v", err)
		}
		return cert, bundle
	}
	first, bundle := check()

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "webhook-cert"}}
	rv := read(t, secret).ResourceVersion
	if _, err := w.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if read(t, secret).ResourceVersion != rv {
		t.Fatal("a second pass rewrote current certificates")
	}

	clock.SetTime(renewAt.Add(time.Minute))
	if _, err := w.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	renewed, bundleAfter := check()
	if renewed.Equal(first) {
		t.Fatal("the certificate was not renewed past its renewal time")
	}
	if !bytes.Equal(bundleAfter, bundle) {
		t.Fatal("renewing the certificate changed the CA")
	}
}

// read reads obj again.
func read[T client.Object](t *testing.T, obj T) T {
	t.Helper()
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatalf("reading %T %s: %v", obj, obj.GetName(), err)
	}
	return obj
}

// The webhook's own process only reads the certificate the controllers
// issue: before it is issued it says so (and writes nothing, patches
// nothing), then it writes the very certificate of the Secret into its
// directory.
func TestCertificates_ReadOnlyWaitsForTheControllersCertificate(t *testing.T) {
	ctx := context.Background()
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "certs-ro-"}}
	if err := env.Client.Create(ctx, namespace); err != nil {
		t.Fatal(err)
	}
	ns := namespace.Name
	clock := clocktesting.NewFakePassiveClock(time.Now())
	dir := t.TempDir()
	reader := &Certificates{Client: env.Client, Clock: clock, Namespace: ns, ServiceName: "webhook-service",
		SecretName: "webhook-cert", WebhookConfiguration: "no-such-configuration", CertDir: dir, ReadOnly: true}
	if _, err := reader.Ensure(ctx); !errors.Is(err, ErrNotIssued) {
		t.Fatalf("before the controllers issued the certificate: %v, want ErrNotIssued", err)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "webhook-cert"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the read-only webhook wrote its Secret: %v", err)
	}
	// The controllers issue it (no files: they serve no webhook).
	issuer := &Certificates{Client: env.Client, Clock: clock, Namespace: ns, ServiceName: "webhook-service",
		SecretName: "webhook-cert", WebhookConfiguration: "no-such-configuration"}
	if _, err := issuer.Ensure(ctx); err == nil || !strings.Contains(err.Error(), "no-such-configuration") {
		t.Fatalf("the issuer with no webhook configuration: %v, want an error naming it", err)
	}
	secret := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "webhook-cert"}, secret); err != nil {
		t.Fatalf("the issuer wrote no Secret: %v", err)
	}
	next, err := reader.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next.Sub(clock.Now()) > time.Minute {
		t.Errorf("the reader reads the Secret again in %s: a renewal would wait that long", next.Sub(clock.Now()))
	}
	for _, name := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, secret.Data[name]) {
			t.Errorf("%s in the webhook's directory is not the Secret's (%v)", name, err)
		}
	}
}
