package boot

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// nodeBehind is a tenant's apiserver booted as rendered, and a node of
// it that its kubelet (a stand-in serving the tenant CA's certificate for
// 127.0.0.1, as kube-apiserver's --kubelet-certificate-authority wants)
// makes reachable on loopback, with a pod on it. With the proxy, the
// apiserver runs with spec.konnectivity, the konnectivity server beside
// it, and the agent side as the operator publishes it applied in the
// tenant.
type nodeBehind struct {
	ctx context.Context
	// cs is the admin's client of the first apiserver, apiservers that of
	// each.
	cs              *kubernetes.Clientset
	apiservers      []*kubernetes.Clientset
	kubeletRequests *atomic.Int32
	lastKubeletPath *atomic.Value
	// With the proxy: a token of the agents' service account for an
	// audience (its file), an agent run as published with a token file,
	// and the server's log.
	token     func(audience string) string
	agent     func(name, tokenPath string) *exec.Cmd
	serverLog string
	// servers are the konnectivity servers, one per apiserver.
	servers []*konnectivityServer
	// The CA the agents' ConfigMap carries as published, the first
	// apiserver's address, and the certificate it was given for the
	// agents' name.
	agentCA          []byte
	apiserverAddr    string
	agentsAPIServing *pki.KeyPair
}

// newNodeBehind boots the tenant with apiservers apiservers (each with
// its konnectivity server, behind one address for the agents as the
// tenant's Service puts them, when withProxy).
func newNodeBehind(t testing.TB, withProxy bool, apiservers int) *nodeBehind {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	etcdCA := must(pki.NewSelfSignedCA("etcd-ca", ecdsa, 24*time.Hour, now))
	mainEtcd, _, _ := etcdServer(t, dir, "main", etcdCA)
	etcdClient := must(pki.NewSignedCert(etcdCA, pki.EtcdClientCertConfig(), ecdsa, time.Hour, now))
	agentPort := freePort(t)
	var konnectivity *v1alpha1.KonnectivitySpec
	if withProxy {
		// The agents dial the server on loopback, which its certificate
		// names because the spec does.
		konnectivity = &v1alpha1.KonnectivitySpec{Port: int32(agentPort), Agent: v1alpha1.KonnectivityAgentSpec{Host: "127.0.0.1"}}
	}
	cfg := &v1alpha1.ApiServerConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "boot", Namespace: "tenants"},
		Spec: v1alpha1.ApiServerConfigSpec{
			EndpointReconcilerType: v1alpha1.EndpointReconcilerNone,
			Etcd:                   v1alpha1.EtcdSpec{Servers: []string{mainEtcd}, Prefix: "/tenants/boot", TLS: &v1alpha1.EtcdTLS{SecretName: "etcd-client"}},
			ServiceClusterIPRange:  []string{"10.120.0.0/16"},
			Serving:                v1alpha1.ServingSpec{SecurePort: int32(freePort(t))},
			ExtraArgs:              []v1alpha1.ExtraArg{{Name: "bind-address", Value: "127.0.0.1"}},
			Konnectivity:           konnectivity,
		},
	}
	b := boot(t, dir, cfg, etcdCA, etcdClient, "")
	if (b.konnectivity != nil) != withProxy {
		t.Fatalf("the rendered pod runs the konnectivity server: %v, want %v", b.konnectivity != nil, withProxy)
	}
	cs := b.cs
	clients, agentPorts, servers := []*kubernetes.Clientset{cs}, []int{agentPort}, []*konnectivityServer{b.konnectivity}
	for i := 1; i < apiservers; i++ {
		replica := cfg.DeepCopy()
		replica.Spec.Serving.SecurePort = int32(freePort(t))
		if withProxy {
			agentPorts = append(agentPorts, freePort(t))
			replica.Spec.Konnectivity.Port = int32(agentPorts[i])
		}
		replicaDir := filepath.Join(dir, fmt.Sprintf("boot-%d", i))
		if err := os.MkdirAll(replicaDir, 0o700); err != nil {
			t.Fatal(err)
		}
		r := bootReplica(t, replicaDir, replica, etcdCA, etcdClient, b, fmt.Sprintf("boot-%d", i))
		clients = append(clients, r.cs)
		servers = append(servers, r.konnectivity)
	}
	// The address the agents dial: the Service, which sends each
	// connection to one of the servers.
	serviceAgentPort := agentPort
	if len(agentPorts) > 1 {
		serviceAgentPort = roundRobin(t, agentPorts...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)

	// A node's kubelet: it serves a certificate of the tenant's CA for
	// its address, as kube-apiserver's --kubelet-certificate-authority
	// wants, and answers every log request with one line.
	kubeletCert := must(pki.NewSignedCert(b.ca, pki.ServingCertConfig(nil, []net.IP{net.ParseIP("127.0.0.1")}), ecdsa, time.Hour, now))
	var kubeletRequests atomic.Int32
	var lastKubeletPath atomic.Value
	kubelet := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			kubeletRequests.Add(1)
			const line = "a line of the node's kubelet\n"
			w.Header().Set("Content-Length", strconv.Itoa(len(line)))
			_, _ = io.WriteString(w, line)
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
	n := &nodeBehind{ctx: ctx, cs: cs, apiservers: clients, kubeletRequests: &kubeletRequests, lastKubeletPath: &lastKubeletPath, servers: servers}
	if !withProxy {
		return n
	}
	// The agent side as the operator publishes it for the tenant.
	var agentPod *corev1.PodSpec
	var agentConfig *corev1.ConfigMap
	for _, o := range must(apiserver.KonnectivityAgentObjects(b.c, b.material.PKI.KonnectivityCA.CertPEM(), "")) {
		switch o := o.(type) {
		case *corev1.Namespace:
			must(cs.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{}))
		case *corev1.ConfigMap:
			agentConfig = o
		case *corev1.ServiceAccount:
			must(cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{}))
		case *rbacv1.ClusterRoleBinding:
			must(cs.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{}))
		case *rbacv1.Role:
			must(cs.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{}))
		case *rbacv1.RoleBinding:
			must(cs.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{}))
		case *appsv1.DaemonSet:
			agentPod = &o.Spec.Template.Spec
		default:
			t.Fatalf("the agents' manifests hold a %T this test does not apply", o)
		}
	}
	if agentPod == nil || agentConfig == nil {
		t.Fatalf("the agents' manifests hold no DaemonSet (%v) or no ConfigMap (%v)", agentPod != nil, agentConfig != nil)
	}
	agentContainer := &agentPod.Containers[0]
	n.agentCA, n.agentsAPIServing = []byte(agentConfig.Data[apiserver.KonnectivityAgentCAKey]), b.material.PKI.KonnectivityAPIServer
	n.apiserverAddr = fmt.Sprintf("127.0.0.1:%d", cfg.Spec.Serving.SecurePort)

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

	// A token for the audience, or for the apiserver's own when it is "".
	n.token = func(audience string) string {
		var audiences []string
		if audience != "" {
			audiences = []string{audience}
		}
		tr := must(cs.CoreV1().ServiceAccounts(apiserver.KonnectivityAgentNamespace).CreateToken(ctx, apiserver.KonnectivityAgentServiceAccount,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To[int64](3600)}},
			metav1.CreateOptions{}))
		path := filepath.Join(dir, "token-"+cmp.Or(strings.ReplaceAll(audience, "/", "-"), "apiserver"))
		write(t, path, []byte(tr.Status.Token))
		return path
	}
	// The agents' ConfigMap (their kubeconfig and the konnectivity CA,
	// the one CA they trust) where the DaemonSet mounts it, under dir.
	agentConfigDir := filepath.Join(dir, "agent-config")
	var agentConfigMount string
	for _, v := range agentPod.Volumes {
		for _, m := range agentContainer.VolumeMounts {
			if m.Name == v.Name && v.ConfigMap != nil && v.ConfigMap.Name == agentConfig.Name {
				agentConfigMount = m.MountPath
			}
		}
	}
	if agentConfigMount == "" {
		t.Fatalf("the agents do not mount their ConfigMap %s", agentConfig.Name)
	}
	local := func(path string) string {
		return strings.Replace(path, agentConfigMount+"/", agentConfigDir+"/", 1)
	}
	for key, data := range agentConfig.Data {
		write(t, filepath.Join(agentConfigDir, key), []byte(data))
	}
	// The published kubeconfig, but for the apiserver's address (the test
	// has no Service), where the ConfigMap's CA is, and a token of the
	// account for the apiserver's own audience where kubelet's would be;
	// the server name it asks for is the published one.
	agentKubeconfig := must(clientcmd.Load([]byte(agentConfig.Data[apiserver.KonnectivityAgentKubeconfigKey])))
	for _, cluster := range agentKubeconfig.Clusters {
		cluster.Server, cluster.CertificateAuthority = "https://"+n.apiserverAddr, local(cluster.CertificateAuthority)
	}
	apiToken := n.token("")
	for _, user := range agentKubeconfig.AuthInfos {
		user.TokenFile = apiToken
	}
	if err := clientcmd.WriteToFile(*agentKubeconfig, filepath.Join(agentConfigDir, apiserver.KonnectivityAgentKubeconfigKey)); err != nil {
		t.Fatal(err)
	}
	// An agent runs with the rendered command line, but for where its
	// files are, the node's address and ports of the test's.
	n.agent = func(name, tokenPath string) *exec.Cmd {
		healthPort, adminPort := freePort(t), freePort(t)
		args := []string{"--agent-id=" + name}
		for _, a := range agentContainer.Args {
			flag, value, _ := strings.Cut(a, "=")
			switch flag {
			case "--proxy-server-host":
				a = flag + "=127.0.0.1"
			case "--proxy-server-port":
				if a != flag+"="+strconv.Itoa(agentPort) {
					t.Errorf("the agents dial %s, want the server's port %d", a, agentPort)
				}
				a = flag + "=" + strconv.Itoa(serviceAgentPort)
			case "--ca-cert", "--kubeconfig":
				a = flag + "=" + local(value)
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

	n.serverLog = filepath.Join(dir, "konnectivity-server-"+apiserver.KonnectivityVersion+".log")
	return n
}

// waitForLeases waits, a minute at most, until the servers' Leases in the
// tenant are held by the servers holders name, and by no other.
func (n *nodeBehind) waitForLeases(t testing.TB, holders ...string) {
	t.Helper()
	var held []string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(250 * time.Millisecond) {
		leases, err := n.cs.CoordinationV1().Leases(apiserver.KonnectivityLeaseNamespace).List(n.ctx, metav1.ListOptions{LabelSelector: apiserver.KonnectivityLeaseLabel})
		if err == nil {
			held = held[:0]
			for _, l := range leases.Items {
				held = append(held, ptr.Deref(l.Spec.HolderIdentity, ""))
			}
			slices.Sort(held)
		}
		if slices.Equal(held, holders) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the servers' Leases in %s are held by %q (%v), want %q", apiserver.KonnectivityLeaseNamespace, held, err, holders)
		}
	}
}

// logs is kubectl logs of the node's pod, through the first apiserver.
func (n *nodeBehind) logs() (string, error) { return n.logsVia(n.cs) }

// logsVia is kubectl logs of the node's pod through the apiserver of cs.
func (n *nodeBehind) logsVia(cs *kubernetes.Clientset) (string, error) {
	ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	defer cancel()
	out, err := cs.CoreV1().Pods("default").GetLogs("app", &corev1.PodLogOptions{Container: "app"}).DoRaw(ctx)
	return string(out), err
}

// roundRobin listens on a port of loopback and forwards each connection
// to the next of ports in turn, as a Service does to its endpoints; it
// stops with the test.
func roundRobin(t testing.TB, ports ...int) int {
	t.Helper()
	l := must(net.Listen("tcp", "127.0.0.1:0"))
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for next := 0; ; next++ {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go func(port int) {
				defer func() { _ = in.Close() }()
				out, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
				if err != nil {
					return
				}
				defer func() { _ = out.Close() }()
				go func() {
					_, _ = io.Copy(out, in)
					_ = out.(*net.TCPConn).CloseWrite()
				}()
				_, _ = io.Copy(in, out)
			}(ports[next%len(ports)])
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// waitFor asks for the logs until ok says the answer is the one wanted,
// for a minute at most.
func (n *nodeBehind) waitFor(t testing.TB, what string, ok func(string, error) bool) (string, error) {
	t.Helper()
	var out string
	var err error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if out, err = n.logs(); ok(out, err) {
			return out, err
		}
	}
	t.Fatalf("%s: for a minute, kubectl logs gave %q, %v", what, out, err)
	return out, err
}

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
	n := newNodeBehind(t, true, 1)
	// No agent yet: the node is not reachable, although it listens on
	// loopback: kube-apiserver dials it through the server only.
	if out, err := n.logs(); err == nil {
		t.Fatalf("kubectl logs worked with no agent connected (%q): the node was dialed directly", out)
	}
	if n := n.kubeletRequests.Load(); n != 0 {
		t.Fatalf("the kubelet got %d requests with no agent connected", n)
	}
	n.waitForAgents(t, 0)

	// An agent with a token for another audience: the server refuses it,
	// and the node stays unreachable.
	n.agent("agent-wrong-audience", n.token("https://kubernetes.default.svc.cluster.local"))
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(250 * time.Millisecond) {
		// What the server logs when the review says the token is not
		// valid for its audience.
		if data, _ := os.ReadFile(n.serverLog); strings.Contains(grepLines(string(data), "agent-wrong-audience", 100), "lookup failed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server did not refuse the agent whose token is for another audience within a minute")
		}
	}
	if out, err := n.logs(); err == nil {
		t.Fatalf("kubectl logs worked through an agent the server should have refused (%q)", out)
	}
	// What the operator reads of the server counts no refused agent.
	n.waitForAgents(t, 0)

	// The agent of the node, as the tenant runs it: logs go through it.
	nodeAgent := n.agent("agent", n.token(apiserver.KonnectivityAudience))
	out, _ := n.waitFor(t, "with an agent connected", func(_ string, err error) bool { return err == nil })
	if want := "a line of the node's kubelet\n"; out != want {
		t.Errorf("kubectl logs through the agent gave %q, want %q", out, want)
	}
	if path, _ := n.lastKubeletPath.Load().(string); path != "/containerLogs/default/app/app" {
		t.Errorf("the kubelet was asked for %q, want the logs of default/app/app", path)
	}
	if n.kubeletRequests.Load() == 0 {
		t.Error("kubectl logs answered, but the kubelet saw no request")
	}
	n.waitForAgents(t, 1)

	// The server holds a Lease in the tenant, which its agents count: the
	// number of servers is in no flag of the pod.
	n.waitForLeases(t, "boot-0")

	// The agent read those Leases with its published kubeconfig, which
	// trusts the konnectivity CA alone: kube-apiserver answers the name
	// it asks for with its certificate of that CA, re-read from its
	// files, and every other name with its serving certificate of the
	// tenant's CA, which that client refuses.
	agentRoots := x509.NewCertPool()
	if !agentRoots.AppendCertsFromPEM(n.agentCA) {
		t.Fatalf("the agents' ConfigMap carries no CA: %q", n.agentCA)
	}
	conn, err := tls.Dial("tcp", n.apiserverAddr, &tls.Config{RootCAs: agentRoots, ServerName: apiserver.KonnectivityAgentServerName, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("a client trusting only the konnectivity CA cannot reach kube-apiserver as %s: %v", apiserver.KonnectivityAgentServerName, err)
	}
	if got := conn.ConnectionState().PeerCertificates[0]; !got.Equal(n.agentsAPIServing.Cert()) {
		t.Errorf("kube-apiserver answers %s with the certificate of %q issued by %q, want its certificate for the agents", apiserver.KonnectivityAgentServerName, got.Subject, got.Issuer)
	}
	_ = conn.Close()
	if conn, err := tls.Dial("tcp", n.apiserverAddr, &tls.Config{RootCAs: agentRoots, ServerName: "kubernetes.default.svc", MinVersion: tls.VersionTLS12}); err == nil {
		_ = conn.Close()
		t.Error("a client trusting only the konnectivity CA accepts kube-apiserver's serving certificate: the tenant's CA must not be what the agents trust")
	}

	// The agent gone, the node is unreachable again.
	_ = nodeAgent.Process.Kill()
	_, err = n.waitFor(t, "with the agent gone", func(_ string, err error) bool { return err != nil })
	t.Logf("kubectl logs with no agent: %v", err)
	n.waitForAgents(t, 0)
}

// TestRenderedKonnectivity_AgentsCountTheServers runs two apiservers of a
// tenant, each with its konnectivity server as rendered (no server count
// in any flag), behind one address for the agents as the tenant's Service
// puts them, and one agent as published. Each server holds a Lease in the
// tenant; the agent counts them and opens a tunnel to each, so that
// kubectl logs through either apiserver reaches the node. An agent that
// held one tunnel (a count of one) would leave the second apiserver with
// "No agent available".
func TestRenderedKonnectivity_AgentsCountTheServers(t *testing.T) {
	n := newNodeBehind(t, true, 2)
	n.waitForLeases(t, "boot-0", "boot-1")
	start := time.Now()
	n.agent("agent", n.token(apiserver.KonnectivityAudience))
	for i, cs := range n.apiservers {
		var out string
		var err error
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
			if out, err = n.logsVia(cs); err == nil {
				break
			}
		}
		if want := "a line of the node's kubelet\n"; err != nil || out != want {
			t.Errorf("kubectl logs through apiserver boot-%d gave %q, %v for a minute, want %q: the agent holds no tunnel to its server", i, out, err, want)
		}
	}
	t.Logf("one agent, two servers counted by their Leases: logs through both apiservers %s after the agent started", time.Since(start).Round(10*time.Millisecond))
	n.waitForAgents(t, 1)
}

// waitForAgents waits, a minute at most, until the operator's count of
// the agents of each server (tenantio.KonnectivityAgents, on its health
// port as the operator reads a pod's) is want.
func (n *nodeBehind) waitForAgents(t testing.TB, want int32) {
	t.Helper()
	for i, s := range n.servers {
		var got int32
		var err error
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
			if got, err = tenantio.KonnectivityAgents(n.ctx, "127.0.0.1", s.healthPort); err == nil && got == want {
				break
			}
		}
		if err != nil || got != want {
			t.Fatalf("the operator counts %d agents (%v) of the konnectivity server of boot-%d for a minute, want %d", got, err, i, want)
		}
	}
}

// BenchmarkKonnectivityLogs measures kubectl logs of a pod on a node, one
// request per op: dialed directly (direct) and through the konnectivity
// server and an agent (proxy), each against the bundled kube-apiserver as
// rendered; and the agent's resident memory after the run.
func BenchmarkKonnectivityLogs(b *testing.B) {
	for _, tt := range []struct {
		name  string
		proxy bool
	}{{"direct", false}, {"proxy", true}} {
		b.Run(tt.name, func(b *testing.B) {
			n := newNodeBehind(b, tt.proxy, 1)
			var agent *exec.Cmd
			if tt.proxy {
				agent = n.agent("agent", n.token(apiserver.KonnectivityAudience))
			}
			_, _ = n.waitFor(b, "the node reachable", func(_ string, err error) bool { return err == nil })
			took := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				if _, err := n.logs(); err != nil {
					b.Fatalf("kubectl logs: %v", err)
				}
				took = append(took, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
			if agent != nil {
				b.ReportMetric(residentMiB(b, agent.Process.Pid), "agent-rss-MiB")
			}
		})
	}
}

// residentMiB is the resident memory of process pid.
func residentMiB(b *testing.B, pid int) float64 {
	b.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kib, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				b.Fatalf("reading VmRSS of %d: %v", pid, err)
			}
			return kib / 1024
		}
	}
	b.Fatalf("no VmRSS for process %d", pid)
	return 0
}
