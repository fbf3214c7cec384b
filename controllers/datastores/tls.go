package datastores

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// Reach is TenantTLS with reader and d, as a function of the tenant.
func Reach(reader client.Reader, d *Registry) func(ctx context.Context, cfg *v1alpha1.ApiServerConfig, spec *v1alpha1.EtcdSpec, now time.Time) (*tls.Config, error) {
	return func(ctx context.Context, cfg *v1alpha1.ApiServerConfig, spec *v1alpha1.EtcdSpec, now time.Time) (*tls.Config, error) {
		return TenantTLS(ctx, reader, d, cfg, spec, now)
	}
}

// TenantTLS is how the operator reaches the etcd of spec, a tenant's
// (or its keyspace's): as root of the datastore that holds it, or with
// spec.etcd.tls's Secret.
func TenantTLS(ctx context.Context, reader client.Reader, d *Registry, cfg *v1alpha1.ApiServerConfig, spec *v1alpha1.EtcdSpec, now time.Time) (*tls.Config, error) {
	if d != nil {
		ds, err := d.Of(ctx, now, spec)
		if err != nil {
			return nil, err
		}
		if ds != nil {
			return ds.root, nil
		}
	}
	tlsConfig, _, err := SpecTLS(ctx, reader, cfg, spec)
	return tlsConfig, err
}

// SpecTLS builds the client TLS configuration from spec.etcd.tls's Secret,
// and the identity of its material (see TLSIdentity); nil and "" without
// one.
func SpecTLS(ctx context.Context, reader client.Reader, cfg *v1alpha1.ApiServerConfig, spec *v1alpha1.EtcdSpec) (*tls.Config, string, error) {
	if spec.TLS == nil {
		return nil, "", nil
	}
	s := &corev1.Secret{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: spec.TLS.SecretName}, s); err != nil {
		return nil, "", fmt.Errorf("reading the etcd client Secret %s/%s named by spec.etcd.tls: %w", cfg.Namespace, spec.TLS.SecretName, err)
	}
	ca, cert, key := s.Data[spec.TLS.CAKey], s.Data[spec.TLS.CertKey], s.Data[spec.TLS.KeyKey]
	var missing []error
	for k, v := range map[string][]byte{spec.TLS.CAKey: ca, spec.TLS.CertKey: cert, spec.TLS.KeyKey: key} {
		if len(v) == 0 {
			missing = append(missing, fmt.Errorf("no key %q", k))
		}
	}
	if len(missing) > 0 {
		return nil, "", fmt.Errorf("the etcd client Secret %s/%s: %w", cfg.Namespace, spec.TLS.SecretName, errors.Join(missing...))
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, "", fmt.Errorf("the etcd client Secret %s/%s holds no valid certificate and key: %w", cfg.Namespace, spec.TLS.SecretName, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, "", fmt.Errorf("the etcd client Secret %s/%s: %s holds no PEM certificate", cfg.Namespace, spec.TLS.SecretName, spec.TLS.CAKey)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, TLSIdentity(ca, cert, key), nil
}

// TLSIdentity identifies the TLS material a tenant reaches etcd with.
func TLSIdentity(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write(p)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}
