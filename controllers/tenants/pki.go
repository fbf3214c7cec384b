package tenants

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
	"github.com/apiserver-operator/apiserver-operator/apiserver/rotation"
	"github.com/apiserver-operator/apiserver-operator/controllers/datastores"
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
	// What the published bundles trusted before this pass: the cluster and
	// front-proxy CA bundles' CAs and the service-account public keys.
	trustedCAs, trustedFrontProxyCAs []*x509.Certificate
	trustedServiceAccountKeys        []byte
	// rotatesCA is false for a user's CA (spec.certificates.caSecretName):
	// the user rotates it.
	rotatesCA bool
}

// publishTrust computes what the pods and clients trust from the material
// and where the rotations stand. It is the one place the CA bundles and
// the service-account public keys are composed: the PKI step calls it for
// what it loaded, the rotation step again after a rotation moved.
func (res *pkiResult) publishTrust(now time.Time) error {
	s := &res.secrets
	keepCAs := !res.rotatesCA || rotation.CA.TrustsOld(s.CARotation.Phase)
	s.CABundle = pki.CATrust(now, s.CA.Cert(), certOf(s.NextCA), res.trustedCAs, keepCAs)
	// The front-proxy CA is not rotated by the operator.
	s.FrontProxyCABundle = pki.CATrust(now, s.FrontProxyCA.Cert(), nil, res.trustedFrontProxyCAs, true)
	var err error
	keepKeys := rotation.ServiceAccountKey.TrustsOld(s.ServiceAccountKeyRotation.Phase)
	if s.ServiceAccountPublicKeys, err = pki.ServiceAccountTrust(s.ServiceAccountSigningKey, s.ServiceAccountNextSigningKey, res.trustedServiceAccountKeys, keepKeys); err != nil {
		return fmt.Errorf("publishing the service-account public keys: %w", err)
	}
	return nil
}

func certOf(kp *pki.KeyPair) *x509.Certificate {
	if kp == nil {
		return nil
	}
	return kp.Cert()
}

// reconcilePKI finds what certificates exist and are current, and issues
// what is missing or due; the Secrets are applied after the rotations had
// their say.
func (r *Reconciler) reconcilePKI(ctx context.Context, p *pass) error {
	// The leaves kube-apiserver reads only at start roll the pods when
	// renewed for their age: that renewal waits for a maintenance window
	// while the certificate has a week left past the window.
	holdRenewal := func(name string, cert *x509.Certificate) bool {
		if !p.maint.at.Next.IsZero() && !p.maint.at.Next.Add(expiryMargin).Before(cert.NotAfter) {
			return false
		}
		return p.waitForWindow(fmt.Sprintf("the renewal of the %s certificate (due since %s, expires %s)", name,
			pki.RenewAt(cert, p.c.Spec.Certificates.RenewalPercent).UTC().Format(time.RFC3339), cert.NotAfter.UTC().Format(time.RFC3339)))
	}
	res, err := r.issuePKI(ctx, p.cfg, p.c, p.refs, p.datastore, p.now, holdRenewal)
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
// A renewal for age alone of a leaf that kube-apiserver reads only at start
// is skipped when holdRenewal says so.
func (r *Reconciler) issuePKI(ctx context.Context, cfg *v1alpha1.ApiServerConfig, c *apiserver.Completed, refs client.Reader, ds *datastores.Datastore, now time.Time,
	holdRenewal func(name string, cert *x509.Certificate) bool) (*pkiResult, error) {
	certs := c.Spec.Certificates
	alg := certs.KeyAlgorithm
	validity, caValidity := certs.Validity.Duration, certs.CAValidity.Duration
	res := &pkiResult{}

	if err := r.loadCA(ctx, refs, cfg, c, now, res); err != nil {
		return nil, fmt.Errorf("reconciling the cluster CA: %w", err)
	}
	frontProxy, err := r.loadOrCreateCA(ctx, ownSecrets{r, cfg}, cfg.Namespace, apiserver.FrontProxyCASecretName(cfg.Name), "front-proxy-ca", alg, caValidity, now, res)
	if err != nil {
		return nil, fmt.Errorf("reconciling the front-proxy CA: %w", err)
	}
	res.secrets.FrontProxyCA, res.trustedFrontProxyCAs = frontProxy.ca, frontProxy.trusted
	if err := r.serviceAccountKeys(ctx, cfg, c, alg, now, res); err != nil {
		return nil, err
	}
	if err := res.publishTrust(now); err != nil {
		return nil, err
	}
	ca, caBundle := res.secrets.CA, res.secrets.CABundle

	own := ownSecrets{r, cfg}
	leaf := func(name, secretName string, signer *pki.KeyPair, cfg pki.CertConfig, readAtStart bool) (*pki.KeyPair, error) {
		_, existing, err := readKeyPair(ctx, own, c.Namespace, secretName)
		if err != nil {
			return nil, err
		}
		if existing != nil {
			renew, reason := pki.NeedsRenewal(existing.Cert(), now, certs.RenewalPercent, cfg.Requirements(signer.Cert(), alg))
			if renew && reason == pki.ReasonExpiring && readAtStart && holdRenewal(name, existing.Cert()) {
				// The window brings the pass that renews it.
				res.trackSigner(name, existing.Cert(), certs.RenewalPercent)
				return existing, nil
			}
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
	// kube-apiserver re-reads its serving certificate, not its client
	// certificates.
	if s.Serving, err = leaf("serving", apiserver.ServingSecretName(cfg.Name), ca, pki.ServingCertConfig(c.SANs.DNSNames, c.SANs.IPs), false); err != nil {
		return nil, err
	}
	if s.KubeletClient, err = leaf("kubelet-client", apiserver.KubeletClientSecretName(cfg.Name), ca, pki.KubeletClientCertConfig(), true); err != nil {
		return nil, err
	}
	if s.FrontProxyClient, err = leaf("front-proxy-client", apiserver.FrontProxyClientSecretName(cfg.Name), s.FrontProxyCA, pki.FrontProxyClientCertConfig(), true); err != nil {
		return nil, err
	}

	// A tenant of a datastore presents its etcd user's certificate, which
	// the datastore's client CA signs (kube-apiserver reads it at start).
	if ds != nil && c.EtcdUser != "" {
		if s.EtcdClient, err = leaf("etcd-user", apiserver.EtcdUserSecretName(cfg.Name), ds.ClientCA(), datastores.UserCertConfig(c.EtcdUser), true); err != nil {
			return nil, err
		}
		s.EtcdCA = ds.ServerCA()
	}

	// The konnectivity server serves the agents and reviews their tokens
	// with certificates of its own, which it reads at start. The agents
	// trust the konnectivity CA alone, which no rotation of the cluster CA
	// touches: it signs the server's certificate for them, and
	// kube-apiserver's for the name they ask it for (re-read without a
	// restart).
	if c.Spec.Konnectivity != nil {
		konnectivity, err := r.loadOrCreateCA(ctx, own, cfg.Namespace, apiserver.KonnectivityCASecretName(cfg.Name), apiserver.KonnectivityCACommonName, alg, caValidity, now, res)
		if err != nil {
			return nil, fmt.Errorf("reconciling the konnectivity CA: %w", err)
		}
		s.KonnectivityCA = konnectivity.ca
		if s.KonnectivityServing, err = leaf("konnectivity-server", apiserver.KonnectivityServerSecretName(cfg.Name), s.KonnectivityCA, apiserver.KonnectivityServingCertConfig(c), true); err != nil {
			return nil, err
		}
		if s.KonnectivityAPIServer, err = leaf("konnectivity-apiserver", apiserver.KonnectivityAPIServerSecretName(cfg.Name), s.KonnectivityCA, apiserver.KonnectivityAPIServerCertConfig(), false); err != nil {
			return nil, err
		}
		if s.KonnectivityClient, err = leaf("konnectivity-client", apiserver.KonnectivityClientSecretName(cfg.Name), ca, apiserver.KonnectivityServerCertConfig(), true); err != nil {
			return nil, err
		}
	}

	// The admin kubeconfig carries its own client certificate; it is
	// renewed like the others and rewritten whenever the endpoint or the
	// CA bundle changes (the kubeconfig is rebuilt each pass, identically
	// for identical inputs).
	admin, err := r.adminKeyPair(ctx, cfg, c, ca, alg, now, res)
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

// track records a certificate that a pass renews when due in status and in
// the next renewal time.
func (res *pkiResult) track(name string, cert *x509.Certificate, percent int32) {
	renewAt := res.trackSigner(name, cert, percent)
	if res.nextRenewal.IsZero() || renewAt.Before(res.nextRenewal) {
		res.nextRenewal = renewAt
	}
}

// trackSigner records a CA in status only: no pass renews a CA. The
// cluster CA's rotation comes back when it is due (rotation.Kind.WakeAt);
// a user's CA is the user's to renew. Counted as a renewal, a CA past its
// renewal time would bring a pass every second until it expires.
func (res *pkiResult) trackSigner(name string, cert *x509.Certificate, percent int32) time.Time {
	renewAt := pki.RenewAt(cert, percent)
	res.certificates = append(res.certificates, v1alpha1.CertificateStatus{
		Name:       name,
		NotAfter:   metav1.NewTime(cert.NotAfter.UTC().Truncate(time.Second)),
		RenewAfter: &metav1.Time{Time: renewAt.UTC().Truncate(time.Second)},
	})
	return renewAt
}

// loadedCA is a CA as the operator keeps it in its Secret.
type loadedCA struct {
	ca *pki.KeyPair
	// trusted are the CAs its published bundle holds.
	trusted []*x509.Certificate
	// secret is the Secret as read; nil when it does not exist yet.
	secret *corev1.Secret
}

// loadOrCreateCA reads the operator's CA Secret secretName, or creates a
// CA when there is none. A CA that exists is never regenerated: a lost CA
// breaks every client.
func (r *Reconciler) loadOrCreateCA(ctx context.Context, reader client.Reader, namespace, secretName, commonName string,
	alg v1alpha1.KeyAlgorithm, validity time.Duration, now time.Time, res *pkiResult) (loadedCA, error) {
	var out loadedCA
	var err error
	if out.secret, out.ca, err = readKeyPair(ctx, reader, namespace, secretName); err != nil {
		return out, err
	}
	if out.secret != nil {
		// A bundle that does not parse trusts nothing more than the CA.
		out.trusted, _ = certutil.ParseCertsPEM(out.secret.Data[apiserver.CABundleKey])
	}
	if out.ca == nil {
		if out.ca, err = pki.NewSelfSignedCA(commonName, alg, validity, now); err != nil {
			return out, fmt.Errorf("generating CA %s: %w", commonName, err)
		}
		res.issued = append(res.issued, secretName)
	}
	res.trackSigner(secretName, out.ca.Cert(), pki.DefaultRenewalPercent)
	return out, nil
}

// loadCA loads the cluster CA: the user's (userSecret) or the operator's,
// with the CA that will sign next and where its rotation stands.
func (r *Reconciler) loadCA(ctx context.Context, refs client.Reader, cfg *v1alpha1.ApiServerConfig, c *apiserver.Completed, now time.Time, res *pkiResult) error {
	certs := c.Spec.Certificates
	userSecret := certs.CASecretName
	name := apiserver.CASecretName(cfg.Name)
	s := &res.secrets
	if userSecret != "" {
		// The user's CA is the user's to rotate: what the bundle trusted
		// stays until it expires.
		_, user, err := readKeyPair(ctx, refs, cfg.Namespace, userSecret)
		if err != nil {
			return err
		}
		if user == nil {
			return fmt.Errorf("spec.certificates.caSecretName names Secret %s/%s, which does not exist: create it with tls.crt and tls.key", cfg.Namespace, userSecret)
		}
		own := &corev1.Secret{}
		if err := (ownSecrets{r, cfg}).Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: name}, own); err == nil {
			res.trustedCAs, _ = certutil.ParseCertsPEM(own.Data[apiserver.CABundleKey])
		} else if !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading Secret %s/%s: %w", cfg.Namespace, name, err)
		}
		s.CA = user
		res.trackSigner(name, user.Cert(), pki.DefaultRenewalPercent)
		return nil
	}
	own, err := r.loadOrCreateCA(ctx, ownSecrets{r, cfg}, cfg.Namespace, name, "kubernetes", certs.KeyAlgorithm, certs.CAValidity.Duration, now, res)
	if err != nil {
		return err
	}
	s.CA, res.trustedCAs, res.rotatesCA = own.ca, own.trusted, true
	if own.secret != nil && len(own.secret.Data[apiserver.NextCertKey]) > 0 {
		if s.NextCA, err = pki.ParseKeyPair(own.secret.Data[apiserver.NextCertKey], own.secret.Data[apiserver.NextKeyKey]); err != nil {
			return fmt.Errorf("reading the next CA of Secret %s/%s (fix it, or remove its %s and %s to restart the rotation): %w",
				cfg.Namespace, name, apiserver.NextCertKey, apiserver.NextKeyKey, err)
		}
	}
	s.CARotation, err = loadRotation(rotation.CA, own.secret, rotation.Inputs{Request: cfg.Annotations[v1alpha1.RotateCAAnnotation], Distrust: cfg.Annotations[v1alpha1.RevokeCAAnnotation]}, now)
	return err
}

// loadRotation reads where a rotation stands from the Secret that holds its
// signer; a signer seen for the first time is adopted at once (it needs no
// rollout), so that a new tenant's Secrets are written once; requests (its
// Request and Distrust) already there are answered by it.
func loadRotation(k rotation.Kind, holder *corev1.Secret, requests rotation.Inputs, now time.Time) (rotation.State, error) {
	state, err := apiserver.RotationStateOf(k, holder)
	if err != nil || state.Phase != "" {
		return state, err
	}
	requests.Now = now
	state, _ = k.Next(state, requests)
	return state, nil
}

// readKeyPair reads a kubernetes.io/tls-shaped Secret; nil when it does not
// exist. A Secret that exists but does not parse is an error, never a
// reason to overwrite it.
func readKeyPair(ctx context.Context, reader client.Reader, namespace, name string) (*corev1.Secret, *pki.KeyPair, error) {
	s := &corev1.Secret{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("reading Secret %s/%s: %w", namespace, name, err)
	}
	kp, err := pki.ParseKeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, nil, fmt.Errorf("reading the certificate of Secret %s/%s (fix or delete it): %w", namespace, name, err)
	}
	return s, kp, nil
}

// serviceAccountKeys loads the signing key, the key that will sign next and
// where their rotation stands, or creates the signing key.
func (r *Reconciler) serviceAccountKeys(ctx context.Context, cfg *v1alpha1.ApiServerConfig, c *apiserver.Completed, alg v1alpha1.KeyAlgorithm, now time.Time, res *pkiResult) error {
	name := apiserver.ServiceAccountSecretName(c.Name)
	s := &corev1.Secret{}
	err := ownSecrets{r, cfg}.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, s)
	m := &res.secrets
	switch {
	case err == nil && len(s.Data[apiserver.ServiceAccountPrivateKeyKey]) > 0 && len(s.Data[apiserver.ServiceAccountPublicKeysKey]) > 0:
		for _, key := range []string{apiserver.ServiceAccountPrivateKeyKey, apiserver.ServiceAccountNextKeyKey} {
			if len(s.Data[key]) == 0 {
				continue
			}
			if _, err := pki.ParseServiceAccountKey(s.Data[key]); err != nil {
				return fmt.Errorf("reading the service-account key %s of Secret %s/%s (fix or delete it): %w", key, c.Namespace, name, err)
			}
		}
		m.ServiceAccountSigningKey = s.Data[apiserver.ServiceAccountPrivateKeyKey]
		m.ServiceAccountNextSigningKey = s.Data[apiserver.ServiceAccountNextKeyKey]
		res.trustedServiceAccountKeys = s.Data[apiserver.ServiceAccountPublicKeysKey]
		m.ServiceAccountKeyRotation, err = loadRotation(rotation.ServiceAccountKey, s, rotation.Inputs{Request: cfg.Annotations[v1alpha1.RotateServiceAccountKeyAnnotation]}, now)
		return err
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("reading Secret %s/%s: %w", c.Namespace, name, err)
	}
	key, err := pki.NewServiceAccountKey(alg)
	if err != nil {
		return fmt.Errorf("generating the service-account key: %w", err)
	}
	if m.ServiceAccountSigningKey, err = key.PrivateKeyPEM(); err != nil {
		return fmt.Errorf("encoding the service-account key: %w", err)
	}
	m.ServiceAccountKeyRotation, _ = loadRotation(rotation.ServiceAccountKey, nil, rotation.Inputs{Request: cfg.Annotations[v1alpha1.RotateServiceAccountKeyAnnotation]}, now)
	res.issued = append(res.issued, "service-account key")
	return nil
}

// adminKeyPair reads the admin client certificate back from the admin
// kubeconfig Secret (from memory when the tenant publishes none), renewing
// it when due or when it would outlive spec.adminCredentials.lifetime (a
// lifetime shortened, or a certificate of the year-long kind the operator
// issued before the field existed).
func (r *Reconciler) adminKeyPair(ctx context.Context, owner *v1alpha1.ApiServerConfig, c *apiserver.Completed, ca *pki.KeyPair, alg v1alpha1.KeyAlgorithm,
	now time.Time, res *pkiResult) (*pki.KeyPair, error) {
	cfg := pki.AdminCertConfig()
	lifetime := c.Spec.AdminCredentials.Lifetime.Duration
	percent := c.Spec.Certificates.RenewalPercent
	key := client.ObjectKeyFromObject(owner)
	var existing *pki.KeyPair
	if apiserver.PublishesAdminKubeconfig(c) {
		name := apiserver.AdminKubeconfigSecretName(c.Name)
		s := &corev1.Secret{}
		if err := (ownSecrets{r, owner}).Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, s); err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading Secret %s/%s: %w", c.Namespace, name, err)
		}
		existing = pki.KubeconfigKeyPair(s.Data[apiserver.KubeconfigKey])
		r.memory.operatorCredentials.Forget(key)
	} else {
		existing, _ = r.memory.operatorCredentials.Load(key)
	}
	why := ""
	if existing != nil {
		renew, reason := pki.NeedsRenewal(existing.Cert(), now, percent, cfg.Requirements(ca.Cert(), alg))
		switch {
		case renew:
			why = fmt.Sprintf(" (%s)", reason)
		case existing.Cert().NotAfter.After(now.Add(lifetime)):
			why = " (lifetime shortened)"
		default:
			res.track("admin", existing.Cert(), percent)
			return existing, nil
		}
	}
	kp, err := pki.NewSignedCert(ca, cfg, alg, lifetime, now)
	if err != nil {
		return nil, fmt.Errorf("issuing the admin certificate: %w", err)
	}
	if !apiserver.PublishesAdminKubeconfig(c) {
		r.memory.operatorCredentials.Store(key, kp)
	}
	res.issued = append(res.issued, "admin"+why)
	res.track("admin", kp.Cert(), percent)
	return kp, nil
}
