package webhooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
)

// Certificates keeps the admission webhook's serving certificate
// without cert-manager: a CA and a certificate for the webhook Service in a
// Secret of the operator's namespace (shared by every replica), the files
// in the webhook server's certificate directory, and the CA in the
// caBundle of the webhook configurations. The certificate is
// renewed at 80% of its validity; the webhook server reloads the files.
type Certificates struct {
	// Client must read without a cache: this runs before the manager's
	// caches start.
	Client client.Client
	Clock  clock.PassiveClock
	// Namespace, ServiceName and SecretName locate the webhook Service and
	// the Secret that holds the certificates.
	Namespace   string
	ServiceName string
	SecretName  string
	// WebhookConfiguration is the name of the ValidatingWebhookConfiguration,
	// MutatingWebhookConfiguration the name of the mutating one (none when
	// empty).
	WebhookConfiguration, MutatingWebhookConfiguration string
	// CertDir is the webhook server's certificate directory; empty writes
	// no file.
	CertDir string
	// ReadOnly only reads the Secret into CertDir: the webhook's own
	// ServiceAccount may read that Secret alone, and the controllers
	// (config/manager) issue the certificate and set the caBundle. A
	// webhook configuration is how a hijacked webhook would have every
	// Secret of the cluster sent to it, so the webhook may not patch one.
	ReadOnly bool
}

// ErrNotIssued: a ReadOnly Certificates found no certificate in the Secret
// yet.
var ErrNotIssued = errors.New("the webhook certificate is not issued yet: the controllers (config/manager) issue it")

const (
	webhookCAValidity   = 10 * 365 * 24 * time.Hour
	webhookCertValidity = 365 * 24 * time.Hour
	webhookCACertKey    = "ca.crt"
	webhookCAKeyKey     = "ca.key"
	// webhookCheckInterval is how often the certificates are checked.
	webhookCheckInterval = time.Hour
)

// Ensure makes the Secret, the files and the caBundle current, and returns
// when the certificate is due for renewal.
func (w *Certificates) Ensure(ctx context.Context) (time.Time, error) {
	now := w.Clock.Now()
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: w.Namespace, Name: w.SecretName}
	err := w.Client.Get(ctx, key, secret)
	if err != nil && !apierrors.IsNotFound(err) {
		return time.Time{}, fmt.Errorf("reading the webhook certificate Secret %s: %w", key, err)
	}
	exists := err == nil
	if w.ReadOnly {
		return w.read(secret, exists, now)
	}

	var ca, serving *pki.KeyPair
	if exists {
		ca, _ = pki.ParseKeyPair(secret.Data[webhookCACertKey], secret.Data[webhookCAKeyKey])
		serving, _ = pki.ParseKeyPair(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey])
	}
	dnsNames := []string{w.ServiceName + "." + w.Namespace + ".svc", w.ServiceName + "." + w.Namespace + ".svc.cluster.local"}
	changed := false
	if ca == nil || !now.Before(pki.RenewAt(ca.Cert(), pki.DefaultRenewalPercent)) {
		if ca, err = pki.NewSelfSignedCA("apiserver-operator-webhook-ca", pki.DefaultKeyAlgorithm, webhookCAValidity, now); err != nil {
			return time.Time{}, fmt.Errorf("generating the webhook CA: %w", err)
		}
		serving, changed = nil, true
	}
	cfg := pki.ServingCertConfig(dnsNames, nil)
	if serving == nil {
		changed = true
	} else if renew, _ := pki.NeedsRenewal(serving.Cert(), now, pki.DefaultRenewalPercent, cfg.Requirements(ca.Cert(), pki.DefaultKeyAlgorithm)); renew {
		changed = true
	}
	if changed {
		if serving, err = pki.NewSignedCert(ca, cfg, pki.DefaultKeyAlgorithm, webhookCertValidity, now); err != nil {
			return time.Time{}, fmt.Errorf("issuing the webhook serving certificate: %w", err)
		}
		caKey, err := ca.KeyPEM()
		if err != nil {
			return time.Time{}, err
		}
		servingKey, err := serving.KeyPEM()
		if err != nil {
			return time.Time{}, err
		}
		secret.Name, secret.Namespace, secret.Type = w.SecretName, w.Namespace, corev1.SecretTypeTLS
		secret.Data = map[string][]byte{
			webhookCACertKey: ca.CertPEM(), webhookCAKeyKey: caKey,
			corev1.TLSCertKey: serving.CertPEM(), corev1.TLSPrivateKeyKey: servingKey,
		}
		if exists {
			err = w.Client.Update(ctx, secret)
		} else {
			err = w.Client.Create(ctx, secret)
		}
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			// Another replica wrote first: use what it wrote.
			return w.Ensure(ctx)
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("writing the webhook certificate Secret %s: %w", key, err)
		}
	}

	if w.CertDir != "" {
		if err := w.writeFiles(secret); err != nil {
			return time.Time{}, err
		}
	}
	if err := w.patchCABundle(ctx, secret.Data[webhookCACertKey]); err != nil {
		return time.Time{}, err
	}
	return pki.RenewAt(serving.Cert(), pki.DefaultRenewalPercent), nil
}

// readOnlyRecheck is how often a ReadOnly Certificates reads the Secret
// again, for the certificate the controllers renewed.
const readOnlyRecheck = time.Minute

// read writes the certificate of secret into the files, and returns when
// to read it again.
func (w *Certificates) read(secret *corev1.Secret, exists bool, now time.Time) (time.Time, error) {
	if !exists {
		return time.Time{}, fmt.Errorf("%w: Secret %s/%s does not exist", ErrNotIssued, w.Namespace, w.SecretName)
	}
	if _, err := pki.ParseKeyPair(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey]); err != nil {
		return time.Time{}, fmt.Errorf("%w: Secret %s/%s holds no valid certificate and key: %w", ErrNotIssued, w.Namespace, w.SecretName, err)
	}
	if err := w.writeFiles(secret); err != nil {
		return time.Time{}, err
	}
	return now.Add(readOnlyRecheck), nil
}

// writeFiles writes tls.crt and tls.key for the webhook server, atomically,
// and only when they differ.
func (w *Certificates) writeFiles(secret *corev1.Secret) error {
	if err := os.MkdirAll(w.CertDir, 0o700); err != nil {
		return fmt.Errorf("creating the webhook certificate directory %s: %w", w.CertDir, err)
	}
	// Every file operation stays inside the directory, symbolic links
	// included.
	dir, err := os.OpenRoot(w.CertDir)
	if err != nil {
		return fmt.Errorf("opening the webhook certificate directory %s: %w", w.CertDir, err)
	}
	defer func() { _ = dir.Close() }()
	for _, name := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey} {
		path := filepath.Join(w.CertDir, name)
		if current, err := dir.ReadFile(name); err == nil && bytes.Equal(current, secret.Data[name]) {
			continue
		}
		tmp := name + ".tmp"
		if err := dir.WriteFile(tmp, secret.Data[name], 0o600); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		if err := dir.Rename(tmp, name); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return nil
}

// patchCABundle sets the CA in every webhook of the configurations.
func (w *Certificates) patchCABundle(ctx context.Context, ca []byte) error {
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := w.setCABundle(ctx, w.WebhookConfiguration, validating, ca, func() []*admissionregistrationv1.WebhookClientConfig {
		var out []*admissionregistrationv1.WebhookClientConfig
		for i := range validating.Webhooks {
			out = append(out, &validating.Webhooks[i].ClientConfig)
		}
		return out
	}); err != nil || w.MutatingWebhookConfiguration == "" {
		return err
	}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := w.Client.Get(ctx, client.ObjectKey{Name: w.MutatingWebhookConfiguration}, mutating); apierrors.IsNotFound(err) {
		// Not installed (manifests of an earlier release): nothing calls
		// the mutating webhook, and new tenants get no prefix of their own.
		ctrl.LoggerFrom(ctx).Info("No MutatingWebhookConfiguration to give the CA: install config/default of this release", "name", w.MutatingWebhookConfiguration)
		return nil
	}
	return w.setCABundle(ctx, w.MutatingWebhookConfiguration, mutating, ca, func() []*admissionregistrationv1.WebhookClientConfig {
		var out []*admissionregistrationv1.WebhookClientConfig
		for i := range mutating.Webhooks {
			out = append(out, &mutating.Webhooks[i].ClientConfig)
		}
		return out
	})
}

// setCABundle reads the webhook configuration name into cfg and patches
// ca into every client configuration clients returns.
func (w *Certificates) setCABundle(ctx context.Context, name string, cfg client.Object, ca []byte, clients func() []*admissionregistrationv1.WebhookClientConfig) error {
	kind := strings.TrimPrefix(fmt.Sprintf("%T", cfg), "*v1.")
	if err := w.Client.Get(ctx, client.ObjectKey{Name: name}, cfg); err != nil {
		return fmt.Errorf("reading %s %s (install config/default, or run with --webhooks=false): %w", kind, name, err)
	}
	patch := client.MergeFromWithOptions(cfg.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	changed := false
	for _, c := range clients() {
		if !bytes.Equal(c.CABundle, ca) {
			c.CABundle = ca
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if err := w.Client.Patch(ctx, cfg, patch); err != nil {
		return fmt.Errorf("setting the caBundle of %s %s: %w", kind, name, err)
	}
	return nil
}

// Start keeps the certificates current until ctx ends (a manager Runnable).
func (w *Certificates) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("webhook-certificates")
	for {
		renewAt, err := w.Ensure(ctx)
		wait := webhookCheckInterval
		if err != nil {
			log.Error(err, "Keeping the webhook certificate current failed; retrying")
			wait = time.Minute
			if w.ReadOnly {
				wait = 10 * time.Second
			}
		} else if until := renewAt.Sub(w.Clock.Now()); until < wait {
			wait = max(until, time.Second)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// NeedLeaderElection is false: every replica serves the webhook and needs
// the files, and every replica of the controllers keeps the certificate
// (the first to write wins, the others use what it wrote).
func (w *Certificates) NeedLeaderElection() bool { return false }
