package apiserver

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
	"github.com/apiserver-operator/apiserver-operator/apiserver/rotation"
)

// PKISecrets is the certificate material of one ApiServerConfig, as the
// controller holds it after deciding what to keep, renew or rotate.
type PKISecrets struct {
	// CA signs the serving and client certificates; CABundle is what
	// clients trust (CA, plus the previous CA during a rotation).
	CA       *pki.KeyPair
	CABundle []byte
	Serving  *pki.KeyPair
	// KubeletClient authenticates kube-apiserver to kubelets.
	KubeletClient *pki.KeyPair
	// FrontProxyCA signs FrontProxyClient; FrontProxyCABundle is what
	// aggregated API servers trust.
	FrontProxyCA       *pki.KeyPair
	FrontProxyCABundle []byte
	FrontProxyClient   *pki.KeyPair
	// ServiceAccountSigningKey signs tokens (PEM private key);
	// ServiceAccountPublicKeys verifies them (PEM bundle, the previous key
	// too during a rotation).
	ServiceAccountSigningKey []byte
	ServiceAccountPublicKeys []byte
	// AdminKubeconfig is a kubeconfig with cluster-admin rights.
	AdminKubeconfig []byte
	// EtcdClient is the certificate of the tenant's etcd user, signed by
	// the platform's datastore, and EtcdCA what verifies its etcd servers;
	// nil unless Completed.EtcdUser is set.
	EtcdClient *pki.KeyPair
	EtcdCA     []byte
	// KonnectivityCA is the one CA the konnectivity agents trust; it
	// signs KonnectivityServing, the server's certificate for the agents
	// (for what they dial: KonnectivityServingCertConfig), and
	// KonnectivityAPIServer,
	// kube-apiserver's for KonnectivityAgentServerName. The CA signs
	// KonnectivityClient, the server's client certificate
	// (KonnectivityServerUser). All nil unless spec.konnectivity is set.
	KonnectivityCA        *pki.KeyPair
	KonnectivityServing   *pki.KeyPair
	KonnectivityAPIServer *pki.KeyPair
	KonnectivityClient    *pki.KeyPair

	// During a rotation: the CA that will sign next, and the
	// service-account key that will sign next (PEM private key).
	NextCA                       *pki.KeyPair
	ServiceAccountNextSigningKey []byte
	// CARotation and ServiceAccountKeyRotation are where the rotations
	// stand, kept with what they rotate (RotationAnnotations); the zero
	// state writes nothing (a user's CA is not the operator's to rotate).
	CARotation                rotation.State
	ServiceAccountKeyRotation rotation.State
}

// Annotations of the CA and service-account Secrets that carry where their
// rotation stands across passes and operator restarts: the state as JSON,
// and the last request for a rotation (the value of the ApiServerConfig's
// rotate annotation) that a rotation answered.
const (
	RotationStateAnnotation   = "controlplane.apiserver-operator.dev/rotation"
	RotationRequestAnnotation = "controlplane.apiserver-operator.dev/rotation-trigger"
)

// RotationAnnotations are the annotations that keep s on its Secret; none
// for the zero state.
func RotationAnnotations(s rotation.State) (map[string]string, error) {
	if s.Phase == "" {
		return nil, nil
	}
	encoded, err := s.Encode()
	if err != nil {
		return nil, err
	}
	a := map[string]string{RotationStateAnnotation: encoded}
	if s.Request != "" {
		a[RotationRequestAnnotation] = s.Request
	}
	return a, nil
}

// RotationStateOf reads back what RotationAnnotations wrote on secret; the
// zero state for a nil Secret or one without them.
func RotationStateOf(k rotation.Kind, secret *corev1.Secret) (rotation.State, error) {
	if secret == nil {
		return rotation.State{}, nil
	}
	s, err := k.Parse(secret.Annotations[RotationStateAnnotation])
	if err != nil {
		return rotation.State{}, fmt.Errorf("reading Secret %s/%s (fix or remove its %s annotation): %w", secret.Namespace, secret.Name, RotationStateAnnotation, err)
	}
	s.Request = secret.Annotations[RotationRequestAnnotation]
	return s, nil
}

// Keys of the CA and service-account Secrets during a rotation.
const (
	NextCertKey              = "tls-next.crt"
	NextKeyKey               = "tls-next.key"
	ServiceAccountNextKeyKey = "sa-next.key"
)

// desiredPKISecrets are the Secrets the Deployment mounts (MountedObjects)
// and the admin kubeconfig Secret. Every one holds key material: the
// controller applies them and never logs their data.
func desiredPKISecrets(c *Completed, p PKISecrets) ([]*corev1.Secret, error) {
	tlsSecret := func(name string, kp *pki.KeyPair, extra map[string][]byte) (*corev1.Secret, error) {
		if kp == nil {
			return nil, fmt.Errorf("building Secret %s/%s: no certificate given", c.Namespace, name)
		}
		key, err := kp.KeyPEM()
		if err != nil {
			return nil, fmt.Errorf("building Secret %s/%s: %w", c.Namespace, name, err)
		}
		data := map[string][]byte{corev1.TLSCertKey: kp.CertPEM(), corev1.TLSPrivateKeyKey: key}
		for k, v := range extra {
			data[k] = v
		}
		return secret(c, name, corev1.SecretTypeTLS, data), nil
	}
	type build struct {
		name  string
		kp    *pki.KeyPair
		extra map[string][]byte
	}
	var out []*corev1.Secret
	caExtra := map[string][]byte{CABundleKey: p.CABundle}
	if p.NextCA != nil {
		key, err := p.NextCA.KeyPEM()
		if err != nil {
			return nil, fmt.Errorf("building Secret %s/%s: %w", c.Namespace, CASecretName(c.Name), err)
		}
		caExtra[NextCertKey], caExtra[NextKeyKey] = p.NextCA.CertPEM(), key
	}
	for _, b := range []build{
		{CASecretName(c.Name), p.CA, caExtra},
		{ServingSecretName(c.Name), p.Serving, nil},
		{KubeletClientSecretName(c.Name), p.KubeletClient, nil},
		{FrontProxyCASecretName(c.Name), p.FrontProxyCA, map[string][]byte{CABundleKey: p.FrontProxyCABundle}},
		{FrontProxyClientSecretName(c.Name), p.FrontProxyClient, nil},
	} {
		s, err := tlsSecret(b.name, b.kp, b.extra)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if len(p.ServiceAccountSigningKey) == 0 || len(p.ServiceAccountPublicKeys) == 0 {
		return nil, fmt.Errorf("building Secret %s/%s: no service-account key given", c.Namespace, ServiceAccountSecretName(c.Name))
	}
	sa := map[string][]byte{
		ServiceAccountPrivateKeyKey: p.ServiceAccountSigningKey,
		ServiceAccountPublicKeysKey: p.ServiceAccountPublicKeys,
	}
	if len(p.ServiceAccountNextSigningKey) > 0 {
		sa[ServiceAccountNextKeyKey] = p.ServiceAccountNextSigningKey
	}
	out = append(out, secret(c, ServiceAccountSecretName(c.Name), corev1.SecretTypeOpaque, sa))
	if PublishesAdminKubeconfig(c) {
		if len(p.AdminKubeconfig) == 0 {
			return nil, fmt.Errorf("building Secret %s/%s: no admin kubeconfig given", c.Namespace, AdminKubeconfigSecretName(c.Name))
		}
		out = append(out, secret(c, AdminKubeconfigSecretName(c.Name), corev1.SecretTypeOpaque, map[string][]byte{KubeconfigKey: p.AdminKubeconfig}))
	}
	if c.EtcdUser != "" {
		s, err := tlsSecret(EtcdUserSecretName(c.Name), p.EtcdClient, map[string][]byte{CABundleKey: p.EtcdCA})
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if usesKonnectivity(c) {
		for _, b := range []build{
			{KonnectivityServerSecretName(c.Name), p.KonnectivityServing, nil},
			{KonnectivityClientSecretName(c.Name), p.KonnectivityClient, map[string][]byte{CABundleKey: p.CABundle}},
			{KonnectivityAPIServerSecretName(c.Name), p.KonnectivityAPIServer, nil},
			{KonnectivityCASecretName(c.Name), p.KonnectivityCA, nil},
		} {
			s, err := tlsSecret(b.name, b.kp, b.extra)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
	}
	for name, state := range map[string]rotation.State{CASecretName(c.Name): p.CARotation, ServiceAccountSecretName(c.Name): p.ServiceAccountKeyRotation} {
		a, err := RotationAnnotations(state)
		if err != nil {
			return nil, fmt.Errorf("building Secret %s/%s: %w", c.Namespace, name, err)
		}
		for _, s := range out {
			if s.Name == name && a != nil {
				s.Annotations = a
			}
		}
	}
	return out, nil
}

func secret(c *Completed, name string, typ corev1.SecretType, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: objectMeta(c, name),
		Type:       typ,
		Data:       data,
	}
}
