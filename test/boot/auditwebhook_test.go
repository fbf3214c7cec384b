package boot

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
)

// auditReceiver is an audit webhook: an HTTPS server on 127.0.0.1 with a
// CA of its own, which keeps every batch kube-apiserver POSTs to it.
type auditReceiver struct {
	kubeconfig []byte
	mu         sync.Mutex
	batches    []auditv1.EventList
	// malformed are the requests that were not an audit.k8s.io/v1
	// EventList.
	malformed []string
}

func newAuditReceiver(t *testing.T) *auditReceiver {
	t.Helper()
	now := time.Now()
	ca := must(pki.NewSelfSignedCA("audit-webhook-ca", ecdsa, time.Hour, now))
	serving := must(pki.NewSignedCert(ca, pki.ServingCertConfig([]string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}), ecdsa, time.Hour, now))
	r := &auditReceiver{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var list auditv1.EventList
		if err == nil {
			err = json.Unmarshal(body, &list)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil || req.Method != http.MethodPost || list.Kind != "EventList" || list.APIVersion != auditv1.SchemeGroupVersion.String() {
			r.malformed = append(r.malformed, fmt.Sprintf("%s %s (%v): %.200s", req.Method, req.URL, err, body))
			http.Error(w, "not an EventList", http.StatusBadRequest)
			return
		}
		r.batches = append(r.batches, list)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{serving.Cert().Raw}, PrivateKey: serving.Key()}}}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["audit"] = &clientcmdapi.Cluster{Server: srv.URL + "/audit", CertificateAuthorityData: ca.CertPEM()}
	kubeconfig.AuthInfos["apiserver"] = &clientcmdapi.AuthInfo{}
	kubeconfig.Contexts["audit"] = &clientcmdapi.Context{Cluster: "audit", AuthInfo: "apiserver"}
	kubeconfig.CurrentContext = "audit"
	r.kubeconfig = must(clientcmd.Write(*kubeconfig))
	return r
}

// created finds the audit event of the creation of the ConfigMap
// namespace/name, and reports how many batches came in all.
func (r *auditReceiver) created(namespace, name string) (*auditv1.Event, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.batches {
		for i, e := range b.Items {
			if ref := e.ObjectRef; e.Verb == "create" && ref != nil && ref.Resource == "configmaps" && ref.Namespace == namespace && ref.Name == name {
				return &b.Items[i], len(r.batches)
			}
		}
	}
	return nil, len(r.batches)
}

// largestBatch is the most events one batch carried.
func (r *auditReceiver) largestBatch() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, b := range r.batches {
		n = max(n, len(b.Items))
	}
	return n
}

// A tenant with spec.audit.webhook sends its audit events, as the bundled
// kube-apiserver runs with the rendered flags and the kubeconfig mounted
// where they point, to the webhook that kubeconfig names, over TLS with
// the webhook's own CA, while the log goes on: in mode batch as an
// EventList within a bounded wait; in mode blocking before the request is
// answered.
func TestRenderedAPIServer_SendsAuditEventsToTheWebhook(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	etcdCA := must(pki.NewSelfSignedCA("etcd-ca", ecdsa, 24*time.Hour, now))
	etcd, _, _ := etcdServer(t, dir, "main", etcdCA)
	etcdClient := must(pki.NewSignedCert(etcdCA, pki.EtcdClientCertConfig(), ecdsa, time.Hour, now))

	for _, mode := range []v1alpha1.AuditWebhookMode{v1alpha1.AuditWebhookBatch, v1alpha1.AuditWebhookBlocking} {
		t.Run(string(mode), func(t *testing.T) {
			receiver := newAuditReceiver(t)
			podDir := filepath.Join(dir, string(mode))
			// The user's Secret, where the pod mounts it.
			write(t, filepath.Join(podDir, apiserver.AuditWebhookKubeconfigFile), receiver.kubeconfig)
			webhook := &v1alpha1.AuditWebhookSpec{KubeconfigSecretName: "audit-webhook", Mode: mode}
			if mode == v1alpha1.AuditWebhookBatch {
				// A batch is sent at the latest a second after its first
				// event, rather than kube-apiserver's 30 s.
				webhook.Batch = &v1alpha1.AuditWebhookBatchSpec{MaxWait: &metav1.Duration{Duration: time.Second}}
			}
			cfg := &v1alpha1.ApiServerConfig{
				ObjectMeta: metav1.ObjectMeta{Name: "audited-" + string(mode), Namespace: "tenants"},
				Spec: v1alpha1.ApiServerConfigSpec{
					EndpointReconcilerType: v1alpha1.EndpointReconcilerNone,
					Etcd: v1alpha1.EtcdSpec{Servers: []string{etcd}, Prefix: "/tenants/audited-" + string(mode),
						TLS: &v1alpha1.EtcdTLS{SecretName: "etcd-client"}},
					ServiceClusterIPRange: []string{"10.120.0.0/16"},
					Serving:               v1alpha1.ServingSpec{SecurePort: int32(freePort(t))},
					ExtraArgs:             []v1alpha1.ExtraArg{{Name: "bind-address", Value: "127.0.0.1"}},
					Audit:                 v1alpha1.AuditSpec{Webhook: webhook},
				},
			}
			b := boot(t, podDir, cfg, etcdCA, etcdClient, "")
			for _, want := range []string{"--audit-webhook-config-file=" + apiserver.AuditWebhookKubeconfigFile, "--audit-webhook-mode=" + string(mode)} {
				if !slices.Contains(b.args, want) {
					t.Fatalf("the rendered command line lacks %s: %v", want, b.args)
				}
			}

			name := "audited-" + string(mode)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = must(b.cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}))
			if mode == v1alpha1.AuditWebhookBlocking {
				// The request waited for its event to be sent.
				if e, n := receiver.created("default", name); e == nil {
					t.Errorf("mode blocking: the create was answered before its audit event reached the webhook (%d batches so far)", n)
				}
			}
			var event *auditv1.Event
			batches := 0
			for deadline := time.Now().Add(30 * time.Second); event == nil; time.Sleep(200 * time.Millisecond) {
				if event, batches = receiver.created("default", name); event == nil && time.Now().After(deadline) {
					t.Fatalf("within 30s the webhook got %d batches (malformed: %v), none with the creation of ConfigMap default/%s", batches, receiver.malformed, name)
				}
			}
			if event.Stage != auditv1.StageResponseComplete || event.Level != auditv1.LevelMetadata || event.ResponseStatus == nil || event.ResponseStatus.Code != http.StatusCreated {
				t.Errorf("the event of the create is stage %s, level %s, response %+v; want ResponseComplete, Metadata (the default policy), 201", event.Stage, event.Level, event.ResponseStatus)
			}
			if len(receiver.malformed) > 0 {
				t.Errorf("the webhook got requests that are not an audit.k8s.io/v1 EventList: %v", receiver.malformed)
			}
			if mode == v1alpha1.AuditWebhookBatch && receiver.largestBatch() < 2 {
				t.Errorf("mode batch: every one of %d batches carried one event", batches)
			}
			t.Logf("mode %s: the creation of ConfigMap default/%s reached the webhook (%d batches)", mode, name, batches)
			// It came through the pod's egress filter, as every call but
			// etcd's does.
			if n := b.egressDialed.total(); n == 0 {
				t.Errorf("mode %s: the events reached the webhook, but not through the egress filter", mode)
			}

			// The log goes on beside the webhook.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				log, _ := os.ReadFile(b.root(apiserver.AuditLogFile))
				if strings.Contains(string(log), `"name":"`+name+`"`) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("within 10s the audit log did not record the creation of ConfigMap default/%s", name)
				}
			}
		})
	}
}
