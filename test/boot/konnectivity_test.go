package boot

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
)

// TestRenderedKonnectivity_CarriesNodeTrafficThroughAnAgent runs the
// bundled kube-apiserver and upstream's konnectivity server with exactly
// what the operator renders for spec.konnectivity, and upstream's agent with
// the command line, service account and binding the operator publishes for
// the tenant (a bound token of the tenant's kube-system/konnectivity-agent). kubectl logs of a pod on a node reaches
// that node's kubelet (a stand-in serving the tenant CA's certificate)
// through the agent while one is connected, and fails while none is: the
// agent is the path, although the "node" is on loopback. An agent whose
// token is for another audience is refused by the server.
func TestRenderedKonnectivity_CarriesNodeTrafficThroughAnAgent(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	etcdCA := must(pki.NewSelfSignedCA("etcd-ca", ecdsa, 24*time.Hour, now))
	mainEtcd, _, _ := etcdServer(t, dir, "main", etcdCA)
	etcdClient := must(pki.NewSignedCert(etcdCA, pki.EtcdClientCertConfig(), ecdsa, time.Hour, now))
	agentPort := freePort(t)
	cfg := &v1alpha1.ApiServerConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "boot", Namespace: "tenants"},
		Spec: v1alpha1.ApiServerConfigSpec{
			EndpointReconcilerType: v1alpha1.EndpointReconcilerNone,
			Etcd:                   v1alpha1.EtcdSpec{Servers: []string{mainEtcd}, Prefix: "/tenants/boot", TLS: &v1alpha1.EtcdTLS{SecretName: "etcd-client"}},
			ServiceClusterIPRange:  []string{"10.120.0.0/16"},
			Serving:                v1alpha1.ServingSpec{SecurePort: int32(freePort(t))},
			ExtraArgs:              []v1alpha1.ExtraArg{{Name: "bind-address", Value: "127.0.0.1"}},
			Konnectivity:           &v1alpha1.KonnectivitySpec{Port: int32(agentPort)},
		},
	}
	b := boot(t, dir, cfg, etcdCA, etcdClient, "")
	if b.konnectivity == nil {
		t.Fatal("the rendered pod has no konnectivity-server container")
	}
	cs := b.cs
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// A node's kubelet: it serves a certificate of the tenant's CA for
	// its address, as kube-apiserver's --kubelet-certificate-authority
	// wants, and answers every log request with one line.
	kubeletCert := must(pki.NewSignedCert(b.ca, pki.ServingCertConfig(nil, []net.IP{net.ParseIP("127.0.0.1")}), ecdsa, time.Hour, now))
	var kubeletRequests atomic.Int32
	var lastKubeletPath atomic.Value
	kubelet := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			kubeletRequests.Add(1)
			_, _ = io.WriteString(w, "a line of the node's kubelet\n")
			lastKubeletPath.Store(r.URL.Path)
		}),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{must(tls.X509KeyPair(kubeletCert.CertPEM(), must(kubeletCert.KeyPEM())))}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 5 * time.Second,
	}
	kubeletListener := must(net.Listen("tcp", "127.0.0.1:0"))
	go func() { _ = kubelet.ServeTLS(kubeletListener, "", "") }()
	t.Cleanup(func() { _ = kubelet.Close() })
	kubeletPort := kubeletListener.Addr().(*net.TCPAddr).Port

	// The tenant: the node and a pod on it, the agent's service account,
	// and the right of the server's user to review tokens.
	must(cs.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-behind-nat"},
		Status: corev1.NodeStatus{
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(kubeletPort)}},
		},
	}, metav1.CreateOptions{}))
	must(cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}))
	must(cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{
			NodeName:                     "node-behind-nat",
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: "app", Image: "app"}},
		},
	}, metav1.CreateOptions{}))
	// The agent side as the operator publishes it for the tenant.
	var agentContainer *corev1.Container
	for _, o := range apiserver.KonnectivityAgentObjects(b.c, "") {
		switch o := o.(type) {
		case *corev1.ServiceAccount:
			must(cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{}))
		case *rbacv1.ClusterRoleBinding:
			must(cs.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{}))
		case *appsv1.DaemonSet:
			agentContainer = &o.Spec.Template.Spec.Containers[0]
		default:
			t.Fatalf("the agents' manifests hold a %T this test does not apply", o)
		}
	}
	if agentContainer == nil {
		t.Fatal("the agents' manifests hold no DaemonSet")
	}

	// The binding in force before any agent connects: a refusal for want
	// of it would look like the refusal of a token below.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		sar := must(cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               apiserver.KonnectivityServerUser,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Group: "authentication.k8s.io", Resource: "tokenreviews", Verb: "create"},
		}}, metav1.CreateOptions{}))
		if sar.Status.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("system:konnectivity-server may not review tokens a minute after its binding: %s", sar.Status.Reason)
		}
	}

	logs := func() (string, error) {
		reqCtx, reqCancel := context.WithTimeout(ctx, 10*time.Second)
		defer reqCancel()
		out, err := cs.CoreV1().Pods("default").GetLogs("app", &corev1.PodLogOptions{Container: "app"}).DoRaw(reqCtx)
		return string(out), err
	}
	// waitFor asks for the logs until ok says the answer is the one
	// wanted, for a minute at most.
	waitFor := func(what string, ok func(string, error) bool) (string, error) {
		t.Helper()
		var out string
		var err error
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
			if out, err = logs(); ok(out, err) {
				return out, err
			}
		}
		t.Fatalf("%s: for a minute, kubectl logs gave %q, %v", what, out, err)
		return out, err
	}

	// No agent yet: the node is not reachable, although it listens on
	// loopback: kube-apiserver dials it through the server only.
	if out, err := logs(); err == nil {
		t.Fatalf("kubectl logs worked with no agent connected (%q): the node was dialed directly", out)
	}
	if n := kubeletRequests.Load(); n != 0 {
		t.Fatalf("the kubelet got %d requests with no agent connected", n)
	}

	token := func(audience string) string {
		tr := must(cs.CoreV1().ServiceAccounts(apiserver.KonnectivityAgentNamespace).CreateToken(ctx, apiserver.KonnectivityAgentServiceAccount,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: ptr.To[int64](3600)}},
			metav1.CreateOptions{}))
		path := filepath.Join(dir, "token-"+strings.ReplaceAll(audience, ":", "-"))
		write(t, path, []byte(tr.Status.Token))
		return path
	}
	caFile := filepath.Join(dir, "agent-ca.crt")
	write(t, caFile, b.ca.CertPEM())
	// An agent runs with the rendered command line, but for where its
	// files are, the node's address and ports of the test's.
	agent := func(name, tokenPath string) *exec.Cmd {
		healthPort, adminPort := freePort(t), freePort(t)
		args := []string{"--agent-id=" + name}
		for _, a := range agentContainer.Args {
			flag, _, _ := strings.Cut(a, "=")
			switch flag {
			case "--proxy-server-host":
				a = flag + "=127.0.0.1"
			case "--proxy-server-port":
				if a != flag+"="+strconv.Itoa(agentPort) {
					t.Errorf("the agents dial %s, want the server's port %d", a, agentPort)
				}
			case "--ca-cert":
				a = flag + "=" + caFile
			case "--service-account-token-path":
				a = flag + "=" + tokenPath
			case "--health-server-port":
				a = flag + "=" + strconv.Itoa(healthPort)
			case "--admin-server-port":
				a = flag + "=" + strconv.Itoa(adminPort)
			}
			args = append(args, strings.ReplaceAll(a, "$(HOST_IP)", "127.0.0.1"))
		}
		return startLogged(t, dir, "konnectivity-agent-"+apiserver.KonnectivityVersion, name, args...)
	}

	// An agent with a token for another audience: the server refuses it,
	// and the node stays unreachable.
	agent("agent-wrong-audience", token("https://kubernetes.default.svc.cluster.local"))
	serverLog := filepath.Join(dir, "konnectivity-server-"+apiserver.KonnectivityVersion+".log")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(250 * time.Millisecond) {
		// What the server logs when the review says the token is not
		// valid for its audience.
		if data, _ := os.ReadFile(serverLog); strings.Contains(grepLines(string(data), "agent-wrong-audience", 100), "lookup failed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server did not refuse the agent whose token is for another audience within a minute")
		}
	}
	if out, err := logs(); err == nil {
		t.Fatalf("kubectl logs worked through an agent the server should have refused (%q)", out)
	}

	// The agent of the node, as the tenant runs it: logs go through it.
	nodeAgent := agent("agent", token(apiserver.KonnectivityAudience))
	out, _ := waitFor("with an agent connected", func(_ string, err error) bool { return err == nil })
	if want := "a line of the node's kubelet\n"; out != want {
		t.Errorf("kubectl logs through the agent gave %q, want %q", out, want)
	}
	if path, _ := lastKubeletPath.Load().(string); path != "/containerLogs/default/app/app" {
		t.Errorf("the kubelet was asked for %q, want the logs of default/app/app", path)
	}
	if kubeletRequests.Load() == 0 {
		t.Error("kubectl logs answered, but the kubelet saw no request")
	}

	// The agent gone, the node is unreachable again.
	_ = nodeAgent.Process.Kill()
	_, err := waitFor("with the agent gone", func(_ string, err error) bool { return err != nil })
	t.Logf("kubectl logs with no agent: %v", err)
}
