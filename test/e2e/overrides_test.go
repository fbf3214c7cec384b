//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/transport"
)

// Scenario 2: events created in the tenant are stored in the events etcd
// only, everything else in the main one.
func TestOperator_EtcdOverridesSplitTheTenantsData(t *testing.T) {
	_, cfg, tenant := startTenant(t, "split", nil)

	ctx := context.Background()
	if _, err := tenant.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "marker"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tenant.CoreV1().Events("default").Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "marker"},
		InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Namespace: "default", Name: "marker", APIVersion: "v1"},
		Reason:         "Marked", Message: "stored by the override", Type: corev1.EventTypeNormal,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	etcd := cluster.TenantEtcd()
	tlsConfig, err := transport.TLSConfigFor(&transport.Config{TLS: transport.TLSConfig{CAFile: etcd.CAFile, CertFile: etcd.CertFile, KeyFile: etcd.KeyFile}})
	if err != nil {
		t.Fatal(err)
	}
	count := func(endpoint, key string) int64 {
		t.Helper()
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tlsConfig.Clone(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cli.Close() }()
		resp, err := cli.Get(ctx, key, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatalf("reading etcd %s: %v", endpoint, err)
		}
		return resp.Count
	}
	prefix := cfg.Spec.Etcd.Prefix
	for _, check := range []struct {
		endpoint, key string
		want          int64
	}{
		{etcd.EventsURL, prefix + "/events/default/marker", 1},
		{etcd.MainURL, prefix + "/events/default/marker", 0},
		{etcd.MainURL, prefix + "/configmaps/default/marker", 1},
		{etcd.EventsURL, prefix + "/configmaps/default/marker", 0},
	} {
		if got := count(check.endpoint, check.key); got != check.want {
			t.Errorf("etcd %s holds %d keys %s, want %d", check.endpoint, got, check.key, check.want)
		}
	}
}
