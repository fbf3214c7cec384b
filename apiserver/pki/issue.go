package pki

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strconv"
	"time"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// ClockSkew is how far before the issuing time a certificate becomes valid,
// so that a peer whose clock is a little behind still accepts it (kubeadm
// backdates by the same amount).
const ClockSkew = 5 * time.Minute

// Names that Kubernetes reads from client certificates: the CommonName is
// the user and each Organization a group.
const (
	// ServingCommonName is the CommonName of the kube-apiserver serving
	// certificate.
	ServingCommonName = "kube-apiserver"
	// KubeletClientCommonName is the user kube-apiserver authenticates as
	// when it calls kubelets (--kubelet-client-certificate).
	KubeletClientCommonName = "kube-apiserver-kubelet-client"
	// ClusterAdminsGroup is the group kubeadm gives the kubelet client; the
	// tenant cluster needs a ClusterRoleBinding for it (kubeadm binds it to
	// cluster-admin) or kubelets refuse logs, exec and port-forward.
	ClusterAdminsGroup = "kubeadm:cluster-admins"
	// FrontProxyClientCommonName is the user of the certificate
	// kube-apiserver presents to aggregated API servers
	// (--proxy-client-cert-file); it must be in --requestheader-allowed-names.
	FrontProxyClientCommonName = "front-proxy-client"
	// AdminCommonName is the user of the admin kubeconfig.
	AdminCommonName = "kubernetes-admin"
	// SystemMastersGroup is the group that bypasses authorization; only the
	// admin certificate carries it.
	SystemMastersGroup = "system:masters"
	// EtcdClientCommonName is the user kube-apiserver presents to etcd.
	EtcdClientCommonName = "kube-apiserver-etcd-client"
)

// CertConfig describes a certificate to issue.
type CertConfig struct {
	// CommonName is the subject's CN: the user name for a client
	// certificate.
	CommonName string
	// Organization is the subject's O: the groups for a client certificate.
	Organization []string
	// DNSNames are the DNS subject alternative names.
	DNSNames []string
	// IPs are the IP subject alternative names.
	IPs []net.IP
	// Usages are the extended key usages (ServerAuth, ClientAuth).
	Usages []x509.ExtKeyUsage
}

// Requirements returns what NeedsRenewal should check of a certificate
// issued from this configuration by issuer with a key of algorithm alg.
func (c CertConfig) Requirements(issuer *x509.Certificate, alg v1alpha1.KeyAlgorithm) Requirements {
	if alg == "" {
		alg = DefaultKeyAlgorithm
	}
	return Requirements{
		CommonName:   c.CommonName,
		Organization: c.Organization,
		DNSNames:     c.DNSNames,
		IPs:          c.IPs,
		Issuer:       issuer,
		KeyAlgorithm: alg,
	}
}

// ServingCertConfig is the kube-apiserver serving certificate for the given
// names and addresses.
func ServingCertConfig(dnsNames []string, ips []net.IP) CertConfig {
	return CertConfig{
		CommonName: ServingCommonName,
		DNSNames:   dnsNames,
		IPs:        ips,
		Usages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
}

// KubeletClientCertConfig is the client certificate kube-apiserver presents
// to kubelets.
func KubeletClientCertConfig() CertConfig {
	return clientCertConfig(KubeletClientCommonName, ClusterAdminsGroup)
}

// FrontProxyClientCertConfig is the client certificate kube-apiserver
// presents to aggregated API servers; sign it with the front-proxy CA.
func FrontProxyClientCertConfig() CertConfig {
	return clientCertConfig(FrontProxyClientCommonName)
}

// AdminCertConfig is the client certificate of the admin kubeconfig.
func AdminCertConfig() CertConfig {
	return clientCertConfig(AdminCommonName, SystemMastersGroup)
}

// EtcdClientCertConfig is the client certificate kube-apiserver presents to
// etcd; sign it with the etcd CA the user supplies.
func EtcdClientCertConfig() CertConfig {
	return clientCertConfig(EtcdClientCommonName)
}

// ClientCertConfigFor is the client certificate of user in groups.
func ClientCertConfigFor(user string, groups ...string) CertConfig {
	return clientCertConfig(user, groups...)
}

func clientCertConfig(user string, groups ...string) CertConfig {
	return CertConfig{
		CommonName:   user,
		Organization: groups,
		Usages:       []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}

// SplitSANs sorts a list of subject alternative names, such as
// spec.serving.extraSANs, into DNS names and IP addresses.
func SplitSANs(sans []string) (dnsNames []string, ips []net.IP) {
	for _, san := range sans {
		if ip := net.ParseIP(san); ip != nil {
			ips = append(ips, ip)
			continue
		}
		dnsNames = append(dnsNames, san)
	}
	return dnsNames, ips
}

// NewSelfSignedCA generates a key of algorithm alg and a self-signed CA
// certificate for it, valid from now-ClockSkew to now+validity. Its
// CommonName is name followed by "@" and the issuing Unix time, as
// library-go names its signers, so that a rotated CA is told apart from the
// one it replaces. The CA may sign leaf certificates only (MaxPathLen 0).
func NewSelfSignedCA(name string, alg v1alpha1.KeyAlgorithm, validity time.Duration, now time.Time) (*KeyPair, error) {
	if name == "" {
		return nil, errors.New("issuing a CA: no name")
	}
	if validity <= 0 {
		return nil, fmt.Errorf("issuing CA %q: validity %s is not positive", name, validity)
	}
	key, err := GenerateKey(alg)
	if err != nil {
		return nil, fmt.Errorf("issuing CA %q: %w", name, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, fmt.Errorf("issuing CA %q: %w", name, err)
	}
	skid, err := subjectKeyID(key.Public())
	if err != nil {
		return nil, fmt.Errorf("issuing CA %q: %w", name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name + "@" + strconv.FormatInt(now.Unix(), 10)},
		NotBefore:             now.Add(-ClockSkew).UTC(),
		NotAfter:              now.Add(validity).UTC(),
		KeyUsage:              x509.KeyUsageCertSign | keyUsage(key.Public()),
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		SubjectKeyId:          skid,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("signing CA %q: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the new CA %q: %w", name, err)
	}
	return &KeyPair{cert: cert, key: key}, nil
}

// NewSignedCert generates a key of algorithm alg and a certificate for it
// described by cfg and signed by ca. The certificate is valid from
// now-ClockSkew to now+validity, except that its NotAfter is clamped to the
// CA's NotAfter: a certificate cannot outlive the CA that vouches for it, so
// a leaf issued late in its CA's life is shorter than validity and is
// renewed (after the CA rotated) sooner. Signing with a CA that has expired,
// or with a certificate that is not a CA, is an error.
func NewSignedCert(ca *KeyPair, cfg CertConfig, alg v1alpha1.KeyAlgorithm, validity time.Duration, now time.Time) (*KeyPair, error) {
	what := fmt.Sprintf("certificate %q", cfg.CommonName)
	if ca == nil || ca.cert == nil || ca.key == nil {
		return nil, fmt.Errorf("issuing %s: no CA to sign it", what)
	}
	if !ca.cert.IsCA {
		return nil, fmt.Errorf("issuing %s: signer %q is not a CA", what, ca.cert.Subject.CommonName)
	}
	if validity <= 0 {
		return nil, fmt.Errorf("issuing %s: validity %s is not positive", what, validity)
	}
	if cfg.CommonName == "" {
		return nil, errors.New("issuing a certificate: no CommonName")
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	if !notAfter.After(now) {
		return nil, fmt.Errorf("issuing %s: CA %q expired at %s", what, ca.cert.Subject.CommonName, ca.cert.NotAfter.UTC().Format(time.RFC3339))
	}
	key, err := GenerateKey(alg)
	if err != nil {
		return nil, fmt.Errorf("issuing %s: %w", what, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, fmt.Errorf("issuing %s: %w", what, err)
	}
	skid, err := subjectKeyID(key.Public())
	if err != nil {
		return nil, fmt.Errorf("issuing %s: %w", what, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			CommonName:   cfg.CommonName,
			Organization: cfg.Organization,
		},
		DNSNames:              cfg.DNSNames,
		IPAddresses:           normalizeIPs(cfg.IPs),
		NotBefore:             now.Add(-ClockSkew).UTC(),
		NotAfter:              notAfter.UTC(),
		KeyUsage:              keyUsage(key.Public()),
		ExtKeyUsage:           cfg.Usages,
		BasicConstraintsValid: true,
		SubjectKeyId:          skid,
		AuthorityKeyId:        ca.cert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, fmt.Errorf("signing %s with CA %q: %w", what, ca.cert.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the new %s: %w", what, err)
	}
	return &KeyPair{cert: cert, key: key}, nil
}

// keyUsage is DigitalSignature, plus KeyEncipherment for an RSA key, the
// only kind that can encipher a TLS key exchange.
func keyUsage(pub crypto.PublicKey) x509.KeyUsage {
	if _, ok := pub.(*rsa.PublicKey); ok {
		return x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	}
	return x509.KeyUsageDigitalSignature
}

// serialLimit is 2^128: serial numbers are random 128-bit integers.
var serialLimit = new(big.Int).Lsh(big.NewInt(1), 128)

// newSerial returns a random serial number in [1, 2^128).
func newSerial() (*big.Int, error) {
	for {
		n, err := rand.Int(rand.Reader, serialLimit)
		if err != nil {
			return nil, fmt.Errorf("generating a serial number: %w", err)
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}

// subjectKeyID is the SHA-256 of the subjectPublicKey bit string truncated
// to 160 bits (RFC 7093, method 1).
func subjectKeyID(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("computing the subject key identifier: %w", err)
	}
	var spki struct {
		Algorithm pkix.AlgorithmIdentifier
		PublicKey asn1.BitString
	}
	if _, err := asn1.Unmarshal(der, &spki); err != nil {
		return nil, fmt.Errorf("computing the subject key identifier: %w", err)
	}
	sum := sha256.Sum256(spki.PublicKey.Bytes)
	return sum[:20], nil
}

// normalizeIPs writes IPv4 addresses in their 4-byte form and drops
// duplicates, keeping the first occurrence.
func normalizeIPs(ips []net.IP) []net.IP {
	if len(ips) == 0 {
		return nil
	}
	seen := make(map[string]bool, len(ips))
	out := make([]net.IP, 0, len(ips))
	for _, ip := range ips {
		if v4 := ip.To4(); v4 != nil {
			ip = v4
		}
		if seen[ip.String()] {
			continue
		}
		seen[ip.String()] = true
		out = append(out, ip)
	}
	return out
}
