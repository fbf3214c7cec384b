package localcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The tenant etcd servers run with authentication, as a platform that
// gives each tenant an etcd user of its own runs them: etcd's root user
// (whose certificate, etcdTenantRoot, the cluster keeps), and the shared
// client certificate's user (etcdTenantClient), which holds the root role
// so that tenants given that certificate (spec.etcd.tls) reach every key
// as before. The operator's datastore Secret (TenantEtcd's CAKeyFile)
// gives each tenant a user limited to its prefix instead.
const (
	etcdTenantRoot           = "etcd-tenant-root"
	etcdTenantClientUserName = "tenant-apiserver-etcd-client"
)

// enableTenantEtcdAuth turns authentication on in each tenant etcd, once.
func (l layout) enableTenantEtcdAuth(ctx context.Context) error {
	cert, err := tls.LoadX509KeyPair(l.pki.CertFile(etcdTenantRoot), l.pki.KeyFile(etcdTenantRoot))
	if err != nil {
		return fmt.Errorf("loading the tenant etcd's root certificate: %w", err)
	}
	caPEM, err := os.ReadFile(l.pki.CertFile(etcdCA))
	if err != nil {
		return fmt.Errorf("reading the etcd CA: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	te := l.tenantEtcd()
	for _, url := range []string{te.MainURL, te.EventsURL} {
		if err := enableEtcdAuth(ctx, url, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}); err != nil {
			return fmt.Errorf("turning authentication on in the tenant etcd %s: %w", url, err)
		}
	}
	return nil
}

func enableEtcdAuth(ctx context.Context, url string, tlsConfig *tls.Config) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, TLS: tlsConfig, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	status, err := cli.AuthStatus(ctx)
	if err != nil {
		return err
	}
	if status.Enabled {
		return nil
	}
	for _, user := range []string{"root", etcdTenantClientUserName} {
		if _, err := cli.UserAddWithOptions(ctx, user, "", &clientv3.UserAddOptions{NoPassword: true}); err != nil && !errors.Is(err, rpctypes.ErrUserAlreadyExist) {
			return err
		}
		if _, err := cli.UserGrantRole(ctx, user, "root"); err != nil {
			return err
		}
	}
	_, err = cli.AuthEnable(ctx)
	return err
}
