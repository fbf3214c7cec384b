package boot

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// TestRenderedAPIServer_CountsAuditEventsTheWebhookRefuses: a webhook
// that answers 500 makes the bundled kube-apiserver, in mode batch, give
// up on the events after its retries, without failing a request; the
// operator's own reader (tenantio, as the audit watch reads each
// apiserver) then finds them in apiserver_audit_error_total, plugin
// webhook, which is what the AuditDelivered condition reports.
func TestRenderedAPIServer_CountsAuditEventsTheWebhookRefuses(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	etcdCA := must(pki.NewSelfSignedCA("etcd-ca", ecdsa, 24*time.Hour, now))
	etcd, _, _ := etcdServer(t, dir, "main", etcdCA)
	etcdClient := must(pki.NewSignedCert(etcdCA, pki.EtcdClientCertConfig(), ecdsa, time.Hour, now))

	// A collector that refuses every batch.
	ca := must(pki.NewSelfSignedCA("audit-webhook-ca", ecdsa, time.Hour, now))
	serving := must(pki.NewSignedCert(ca, pki.ServingCertConfig([]string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}), ecdsa, time.Hour, now))
	var refused atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		refused.Add(1)
		http.Error(w, "the collector is down", http.StatusInternalServerError)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{serving.Cert().Raw}, PrivateKey: serving.Key()}}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["audit"] = &clientcmdapi.Cluster{Server: srv.URL, CertificateAuthorityData: ca.CertPEM()}
	kubeconfig.AuthInfos["apiserver"] = &clientcmdapi.AuthInfo{}
	kubeconfig.Contexts["audit"] = &clientcmdapi.Context{Cluster: "audit", AuthInfo: "apiserver"}
	kubeconfig.CurrentContext = "audit"
	write(t, filepath.Join(dir, "pod", apiserver.AuditWebhookKubeconfigFile), must(clientcmd.Write(*kubeconfig)))

	port := int32(freePort(t))
	cfg := &v1alpha1.ApiServerConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "lossy", Namespace: "tenants"},
		Spec: v1alpha1.ApiServerConfigSpec{
			EndpointReconcilerType: v1alpha1.EndpointReconcilerNone,
			Etcd: v1alpha1.EtcdSpec{Servers: []string{etcd}, Prefix: "/tenants/lossy",
				TLS: &v1alpha1.EtcdTLS{SecretName: "etcd-client"}},
			ServiceClusterIPRange: []string{"10.121.0.0/16"},
			Serving:               v1alpha1.ServingSpec{SecurePort: port},
			ExtraArgs:             []v1alpha1.ExtraArg{{Name: "bind-address", Value: "127.0.0.1"}},
			Audit: v1alpha1.AuditSpec{Webhook: &v1alpha1.AuditWebhookSpec{KubeconfigSecretName: "audit-webhook",
				Batch:          &v1alpha1.AuditWebhookBatchSpec{MaxWait: &metav1.Duration{Duration: time.Second}},
				InitialBackoff: &metav1.Duration{Duration: 100 * time.Millisecond}}},
		},
	}
	b := boot(t, filepath.Join(dir, "pod"), cfg, etcdCA, etcdClient, "")

	// The operator reaches a pod at its address, verifying the name the
	// Service's ClusterIP gives it.
	api := must(tenantio.Connect(b.material.PKI.AdminKubeconfig, "127.0.0.1", port, "10.121.0.1", port))
	read := func() apiserver.AuditErrors {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		data, err := api.Metrics(ctx, "127.0.0.1", apiserver.AuditErrorsMetric)
		if err != nil {
			t.Fatalf("reading the apiserver's audit counters as the operator does: %v", err)
		}
		return must(apiserver.ParseAuditErrors(bytes.NewReader(data)))
	}
	before := read()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 5 {
		// Every request is served: mode batch fails none for the webhook.
		_ = must(b.cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "lossy-" + strconv.Itoa(i)}}, metav1.CreateOptions{}))
	}
	var lost apiserver.AuditErrors
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if lost = read().Since(before); lost["webhook"] >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("within 60s of 5 creates, with the collector refusing %d batches, the apiserver counts %v lost", refused.Load(), lost)
		}
	}
	t.Logf("the collector refused %d requests; the operator reads %s", refused.Load(), lost)
}
