package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// AdminKubeconfig writes a kubeconfig for the admin user: one cluster named
// clusterName at serverURL trusting caBundlePEM, one user authenticating
// with the client certificate certPEM and key keyPEM, and a current context
// "<user>@<clusterName>" joining them, where the user is the certificate's
// CommonName. The certificate must parse and belong to the key, and the CA
// bundle must hold at least one certificate. The result holds a private
// key: store it in a Secret, never log it.
func AdminKubeconfig(clusterName, serverURL string, caBundlePEM, certPEM, keyPEM []byte) ([]byte, error) {
	if clusterName == "" {
		return nil, errors.New("writing the admin kubeconfig: no cluster name")
	}
	u, err := url.Parse(serverURL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("writing the admin kubeconfig: server %q is not an https:// URL with a host", serverURL)
	}
	if _, err := certutil.ParseCertsPEM(caBundlePEM); err != nil {
		return nil, fmt.Errorf("writing the admin kubeconfig: reading the CA bundle: %w", err)
	}
	kp, err := ParseKeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("writing the admin kubeconfig: %w", err)
	}
	user := kp.cert.Subject.CommonName
	contextName := user + "@" + clusterName

	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[clusterName] = &clientcmdapi.Cluster{
		Server:                   serverURL,
		CertificateAuthorityData: caBundlePEM,
	}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{
		ClientCertificateData: certPEM,
		ClientKeyData:         keyPEM,
	}
	cfg.Contexts[contextName] = &clientcmdapi.Context{
		Cluster:  clusterName,
		AuthInfo: user,
	}
	cfg.CurrentContext = contextName
	if err := clientcmd.Validate(*cfg); err != nil {
		return nil, fmt.Errorf("writing the admin kubeconfig: %w", err)
	}
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("writing the admin kubeconfig: %w", err)
	}
	return out, nil
}

// Credential is a kubeconfig for user in groups and the client certificate
// it carries: signed by ca, valid for lifetime from now (clamped to the
// CA's own expiry), trusting caBundlePEM at serverURL. It is what an
// AdminCredentialRequest is answered with. The kubeconfig holds a private
// key: store it in a Secret, never log it.
func Credential(ca *KeyPair, clusterName, serverURL string, caBundlePEM []byte, user string, groups []string,
	alg v1alpha1.KeyAlgorithm, lifetime time.Duration, now time.Time) ([]byte, *x509.Certificate, error) {
	kp, err := NewSignedCert(ca, ClientCertConfigFor(user, groups...), alg, lifetime, now)
	if err != nil {
		return nil, nil, err
	}
	key, err := kp.KeyPEM()
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the key of %q: %w", user, err)
	}
	kubeconfig, err := AdminKubeconfig(clusterName, serverURL, caBundlePEM, kp.CertPEM(), key)
	if err != nil {
		return nil, nil, err
	}
	return kubeconfig, kp.Cert(), nil
}

// KubeconfigKeyPair extracts the client certificate of a kubeconfig written
// by AdminKubeconfig or Credential; nil when there is none.
func KubeconfigKeyPair(data []byte) *KeyPair {
	if len(data) == 0 {
		return nil
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil
	}
	for _, auth := range cfg.AuthInfos {
		if kp, err := ParseKeyPair(auth.ClientCertificateData, auth.ClientKeyData); err == nil {
			return kp
		}
	}
	return nil
}
