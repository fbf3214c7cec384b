package controllers

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
)

// pkiResult is the certificate material to apply and what status reports
// about it.
type pkiResult struct {
	secrets      apiserver.PKISecrets
	certificates []v1alpha1.CertificateStatus
	// nextRenewal is the earliest time a certificate is due for renewal:
	// the controller comes back then instead of polling.
	nextRenewal time.Time
	// issued names the certificates created or renewed in this pass.
	issued []string
	// trustedCAs are the CAs the existing cluster CA bundle holds.
	trustedCAs []*x509.Certificate
}

// reconcilePKI finds what certificates exist and are current, and issues
// what is missing or due; the Secrets are applied after the rotations had
// their say.
func (r *ApiServerConfigReconciler) reconcilePKI(ctx context.Context, p *pass) error {
	res, err := r.issuePKI(ctx, p.cfg, p.c, p.refs, p.now)
	if err != nil {
		return err
	}
	if len(res.issued) > 0 {
		r.event(p.cfg, corev1.EventTypeNormal, v1alpha1.ReasonCertificatesIssued, "IssueCertificates", "Issued %s", strings.Join(res.issued, ", "))
	}
	p.pki = res
	p.cfg.Status.Certificates = res.certificates
	recordCertificateExpiry(p.cfg, res.certificates)
	return nil
}

// reconcilePKI keeps what exists and is still good, and issues the rest. A
// CA that exists is never regenerated: a lost CA breaks every client.
func (r *ApiServerConfigReconciler) issuePKI(ctx context.Context, cfg *v1alpha1.ApiServerConfig, c *apiserver.Completed, refs client.Reader, now time.Time) (*pkiResult, error) {
	certs := c.Spec.Certificates
	alg := certs.KeyAlgorithm
	validity, caValidity := certs.Validity.Duration, certs.CAValidity.Duration
	res := &pkiResult{}

	ca, caBundle, err := r.loadOrCreateCA(ctx, refs, cfg, apiserver.CASecretName(cfg.Name), "kubernetes", certs.CASecretName, alg, caValidity, now, res)
	if err != nil {
		return nil, fmt.Errorf("reconciling the cluster CA: %w", err)
	}
	res.trustedCAs, _ = certutil.ParseCertsPEM(caBundle)
	frontProxyCA, frontProxyBundle, err := r.loadOrCreateCA(ctx, refs, cfg, apiserver.FrontProxyCASecretName(cfg.Name), "front-proxy-ca", "", alg, caValidity, now, res)
	if err != nil {
		return nil, fmt.Errorf("reconciling the front-proxy CA: %w", err)
	}

	leaf := func(name, secretName string, signer *pki.KeyPair, cfg pki.CertConfig) (*pki.KeyPair, error) {
		existing, err := readKeyPair(ctx, ownSecrets{r}, c.Namespace, secretName)
		if err != nil {
			return nil, err
		}
		if existing != nil {
			renew, reason := pki.NeedsRenewal(existing.Cert(), now, certs.RenewalPercent, cfg.Requirements(signer.Cert(), alg))
			if !renew {
				res.track(name, existing.Cert(), certs.RenewalPercent)
				return existing, nil
			}
			res.issued = append(res.issued, fmt.Sprintf("%s (%s)", name, reason))
		} else {
			res.issued = append(res.issued, name)
		}
		kp, err := pki.NewSignedCert(signer, cfg, alg, validity, now)
		if err != nil {
			return nil, fmt.Errorf("issuing the %s certificate: %w", name, err)
		}
		res.track(name, kp.Cert(), certs.RenewalPercent)
		return kp, nil
	}

	s := &res.secrets
	s.CA, s.CABundle, s.FrontProxyCA, s.FrontProxyCABundle = ca, caBundle, frontProxyCA, frontProxyBundle
	if s.Serving, err = leaf("serving", apiserver.ServingSecretName(cfg.Name), ca, pki.ServingCertConfig(c.SANs.DNSNames, c.SANs.IPs)); err != nil {
		return nil, err
	}
	if s.KubeletClient, err = leaf("kubelet-client", apiserver.KubeletClientSecretName(cfg.Name), ca, pki.KubeletClientCertConfig()); err != nil {
		return nil, err
	}
	if s.FrontProxyClient, err = leaf("front-proxy-client", apiserver.FrontProxyClientSecretName(cfg.Name), frontProxyCA, pki.FrontProxyClientCertConfig()); err != nil {
		return nil, err
	}

	if err := r.serviceAccountKeys(ctx, c, alg, res); err != nil {
		return nil, err
	}

	// The admin kubeconfig carries its own client certificate; it is
	// renewed like the others and rewritten whenever the endpoint or the
	// CA bundle changes (the kubeconfig is rebuilt each pass, identically
	// for identical inputs).
	admin, err := r.adminKeyPair(ctx, c, ca, alg, validity, now, res)
	if err != nil {
		return nil, err
	}
	adminKey, err := admin.KeyPEM()
	if err != nil {
		return nil, fmt.Errorf("encoding the admin key: %w", err)
	}
	if s.AdminKubeconfig, err = pki.AdminKubeconfig(cfg.Name, c.Endpoint, caBundle, admin.CertPEM(), adminKey); err != nil {
		return nil, fmt.Errorf("writing the admin kubeconfig: %w", err)
	}
	return res, nil
}

// track records a certificate in status and in the next renewal time.
func (res *pkiResult) track(name string, cert *x509.Certificate, percent int32) {
	renewAt := pki.RenewAt(cert, percent)
	res.certificates = append(res.certificates, v1alpha1.CertificateStatus{
		Name:       name,
		NotAfter:   metav1.NewTime(cert.NotAfter.UTC().Truncate(time.Second)),
		RenewAfter: &metav1.Time{Time: renewAt.UTC().Truncate(time.Second)},
	})
	if res.nextRenewal.IsZero() || renewAt.Before(res.nextRenewal) {
		res.nextRenewal = renewAt
	}
}

// loadOrCreateCA returns the CA of secretName, or the user's CA of
// userSecret, or a new one when neither exists, with its trust bundle: the
// CA and every unexpired CA the existing bundle already trusted.
func (r *ApiServerConfigReconciler) loadOrCreateCA(ctx context.Context, refs client.Reader, cfg *v1alpha1.ApiServerConfig, secretName, commonName, userSecret string,
	alg v1alpha1.KeyAlgorithm, validity time.Duration, now time.Time, res *pkiResult) (*pki.KeyPair, []byte, error) {
	var ca *pki.KeyPair
	var err error
	if userSecret != "" {
		if ca, err = readKeyPair(ctx, refs, cfg.Namespace, userSecret); err != nil {
			return nil, nil, err
		}
		if ca == nil {
			return nil, nil, fmt.Errorf("spec.certificates.caSecretName names Secret %s/%s, which does not exist: create it with tls.crt and tls.key", cfg.Namespace, userSecret)
		}
	} else if ca, err = readKeyPair(ctx, ownSecrets{r}, cfg.Namespace, secretName); err != nil {
		return nil, nil, err
	}
	if ca == nil {
		if ca, err = pki.NewSelfSignedCA(commonName, alg, validity, now); err != nil {
			return nil, nil, fmt.Errorf("generating CA %s: %w", commonName, err)
		}
		res.issued = append(res.issued, secretName)
	}
	trusted := []*x509.Certificate{ca.Cert()}
	existing := &corev1.Secret{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: secretName}, existing); err == nil {
		if old, err := certutil.ParseCertsPEM(existing.Data[apiserver.CABundleKey]); err == nil {
			trusted = append(trusted, old...)
		}
	} else if !apierrors.IsNotFound(err) {
		return nil, nil, fmt.Errorf("reading Secret %s/%s: %w", cfg.Namespace, secretName, err)
	}
	res.track(secretName, ca.Cert(), pki.DefaultRenewalPercent)
	return ca, pki.TrustBundle(now, trusted...), nil
}

// readKeyPair reads a kubernetes.io/tls-shaped Secret; nil when it does not
// exist. A Secret that exists but does not parse is an error, never a
// reason to overwrite it.
func readKeyPair(ctx context.Context, reader client.Reader, namespace, name string) (*pki.KeyPair, error) {
	s := &corev1.Secret{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading Secret %s/%s: %w", namespace, name, err)
	}
	kp, err := pki.ParseKeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, fmt.Errorf("reading the certificate of Secret %s/%s (fix or delete it): %w", namespace, name, err)
	}
	return kp, nil
}

// serviceAccountKeys keeps the signing key and its public key bundle, or
// creates them.
func (r *ApiServerConfigReconciler) serviceAccountKeys(ctx context.Context, c *apiserver.Completed, alg v1alpha1.KeyAlgorithm, res *pkiResult) error {
	name := apiserver.ServiceAccountSecretName(c.Name)
	s := &corev1.Secret{}
	err := ownSecrets{r}.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, s)
	switch {
	case err == nil && len(s.Data[apiserver.ServiceAccountPrivateKeyKey]) > 0 && len(s.Data[apiserver.ServiceAccountPublicKeysKey]) > 0:
		if _, err := pki.ParseServiceAccountKey(s.Data[apiserver.ServiceAccountPrivateKeyKey]); err != nil {
			return fmt.Errorf("reading the service-account key of Secret %s/%s (fix or delete it): %w", c.Namespace, name, err)
		}
		res.secrets.ServiceAccountSigningKey = s.Data[apiserver.ServiceAccountPrivateKeyKey]
		res.secrets.ServiceAccountPublicKeys = s.Data[apiserver.ServiceAccountPublicKeysKey]
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("reading Secret %s/%s: %w", c.Namespace, name, err)
	}
	key, err := pki.NewServiceAccountKey(alg)
	if err != nil {
		return fmt.Errorf("generating the service-account key: %w", err)
	}
	if res.secrets.ServiceAccountSigningKey, err = key.PrivateKeyPEM(); err != nil {
		return fmt.Errorf("encoding the service-account key: %w", err)
	}
	if res.secrets.ServiceAccountPublicKeys, err = pki.PublicKeysPEM(key.Public()); err != nil {
		return fmt.Errorf("encoding the service-account public key: %w", err)
	}
	res.issued = append(res.issued, "service-account key")
	return nil
}

// adminKeyPair reads the admin client certificate back from the admin
// kubeconfig Secret, renewing it when due.
func (r *ApiServerConfigReconciler) adminKeyPair(ctx context.Context, c *apiserver.Completed, ca *pki.KeyPair, alg v1alpha1.KeyAlgorithm,
	validity time.Duration, now time.Time, res *pkiResult) (*pki.KeyPair, error) {
	cfg := pki.AdminCertConfig()
	name := apiserver.AdminKubeconfigSecretName(c.Name)
	s := &corev1.Secret{}
	if err := (ownSecrets{r}).Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, s); err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading Secret %s/%s: %w", c.Namespace, name, err)
	}
	if existing := adminFromKubeconfig(s.Data[apiserver.KubeconfigKey]); existing != nil {
		if renew, _ := pki.NeedsRenewal(existing.Cert(), now, c.Spec.Certificates.RenewalPercent, cfg.Requirements(ca.Cert(), alg)); !renew {
			res.track("admin", existing.Cert(), c.Spec.Certificates.RenewalPercent)
			return existing, nil
		}
	}
	kp, err := pki.NewSignedCert(ca, cfg, alg, validity, now)
	if err != nil {
		return nil, fmt.Errorf("issuing the admin certificate: %w", err)
	}
	res.issued = append(res.issued, "admin")
	res.track("admin", kp.Cert(), c.Spec.Certificates.RenewalPercent)
	return kp, nil
}

// adminFromKubeconfig extracts the client certificate of a kubeconfig
// written by pki.AdminKubeconfig; nil when there is none.
func adminFromKubeconfig(data []byte) *pki.KeyPair {
	if len(data) == 0 {
		return nil
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil
	}
	for _, auth := range cfg.AuthInfos {
		if kp, err := pki.ParseKeyPair(auth.ClientCertificateData, auth.ClientKeyData); err == nil {
			return kp
		}
	}
	return nil
}
