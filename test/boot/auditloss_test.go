package boot

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
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

// auditedTenant boots the bundled kube-apiserver with an audit webhook
// that refuses every batch (refuse) or takes it, and returns it, with a
// read of its audit counters as the operator's audit watch reads them
// (tenantio, at the pod's address) and how many batches the collector got.
func auditedTenant(tb testing.TB, refuse bool) (*booted, func() apiserver.AuditErrors, *atomic.Int64) {
	tb.Helper()
	dir := tb.TempDir()
	now := time.Now()
	etcdCA := must(pki.NewSelfSignedCA("etcd-ca", ecdsa, 24*time.Hour, now))
	etcd, _, _ := etcdServer(tb, dir, "main", etcdCA)
	etcdClient := must(pki.NewSignedCert(etcdCA, pki.EtcdClientCertConfig(), ecdsa, time.Hour, now))

	// A collector that refuses every batch, or takes it.
	ca := must(pki.NewSelfSignedCA("audit-webhook-ca", ecdsa, time.Hour, now))
	serving := must(pki.NewSignedCert(ca, pki.ServingCertConfig([]string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}), ecdsa, time.Hour, now))
	batches := &atomic.Int64{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		batches.Add(1)
		if refuse {
			http.Error(w, "the collector is down", http.StatusInternalServerError)
			return
		}
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{serving.Cert().Raw}, PrivateKey: serving.Key()}}}
	srv.StartTLS()
	tb.Cleanup(srv.Close)
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["audit"] = &clientcmdapi.Cluster{Server: srv.URL, CertificateAuthorityData: ca.CertPEM()}
	kubeconfig.AuthInfos["apiserver"] = &clientcmdapi.AuthInfo{}
	kubeconfig.Contexts["audit"] = &clientcmdapi.Context{Cluster: "audit", AuthInfo: "apiserver"}
	kubeconfig.CurrentContext = "audit"
	write(tb, filepath.Join(dir, "pod", apiserver.AuditWebhookKubeconfigFile), must(clientcmd.Write(*kubeconfig)))

	port := int32(freePort(tb))
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
	b := boot(tb, filepath.Join(dir, "pod"), cfg, etcdCA, etcdClient, "")

	// The operator reaches a pod at its address, verifying the name the
	// Service's ClusterIP gives it.
	api := must(tenantio.Connect(b.material.PKI.AdminKubeconfig, "127.0.0.1", port, "10.121.0.1", port))
	read := func() apiserver.AuditErrors {
		tb.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		data, err := api.Metrics(ctx, "127.0.0.1", apiserver.AuditErrorsMetric)
		if err != nil {
			tb.Fatalf("reading the apiserver's audit counters as the operator does: %v", err)
		}
		return must(apiserver.ParseAuditErrors(bytes.NewReader(data)))
	}
	return b, read, batches
}

// TestRenderedAPIServer_CountsAuditEventsTheWebhookRefuses: a webhook
// that answers 500 makes the bundled kube-apiserver, in mode batch, give
// up on the events after its retries, without failing a request; the
// operator's own reader (tenantio, as the audit watch reads each
// apiserver) then finds them in apiserver_audit_error_total, plugin
// webhook, which is what the AuditDelivered condition reports.
func TestRenderedAPIServer_CountsAuditEventsTheWebhookRefuses(t *testing.T) {
	b, read, refused := auditedTenant(t, true)
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

// BenchmarkAuditRead is the cost of one read of the audit watch (one GET
// of a real kube-apiserver's /metrics through tenantio, filtered and
// parsed as the watch does): the operator's CPU per read, the bytes of
// the apiserver's whole /metrics and of what one read asks for (the one
// family, by name[]), and the apiserver's CPU per read. The test process also runs the pod's etcd
// dialer and the collector: their CPU over an idle period as long as the
// reads is taken off. millicores@10k is the operator's CPU for 10 000
// tenants of 2 apiservers each read every 5 minutes (67 reads a second).
func BenchmarkAuditRead(b *testing.B) {
	booted, read, _ := auditedTenant(b, false)
	raw := must(booted.cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background()))
	filtered := must(booted.cs.RESTClient().Get().AbsPath("/metrics").Param("name[]", apiserver.AuditErrorsMetric).DoRaw(context.Background()))
	processCPU := func() time.Duration {
		var u syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &u)
		return time.Duration(u.Utime.Nano() + u.Stime.Nano())
	}
	apiserverCPU := func() time.Duration {
		b.Helper()
		stat := must(os.ReadFile(fmt.Sprintf("/proc/%d/stat", booted.process.Process.Pid)))
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
		utime, _ := strconv.ParseInt(fields[11], 10, 64)
		stime, _ := strconv.ParseInt(fields[12], 10, 64)
		return time.Duration(utime+stime) * 10 * time.Millisecond // USER_HZ is 100
	}
	cpu0, server0, start := processCPU(), apiserverCPU(), time.Now()
	b.ResetTimer()
	for range b.N {
		read()
	}
	b.StopTimer()
	took := time.Since(start)
	cpu1, server1 := processCPU(), apiserverCPU()
	time.Sleep(took) // idle: the dialer's and the apiserver's own work
	cpu2, server2 := processCPU(), apiserverCPU()
	perRead := float64(max((cpu1-cpu0)-(cpu2-cpu1), 0).Microseconds()) / float64(b.N) / 1e3
	serverPerRead := float64(max((server1-server0)-(server2-server1), 0).Microseconds()) / float64(b.N) / 1e3
	b.ReportMetric(perRead, "cpu-ms/read")
	b.ReportMetric(serverPerRead, "apiserver-cpu-ms/read")
	b.ReportMetric(float64(len(raw))/1024, "metrics-KiB")
	b.ReportMetric(float64(len(filtered))/1024, "read-KiB")
	b.ReportMetric(67*perRead, "millicores@10k")
}
