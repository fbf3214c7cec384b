package controllers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// EtcdClient talks to a tenant's etcd servers.
type EtcdClient interface {
	// Check asks every endpoint for its status; the error names the first
	// one that does not answer.
	Check(ctx context.Context, endpoints []string, tlsConfig *tls.Config) error
	// Count returns how many keys each prefix holds, with count-only reads.
	Count(ctx context.Context, endpoints []string, tlsConfig *tls.Config, prefixes ...string) ([]int64, error)
	// Scan calls fn with every key and value under prefix, as one
	// consistent snapshot read page by page.
	Scan(ctx context.Context, endpoints []string, tlsConfig *tls.Config, prefix string, fn func(key, value []byte)) error
}

// EtcdV3 is the EtcdClient of go.etcd.io/etcd/client/v3.
type EtcdV3 struct {
	// Timeout bounds each dial and each request.
	Timeout time.Duration
}

func (e EtcdV3) timeout() time.Duration {
	if e.Timeout == 0 {
		return 5 * time.Second
	}
	return e.Timeout
}

func (e EtcdV3) client(endpoints []string, tlsConfig *tls.Config) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		TLS:         tlsConfig,
		DialTimeout: e.timeout(),
		// The client's own logger would print every failed dial.
		Logger: zap.NewNop(),
	})
}

// Check implements EtcdClient.
func (e EtcdV3) Check(ctx context.Context, endpoints []string, tlsConfig *tls.Config) error {
	for _, ep := range endpoints {
		cli, err := e.client([]string{ep}, tlsConfig)
		if err != nil {
			return fmt.Errorf("connecting to etcd %s: %w", ep, err)
		}
		reqCtx, cancel := context.WithTimeout(ctx, e.timeout())
		_, err = cli.Status(reqCtx, ep)
		cancel()
		_ = cli.Close()
		if err != nil {
			return &etcdUnreachable{endpoint: ep, err: err}
		}
	}
	return nil
}

// etcdUnreachable is the error of Check: the first endpoint that did not
// answer.
type etcdUnreachable struct {
	endpoint string
	err      error
}

func (e *etcdUnreachable) Error() string {
	return fmt.Sprintf("etcd %s did not answer: %v", e.endpoint, e.err)
}
func (e *etcdUnreachable) Unwrap() error { return e.err }

// unreachableEndpoint is the endpoint err names: "" for no error, the whole
// message for an error of another kind.
func unreachableEndpoint(err error) string {
	var u *etcdUnreachable
	switch {
	case err == nil:
		return ""
	case errors.As(err, &u):
		return u.endpoint
	default:
		return err.Error()
	}
}

// Count implements EtcdClient.
func (e EtcdV3) Count(ctx context.Context, endpoints []string, tlsConfig *tls.Config, prefixes ...string) ([]int64, error) {
	cli, err := e.client(endpoints, tlsConfig)
	if err != nil {
		return nil, fmt.Errorf("connecting to etcd %v: %w", endpoints, err)
	}
	defer func() { _ = cli.Close() }()
	counts := make([]int64, len(prefixes))
	for i, p := range prefixes {
		reqCtx, cancel := context.WithTimeout(ctx, e.timeout())
		resp, err := cli.Get(reqCtx, p, clientv3.WithPrefix(), clientv3.WithCountOnly())
		cancel()
		if err != nil {
			return nil, fmt.Errorf("counting keys under %s in etcd %v: %w", p, endpoints, err)
		}
		counts[i] = resp.Count
	}
	return counts, nil
}

// scanPage is how many keys a Scan reads at once.
const scanPage = 500

// Scan implements EtcdClient: linearizable pages, all at the revision of
// the first one.
func (e EtcdV3) Scan(ctx context.Context, endpoints []string, tlsConfig *tls.Config, prefix string, fn func(key, value []byte)) error {
	cli, err := e.client(endpoints, tlsConfig)
	if err != nil {
		return fmt.Errorf("connecting to etcd %v: %w", endpoints, err)
	}
	defer func() { _ = cli.Close() }()
	end := clientv3.GetPrefixRangeEnd(prefix)
	from := prefix
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(scanPage)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		reqCtx, cancel := context.WithTimeout(ctx, e.timeout())
		resp, err := cli.Get(reqCtx, from, opts...)
		cancel()
		if err != nil {
			return fmt.Errorf("reading the keys under %s in etcd %v: %w", prefix, endpoints, err)
		}
		rev = resp.Header.Revision
		for _, kv := range resp.Kvs {
			fn(kv.Key, kv.Value)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// reconcileEtcd checks that every etcd server answers. An unreachable one
// is an environment failure: the pass goes on (nothing it applies needs
// etcd) and looks again soon.
func (r *ApiServerConfigReconciler) reconcileEtcd(ctx context.Context, p *pass) error {
	var err error
	if p.etcdTLS, p.etcdTLSID, err = etcdTLS(ctx, p.refs, p.cfg, &p.c.Spec.Etcd); err != nil {
		return err
	}
	if r.Etcd == nil {
		return nil
	}
	p.obs.etcdChecked = true
	endpoints := p.c.Etcd.Servers
	p.obs.etcdErr = r.waitOnTenant(ctx, p, func() error { return r.Etcd.Check(ctx, endpoints, p.etcdTLS) })
	if r.etcdWatch != nil {
		r.etcdWatch.record(client.ObjectKeyFromObject(p.cfg), endpoints, p.etcdTLS, p.etcdTLSID, unreachableEndpoint(p.obs.etcdErr))
	}
	if p.obs.etcdErr != nil {
		ctrl.LoggerFrom(ctx).Info("etcd is unreachable", "apiServerConfig", klog.KObj(p.cfg), "error", p.obs.etcdErr.Error())
		p.obs.failure = &envFailure{reason: v1alpha1.ReasonEtcdUnreachable, message: p.obs.etcdErr.Error(),
			since: failingSince(p.before.Status.Conditions, v1alpha1.ReasonEtcdUnreachable, p.now)}
		p.requeueWithin(etcdRetryInterval)
	}
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
