package controllers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// reconcileEtcd checks that every etcd server answers. An unreachable one
// is an environment failure: the pass goes on (nothing it applies needs
// etcd) and looks again soon.
func (r *ApiServerConfigReconciler) reconcileEtcd(ctx context.Context, p *pass) error {
	var err error
	if ds := p.datastore; ds != nil {
		p.etcdTLS, p.etcdTLSID = ds.root, ds.rootID
	} else if p.etcdTLS, p.etcdTLSID, err = etcdTLS(ctx, p.refs, p.cfg, &p.c.Spec.Etcd); err != nil {
		return err
	}
	// Kept for the deletion of the tenant's data, should the Secret go
	// first (a namespace being deleted).
	r.etcdClientTLS.Store(client.ObjectKeyFromObject(p.cfg), p.etcdTLS)
	if r.Etcd == nil {
		return nil
	}
	p.obs.etcdChecked = true
	endpoints := p.c.Etcd.Servers
	p.obs.etcdErr = r.waitOnTenant(ctx, p, func() error { return r.Etcd.Check(ctx, endpoints, p.etcdTLS) })
	if r.etcdWatch != nil {
		r.etcdWatch.record(client.ObjectKeyFromObject(p.cfg), endpoints, p.etcdTLS, p.etcdTLSID, tenantio.UnreachableEndpoint(p.obs.etcdErr))
	}
	if p.obs.etcdErr == nil {
		// The tenant's etcd user gets its rights once the data check
		// proved the keys there its own (checkData).
		return nil
	}
	ctrl.LoggerFrom(ctx).Info("etcd is unreachable", "apiServerConfig", klog.KObj(p.cfg), "error", tenantio.Detail(p.obs.etcdErr))
	p.obs.failure = &envFailure{reason: v1alpha1.ReasonEtcdUnreachable, message: p.obs.etcdErr.Error(),
		since: failingSince(p.before.Status.Conditions, v1alpha1.ReasonEtcdUnreachable, p.now)}
	p.requeueWithin(etcdRetryInterval)
	return nil
}

// etcdTLS builds the client TLS configuration from spec.etcd.tls's Secret,
// and the identity of its material (see tlsIdentity); nil and "" without
// one.
func etcdTLS(ctx context.Context, reader client.Reader, cfg *v1alpha1.ApiServerConfig, spec *v1alpha1.EtcdSpec) (*tls.Config, string, error) {
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
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, tlsIdentity(ca, cert, key), nil
}
