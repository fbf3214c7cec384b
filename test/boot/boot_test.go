// Package boot runs the bundled kube-apiserver with exactly the command line,
// PKI and configuration files the operator renders, against two real etcd
// servers over mutual TLS, and checks what a user of the tenant would see.
package boot

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/etcddialer"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
	"github.com/apiserver-operator/apiserver-operator/test/envtest"
	"github.com/apiserver-operator/apiserver-operator/test/testport"
)

const ecdsa = pki.KeyAlgorithmECDSAP256

// freePort is a port that stays free for the test: etcd once lost a port
// chosen by "listen on :0 and close" to another process under load.
func freePort(t testing.TB) int {
	t.Helper()
	return testport.Get(t)
}

func write(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatalf("writing %s: %v", path, err)
	}
}

// must returns v, or fails the test (by a panic, which the testing
// package reports with the stack) when err is set.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// start runs a bundled binary until the test ends, its output in a log file
// that is printed if the test fails.
func start(t testing.TB, dir, name string, args ...string) *exec.Cmd {
	t.Helper()
	return startLogged(t, dir, name, name, args...)
}

// startLogged is start with a log of another name (two etcds).
func startLogged(t testing.TB, dir, name, logName string, args ...string) *exec.Cmd {
	t.Helper()
	logPath := filepath.Join(dir, logName+".log")
	logFile := must(os.Create(logPath))
	cmd := exec.Command(filepath.Join(envtest.RepoRoot(), "bin", name), args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s (run make bundled): %v", name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logFile.Close()
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("%s output (last 3000 bytes):\n%s", logName, tail(out, 3000))
		}
	})
	return cmd
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// etcdServer starts an etcd that requires client certificates signed by ca;
// it returns its URL, its process and how to start it again on the same
// address and data.
func etcdServer(t testing.TB, dir, name string, ca *pki.KeyPair) (string, *exec.Cmd, func() *exec.Cmd) {
	t.Helper()
	now := time.Now()
	serving := must(pki.NewSignedCert(ca, pki.ServingCertConfig([]string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}), ecdsa, time.Hour, now))
	certDir := filepath.Join(dir, name+"-tls")
	write(t, filepath.Join(certDir, "ca.crt"), ca.CertPEM())
	write(t, filepath.Join(certDir, "server.crt"), serving.CertPEM())
	write(t, filepath.Join(certDir, "server.key"), must(serving.KeyPEM()))
	client := fmt.Sprintf("https://127.0.0.1:%d", freePort(t))
	peer := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	args := []string{"--name=" + name, "--data-dir=" + filepath.Join(dir, name+"-data"),
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=" + name + "=" + peer,
		"--cert-file=" + filepath.Join(certDir, "server.crt"), "--key-file=" + filepath.Join(certDir, "server.key"),
		"--client-cert-auth", "--trusted-ca-file=" + filepath.Join(certDir, "ca.crt"),
		"--log-level=warn"}
	starts := 0
	run := func() *exec.Cmd {
		starts++
		return startLogged(t, dir, "etcd", fmt.Sprintf("etcd-%s-%d", name, starts), args...)
	}
	return client, run(), run
}

// dialCounter is the etcd dialer's Dial, counting the dials that failed
// and succeeded for each address.
type dialCounter struct {
	mu     sync.Mutex
	counts map[string]dials
}

type dials struct{ ok, failed int }

// testNodeIP stands for the address of the node the apiserver's pod runs
// on, which its egress filter refuses.
const testNodeIP = "127.0.0.2"

// total is the number of successful dials, to any address.
func (d *dialCounter) total() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.counts {
		n += c.ok
	}
	return n
}

func (d *dialCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.counts == nil {
		d.counts = map[string]dials{}
	}
	n := d.counts[addr]
	if err != nil {
		n.failed++
	} else {
		n.ok++
	}
	d.counts[addr] = n
	return conn, err
}

func (d *dialCounter) of(addr string) dials {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.counts[addr]
}

// booted is a kube-apiserver started by boot.
type booted struct {
	c              *apiserver.Completed
	encryptionKeys apiserver.EncryptionKeys
	// root maps a path of the pod to where the test wrote it.
	root      func(string) string
	base      string
	anonymous *http.Client
	cs        *kubernetes.Clientset
	dialed    *dialCounter
	// egressDialed counts the egress filter's dials: every call but
	// etcd's.
	egressDialed *dialCounter
	// args is the command line the operator rendered.
	args []string
	// ca is the cluster CA.
	ca *pki.KeyPair
	// konnectivity is the konnectivity server sidecar, when the spec
	// has one.
	konnectivity *konnectivityServer
	// material and admin are what another apiserver of the tenant runs
	// with (bootReplica).
	material apiserver.Material
	admin    *pki.KeyPair
	etcdUser string
	// process is kube-apiserver's.
	process *exec.Cmd
}

// konnectivityServer is the konnectivity server as boot started it.
type konnectivityServer struct {
	cmd        *exec.Cmd
	args       []string
	healthPort int
	socket     string
}

// boot runs the bundled kube-apiserver of cfg with exactly what the
// operator renders (its PKI made here, encryption at rest as a new tenant
// gets it), reaching etcd through the etcd dialer with etcdClient, a
// certificate of etcdCA, and waits until it is ready. etcdUser, when set,
// is the tenant's etcd user on a datastore, whose certificate etcdClient
// then is, as the operator renders such a tenant.
func boot(t testing.TB, dir string, cfg *v1alpha1.ApiServerConfig, etcdCA, etcdClient *pki.KeyPair, etcdUser string) *booted {
	t.Helper()
	return bootPod(t, dir, cfg, apiserver.Environment{}, etcdCA, etcdClient, etcdUser, nil, "boot-0")
}

// bootReplica runs another apiserver of the tenant first is: cfg is its
// spec but for the ports, the material (PKI, encryption keys) and etcd
// user are first's, and podName is its pod's name (its konnectivity
// server's ID).
func bootReplica(t testing.TB, dir string, cfg *v1alpha1.ApiServerConfig, etcdCA, etcdClient *pki.KeyPair, first *booted, podName string) *booted {
	t.Helper()
	return bootPod(t, dir, cfg, apiserver.Environment{}, etcdCA, etcdClient, first.etcdUser, first, podName)
}

// bootPod is boot and bootReplica, rendering with env: what the operator
// read besides the spec, such as the CAs of the JWT issuers.
func bootPod(t testing.TB, dir string, cfg *v1alpha1.ApiServerConfig, env apiserver.Environment, etcdCA, etcdClient *pki.KeyPair, etcdUser string, first *booted, podName string) *booted {
	t.Helper()
	now := time.Now()
	if errs, _ := apiserver.Validate(cfg); len(errs) > 0 {
		t.Fatalf("the test spec is invalid: %v", errs.ToAggregate())
	}
	c := must(apiserver.Complete(cfg, apiserver.Inputs{EtcdUser: etcdUser}))
	root := func(path string) string { return filepath.Join(dir, path) }
	var material apiserver.Material
	var admin *pki.KeyPair
	if first != nil {
		material, admin = first.material, first.admin
	} else {
		// Encryption at rest as a new tenant gets it.
		encryptionKeys, _, encErr := apiserver.NewEncryptionKeys(c.Spec.Encryption, false)
		if encErr != nil {
			t.Fatal(encErr)
		}
		// The PKI, written below at the paths the flags name, under dir
		// instead of /.
		alg := c.Spec.Certificates.KeyAlgorithm
		ca := must(pki.NewSelfSignedCA("kubernetes", alg, 24*time.Hour, now))
		serving := must(pki.NewSignedCert(ca, pki.ServingCertConfig(c.SANs.DNSNames, c.SANs.IPs), alg, time.Hour, now))
		kubeletClient := must(pki.NewSignedCert(ca, pki.KubeletClientCertConfig(), alg, time.Hour, now))
		frontProxyCA := must(pki.NewSelfSignedCA("front-proxy-ca", alg, 24*time.Hour, now))
		frontProxyClient := must(pki.NewSignedCert(frontProxyCA, pki.FrontProxyClientCertConfig(), alg, time.Hour, now))
		sa := must(pki.NewServiceAccountKey(alg))
		admin = must(pki.NewSignedCert(ca, pki.AdminCertConfig(), alg, time.Hour, now))
		caBundle := pki.TrustBundle(now, ca.Cert())
		var konnectivityCA, konnectivityServing, konnectivityAPIServer, konnectivityClient *pki.KeyPair
		if cfg.Spec.Konnectivity != nil {
			konnectivityCA = must(pki.NewSelfSignedCA(apiserver.KonnectivityCACommonName, alg, 24*time.Hour, now))
			konnectivityServing = must(pki.NewSignedCert(konnectivityCA, apiserver.KonnectivityServingCertConfig(c), alg, time.Hour, now))
			konnectivityAPIServer = must(pki.NewSignedCert(konnectivityCA, apiserver.KonnectivityAPIServerCertConfig(), alg, time.Hour, now))
			konnectivityClient = must(pki.NewSignedCert(ca, apiserver.KonnectivityServerCertConfig(), alg, time.Hour, now))
		}
		material = apiserver.Material{
			PKI: apiserver.PKISecrets{
				CA: ca, CABundle: caBundle, Serving: serving, KubeletClient: kubeletClient,
				FrontProxyCA: frontProxyCA, FrontProxyCABundle: pki.TrustBundle(now, frontProxyCA.Cert()), FrontProxyClient: frontProxyClient,
				ServiceAccountSigningKey: must(sa.PrivateKeyPEM()), ServiceAccountPublicKeys: must(pki.PublicKeysPEM(sa.Public())),
				AdminKubeconfig: must(pki.AdminKubeconfig(cfg.Name, c.Endpoint, caBundle, admin.CertPEM(), must(admin.KeyPEM()))),
				EtcdClient:      etcdClient, EtcdCA: etcdCA.CertPEM(),
				KonnectivityCA: konnectivityCA, KonnectivityServing: konnectivityServing, KonnectivityAPIServer: konnectivityAPIServer, KonnectivityClient: konnectivityClient,
			},
			Encryption: &apiserver.EncryptionMaterial{Keys: encryptionKeys},
		}
	}
	ca, encryptionKeys := material.PKI.CA, material.Encryption.Keys
	objs := must(apiserver.Desired(c, material, env))
	rendered := slices.Clone(objs.Args)
	args := objs.Args
	// The user's etcd client Secret.
	for path, data := range map[string][]byte{
		apiserver.EtcdCAFile:   etcdCA.CertPEM(),
		apiserver.EtcdCertFile: etcdClient.CertPEM(),
		apiserver.EtcdKeyFile:  must(etcdClient.KeyPEM()),
	} {
		write(t, root(path), data)
	}
	// kube-apiserver reaches both etcds through the etcd dialer, as in its
	// pod; its socket is in a directory of a short path (a socket's path
	// has at most 107 bytes).
	socketDir := must(os.MkdirTemp("", "dialer"))
	t.Cleanup(func() { _ = os.RemoveAll(socketDir) })
	socket := filepath.Join(socketDir, "etcd.sock")
	dialed := &dialCounter{}
	dialerCtx, stopDialer := context.WithCancel(context.Background())
	t.Cleanup(stopDialer)
	dialer := &etcddialer.Server{Allowed: c.Etcd.Addresses, Dial: dialed.dial}
	go func() { _ = dialer.Serve(dialerCtx, must(etcddialer.Listen(socket))) }()

	// The egress filter, beside it: every call kube-apiserver makes but
	// etcd's goes through it (webhooks, issuers, audit), as in its pod.
	// The test's servers listen on 127.0.0.1, which the platform allows
	// here; 127.0.0.2 stands for the node.
	egressSocket := filepath.Join(socketDir, "egress.sock")
	egressDialed := &dialCounter{}
	filter := &etcddialer.EgressFilter{
		Denied:  append([]etcddialer.DeniedRange{{Prefix: netip.MustParsePrefix(testNodeIP + "/32"), Why: "an address of the node this apiserver runs on"}}, etcddialer.DefaultDeniedRanges()...),
		Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		Dial:    egressDialed.dial,
	}
	go func() { _ = filter.Serve(dialerCtx, must(etcddialer.Listen(egressSocket))) }()
	clusterSocket := filepath.Join(socketDir, "egress-cluster.sock")
	clusterFilter := &etcddialer.EgressFilter{Denied: filter.Denied, Allowed: filter.Allowed, Dial: egressDialed.dial}
	go func() { _ = clusterFilter.Serve(dialerCtx, must(etcddialer.Listen(clusterSocket))) }()

	// The konnectivity server's socket, beside the dialer's.
	konnectivitySocket := filepath.Join(socketDir, "konnectivity.sock")

	// The files of the operator's objects, where the pods mount them.
	for path, data := range objs.PodFiles(c, nil) {
		if path == apiserver.EgressSelectorConfigFile {
			data = bytes.ReplaceAll(data, []byte(apiserver.EtcdDialerSocket), []byte(socket))
			data = bytes.ReplaceAll(data, []byte(apiserver.EgressFilterSocket), []byte(egressSocket))
			data = bytes.ReplaceAll(data, []byte(apiserver.EgressClusterSocket), []byte(clusterSocket))
			data = bytes.ReplaceAll(data, []byte(apiserver.KonnectivitySocket), []byte(konnectivitySocket))
		}
		if path == apiserver.KonnectivityKubeconfigFile {
			data = bytes.ReplaceAll(data, []byte(apiserver.KonnectivityServerDir+"/"), []byte(root(apiserver.KonnectivityServerDir)+"/"))
		}
		if len(data) > 0 {
			write(t, root(path), data)
		}
	}

	// The konnectivity server sidecar, with its rendered command line, its
	// files under dir, and ports of the test's instead of its fixed admin
	// and health ports.
	var konnectivity *konnectivityServer
	for _, ctr := range objs.Deployment.Spec.Template.Spec.InitContainers {
		if ctr.Name != apiserver.KonnectivityServerContainer {
			continue
		}
		konnectivity = &konnectivityServer{healthPort: freePort(t), socket: konnectivitySocket}
		adminPort := freePort(t)
		var kargs []string
		for _, a := range ctr.Args {
			a = strings.ReplaceAll(a, "$(POD_NAME)", podName)
			a = strings.ReplaceAll(a, "="+apiserver.KonnectivityServerDir+"/", "="+root(apiserver.KonnectivityServerDir)+"/")
			a = strings.ReplaceAll(a, "="+apiserver.KonnectivitySocket, "="+konnectivitySocket)
			a = strings.ReplaceAll(a, fmt.Sprintf("--admin-port=%d", apiserver.KonnectivityAdminPort), fmt.Sprintf("--admin-port=%d", adminPort))
			a = strings.ReplaceAll(a, fmt.Sprintf("--health-port=%d", apiserver.KonnectivityHealthPort), fmt.Sprintf("--health-port=%d", konnectivity.healthPort))
			kargs = append(kargs, a)
		}
		konnectivity.args = kargs
		konnectivity.cmd = start(t, dir, "konnectivity-server-"+apiserver.KonnectivityVersion, kargs...)
	}
	for i, a := range args {
		a = strings.ReplaceAll(a, "$("+apiserver.PodIPEnv+")", "127.0.0.1")
		a = strings.ReplaceAll(a, "=/etc/kubernetes/", "="+root("/etc/kubernetes")+"/")
		// A certificate and key: --tls-sni-cert-key=cert,key:name.
		a = strings.ReplaceAll(a, ",/etc/kubernetes/", ","+root("/etc/kubernetes")+"/")
		args[i] = strings.ReplaceAll(a, "=/var/log/kubernetes/", "="+root("/var/log/kubernetes")+"/")
	}
	process := start(t, dir, "kube-apiserver", args...)

	// What kubelet's probes see: the health endpoints answer without
	// credentials although anonymous access is off.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pki.TrustBundle(now, ca.Cert()))
	anonymous := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "kubernetes.default.svc"}}}
	base := fmt.Sprintf("https://127.0.0.1:%d", cfg.Spec.Serving.SecurePort)
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := anonymous.Get(base + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver was not ready within 90s (last: %v)", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Every etcd connection went through the dialer.
	for _, addr := range c.Etcd.Addresses {
		if dialed.of(addr).ok == 0 {
			t.Errorf("kube-apiserver is ready, but never reached etcd %s through the etcd dialer", addr)
		}
	}
	for path, want := range map[string]int{"/livez": 200, "/healthz": 200, "/api/v1/namespaces": 401} {
		resp, err := anonymous.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("anonymous GET %s: status %d, want %d", path, resp.StatusCode, want)
		}
	}

	// What the admin sees with the kubeconfig the operator hands out.
	kubeconfig := must(pki.AdminKubeconfig("boot", base, pki.TrustBundle(now, ca.Cert()), admin.CertPEM(), must(admin.KeyPEM())))
	restConfig := must(clientcmd.RESTConfigFromKubeConfig(kubeconfig))
	// Unthrottled: client-go's 5 requests a second would be what a
	// benchmark measures.
	restConfig.QPS, restConfig.Burst = -1, 0
	cs := must(kubernetes.NewForConfig(restConfig))
	return &booted{c: c, encryptionKeys: encryptionKeys, root: root, base: base, anonymous: anonymous, cs: cs, dialed: dialed, egressDialed: egressDialed, args: rendered,
		ca: ca, konnectivity: konnectivity, material: material, admin: admin, etcdUser: etcdUser, process: process}
}

func TestRenderedAPIServer_BootsAndServesWithEtcdOverrides(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()

	// Two etcd servers behind mutual TLS, as a platform would run them.
	etcdCA := must(pki.NewSelfSignedCA("etcd-ca", ecdsa, 24*time.Hour, now))
	mainEtcd, mainEtcdProcess, restartMainEtcd := etcdServer(t, dir, "main", etcdCA)
	eventsEtcd, eventsEtcdProcess, _ := etcdServer(t, dir, "events", etcdCA)
	etcdClient := must(pki.NewSignedCert(etcdCA, pki.EtcdClientCertConfig(), ecdsa, time.Hour, now))

	port := freePort(t)
	cfg := &v1alpha1.ApiServerConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "boot", Namespace: "tenants"},
		Spec: v1alpha1.ApiServerConfigSpec{
			// kube-apiserver refuses a loopback advertise address with the
			// lease and master-count reconcilers.
			EndpointReconcilerType: v1alpha1.EndpointReconcilerNone,
			Etcd: v1alpha1.EtcdSpec{
				Servers:   []string{mainEtcd},
				Prefix:    "/tenants/boot",
				TLS:       &v1alpha1.EtcdTLS{SecretName: "etcd-client"},
				Overrides: []v1alpha1.EtcdOverride{{Resource: "events", Servers: []string{eventsEtcd}}},
			},
			ServiceClusterIPRange: []string{"10.120.0.0/16"},
			Serving:               v1alpha1.ServingSpec{SecurePort: int32(port)},
			CacheSizing:           v1alpha1.CacheSizingSpec{DisabledResources: []v1alpha1.GroupResource{{Resource: "events"}}},
			ExtraArgs:             []v1alpha1.ExtraArg{{Name: "bind-address", Value: "127.0.0.1"}},
			// A namespace's events are limited to a burst of 5, so that
			// the test sees the limit within a few writes.
			Admission: v1alpha1.AdmissionSpec{EventRateLimit: &v1alpha1.EventRateLimitSpec{Limits: []v1alpha1.EventRateLimit{
				{Type: "Server", QPS: 5000, Burst: 20000}, {Type: "Namespace", QPS: 1, Burst: 5},
			}}},
		},
	}
	b := boot(t, dir, cfg, etcdCA, etcdClient, "")
	c, encryptionKeys, root, base, anonymous, cs, dialed := b.c, b.encryptionKeys, b.root, b.base, b.anonymous, b.cs, b.dialed
	mainAddr := strings.TrimPrefix(mainEtcd, "https://")
	info := must(cs.Discovery().ServerVersion())
	if info.GitVersion != v1alpha1.BundledVersion {
		t.Errorf("/version reports %s, want %s", info.GitVersion, v1alpha1.BundledVersion)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var svc *corev1.Service
	for range 60 {
		if svc, _ = cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{}); svc != nil && svc.Spec.ClusterIP != "" {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if svc == nil || svc.Spec.ClusterIP != c.KubernetesServiceIPs[0].String() {
		t.Fatalf("the kubernetes Service has ClusterIP %v, want %s (the first address of the range)", svc, c.KubernetesServiceIPs[0])
	}

	// Events go to the events etcd, everything else to the main one.
	ns := must(cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "boot-test"}}, metav1.CreateOptions{}))

	// DenyServiceExternalIPs is on by default (CIS 1.2.3): a Service that
	// claims an external address is refused, even for the admin.
	_, err := cs.CoreV1().Services(ns.Name).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "intercept"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}, ExternalIPs: []string{"203.0.113.10"}},
	}, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "Use of external IPs is denied") {
		t.Errorf("a Service with externalIPs: got %v, want it denied by DenyServiceExternalIPs", err)
	}
	// A webhook the tenant's administrator aims at the node does not reach it.
	checkWebhookCannotReachTheNode(t, cs)
	_ = must(cs.CoreV1().Events(ns.Name).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "boot-event"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns.Name, Name: "boot-pod", APIVersion: "v1"},
		Reason:         "Booted", Message: "rendered by the operator", Type: corev1.EventTypeNormal,
	}, metav1.CreateOptions{}))
	// EventRateLimit (spec.admission.eventRateLimit) answers 429 once the
	// namespace's burst is used up.
	limited := false
	for i := range 20 {
		_, err := cs.CoreV1().Events(ns.Name).Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("flood-%d", i)},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns.Name, Name: "boot-pod", APIVersion: "v1"},
			Reason:         "Flood", Message: "one of many", Type: corev1.EventTypeWarning,
		}, metav1.CreateOptions{})
		if apierrors.IsTooManyRequests(err) {
			limited = true
			break
		}
		if err != nil {
			t.Fatalf("creating event %d: %v", i, err)
		}
	}
	if !limited {
		t.Error("20 events in a row in one namespace were all accepted: EventRateLimit's namespace burst of 5 is not enforced")
	}
	tlsConfig := &tls.Config{RootCAs: x509.NewCertPool(), Certificates: []tls.Certificate{{
		Certificate: [][]byte{etcdClient.Cert().Raw}, PrivateKey: etcdClient.Key(),
	}}}
	tlsConfig.RootCAs.AddCert(etcdCA.Cert())
	count := func(endpoint, key string) int64 {
		t.Helper()
		cli := must(clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tlsConfig, DialTimeout: 10 * time.Second}))
		defer func() { _ = cli.Close() }()
		resp := must(cli.Get(ctx, key, clientv3.WithPrefix(), clientv3.WithCountOnly()))
		return resp.Count
	}
	eventKey := "/tenants/boot/events/boot-test/boot-event"
	nsKey := "/tenants/boot/namespaces/boot-test"
	if n := count(eventsEtcd, eventKey); n != 1 {
		t.Errorf("the events etcd holds %d keys %s, want 1", n, eventKey)
	}
	if n := count(mainEtcd, eventKey); n != 0 {
		t.Errorf("the main etcd holds %d keys %s, want 0: the override was ignored", n, eventKey)
	}
	if n := count(mainEtcd, nsKey); n != 1 {
		t.Errorf("the main etcd holds %d keys %s, want 1", n, nsKey)
	}
	if n := count(eventsEtcd, nsKey); n != 0 {
		t.Errorf("the events etcd holds %d keys %s, want 0", n, nsKey)
	}

	// Secrets and ConfigMaps are stored encrypted with the key, where the
	// operator's proof of a re-encryption looks for them (the etcd
	// prefixes of the catalog, generated from upstream's storage
	// factories); what is not encrypted is stored in plain protobuf.
	_ = must(cs.CoreV1().Secrets(ns.Name).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "boot-secret"},
		StringData: map[string]string{"password": "hunter2"}}, metav1.CreateOptions{}))
	_ = must(cs.CoreV1().ConfigMaps(ns.Name).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "boot-config"},
		Data: map[string]string{"password": "hunter2"}}, metav1.CreateOptions{}))
	raw := func(endpoint, key string) []byte {
		t.Helper()
		cli := must(clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tlsConfig, DialTimeout: 10 * time.Second}))
		defer func() { _ = cli.Close() }()
		resp := must(cli.Get(ctx, key))
		if len(resp.Kvs) != 1 {
			t.Fatalf("etcd %s holds no key %s", endpoint, key)
		}
		return resp.Kvs[0].Value
	}
	areas := must(apiserver.EncryptionAreas(c, c.Catalog, nil, encryptionKeys))
	if len(areas) != 2 {
		t.Fatalf("a default tenant proves %d areas of etcd, want Secrets and ConfigMaps: %+v", len(areas), areas)
	}
	for _, a := range areas {
		key := a.KeyPrefix + ns.Name + "/boot-" + map[string]string{"secrets": "secret", "configmaps": "config"}[a.Resources[0].Resource]
		value := raw(mainEtcd, key)
		if !strings.HasPrefix(string(value), a.Want) || a.Want != encryptionKeys.Current.Key.StoredPrefix() || strings.Contains(string(value), "hunter2") {
			t.Errorf("%s is stored as %.40q, want it behind %q", key, value, a.Want)
		}
	}
	if value := raw(mainEtcd, nsKey); !strings.HasPrefix(string(value), "k8s\x00") {
		t.Errorf("a namespace, not encrypted, is stored as %.20q", value)
	}

	// The audit log is written where the flags say, at the Metadata level.
	audit := must(os.ReadFile(root(apiserver.AuditLogFile)))
	if !strings.Contains(string(audit), `"level":"Metadata"`) || !strings.Contains(string(audit), "boot-event") {
		t.Errorf("the audit log does not record the event creation at the Metadata level:\n%.400s", audit)
	}

	// kubelet's probes through etcd outages (ProbePaths): with the events
	// etcd gone, the apiserver is still live and ready; with the main etcd
	// gone too, it is live but not ready. kube-apiserver's own unfiltered
	// endpoints fail meanwhile, which shows that the checks left out are
	// the ones that fail.
	livez, readyz := apiserver.ProbePaths(c)
	status := func(path string) int {
		resp, err := anonymous.Get(base + path)
		if err != nil {
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !ok(); time.Sleep(500 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("within 60s: %s", what)
			}
		}
	}
	stop := func(cmd *exec.Cmd) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	stop(eventsEtcdProcess)
	waitFor("kube-apiserver's /livez and /readyz fail on the events etcd", func() bool { return status("/livez") != 200 && status("/readyz") != 200 })
	for path, want := range map[string]int{livez: 200, readyz: 200} {
		if got := status(path); got != want {
			t.Errorf("events etcd down: GET %s: %d, want %d", path, got, want)
		}
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("events etcd down: reading a namespace, stored in the main etcd: %v", err)
	}
	stop(mainEtcdProcess)
	waitFor("the readiness probe fails without the main etcd", func() bool { return status(readyz) != 200 })
	if got := status(livez); got != 200 {
		t.Errorf("both etcds down: GET %s: %d, want 200 (a restart cannot bring etcd back)", livez, got)
	}

	// The main etcd returns: kube-apiserver is ready again, through the
	// dialer, which tried the stopped etcd meanwhile (holding
	// kube-apiserver's connection attempts) and then connected to it.
	down := dialed.of(mainAddr)
	restartMainEtcd()
	waitFor("the readiness probe passes once the main etcd is back", func() bool { return status(readyz) == 200 })
	if back := dialed.of(mainAddr); down.failed == 0 || back.ok == down.ok {
		t.Errorf("the dialer tried the stopped main etcd %d times and connected %d times after its return: kube-apiserver did not reconnect through it", down.failed, back.ok-down.ok)
	}
}
