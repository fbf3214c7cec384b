//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
	"github.com/apiserver-operator/apiserver-operator/test/localcluster"
)

// The tenant node of these tests: a kubelet behind NAT (localcluster's
// tenant node), its workload and its konnectivity agent.
const (
	natNodeName  = "nat-node"
	nodeAppName  = "nodeapp"
	nodeAppImage = "localhost/apiserver-operator/nodeapp:local"
	nodeAppPort  = 8080
)

// withKonnectivity turns the proxy on for a tenant of the local cluster:
// the agents dial the cluster node's address (the NodePorts').
func withKonnectivity(cfg *v1alpha1.ApiServerConfig) {
	cfg.Spec.Konnectivity = &v1alpha1.KonnectivitySpec{Agent: v1alpha1.KonnectivityAgentSpec{Host: cluster.NodeIP()}}
}

// tenantServicePorts are the NodePorts of the tenant's apiserver and of
// its konnectivity servers (the agents' Service).
func tenantServicePorts(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig) (api, agents int32) {
	t.Helper()
	nodePort := func(name string) int32 {
		svc := &corev1.Service{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: cfg.Namespace, Name: name}, svc); err != nil {
			t.Fatal(err)
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].NodePort == 0 {
			t.Fatalf("Service %s has ports %+v, want one NodePort", name, svc.Spec.Ports)
		}
		return svc.Spec.Ports[0].NodePort
	}
	return nodePort(apiserver.ServiceName(cfg.Name)), nodePort(apiserver.KonnectivityServiceName(cfg.Name))
}

// publishAgentPorts names the NodePorts the Service got in the agents'
// manifests (the published manifests cannot name an allocated port) and
// returns those manifests once the operator has published them.
func publishAgentPorts(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig) []byte {
	t.Helper()
	api, agents := tenantServicePorts(t, c, cfg)
	managementKubectl(t, "-n", cfg.Namespace, "patch", "asc/"+cfg.Name, "--type=merge", "-p",
		fmt.Sprintf(`{"spec":{"konnectivity":{"agent":{"port":%d,"apiPort":%d}}}}`, agents, api))
	want := fmt.Sprintf("--proxy-server-port=%d", agents)
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		cm := &corev1.ConfigMap{}
		err := c.Get(context.Background(), client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.KonnectivityAgentConfigMapName(cfg.Name)}, cm)
		if err == nil && strings.Contains(cm.Data[apiserver.KonnectivityAgentManifestsKey], want) {
			return []byte(cm.Data[apiserver.KonnectivityAgentManifestsKey])
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("the operator did not publish the agents' manifests with %s within 2m", want)
	return nil
}

// tenantCA is the tenant's CA, which signs the node's certificates as a
// platform's node bootstrap would, and the bundle clients trust.
func tenantCA(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig) (*pki.KeyPair, []byte) {
	t.Helper()
	s := &corev1.Secret{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.CASecretName(cfg.Name)}, s); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.ParseKeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatalf("reading the tenant's CA: %v", err)
	}
	return ca, s.Data[apiserver.CABundleKey]
}

// startNATNode starts a tenant node behind NAT, registered to the tenant
// with a client certificate of the tenant's CA, and waits until it is Ready
// in the tenant.
func startNATNode(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, tenant *kubernetes.Clientset) *localcluster.Node {
	t.Helper()
	ca, bundle := tenantCA(t, c, cfg)
	now := time.Now()
	nodeIP := localcluster.TenantNodeIP(0)
	kubeletClient, err := pki.NewSignedCert(ca, pki.ClientCertConfigFor("system:node:"+natNodeName, "system:nodes"), cfg.Spec.Certificates.KeyAlgorithm, 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := pki.NewSignedCert(ca, pki.ServingCertConfig([]string{natNodeName}, []net.IP{net.ParseIP(nodeIP)}), cfg.Spec.Certificates.KeyAlgorithm, 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	clientKey, err := kubeletClient.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	servingKey, err := serving.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	api, _ := tenantServicePorts(t, c, cfg)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["tenant"] = &clientcmdapi.Cluster{
		Server:                   fmt.Sprintf("https://%s:%d", cluster.NodeIP(), api),
		CertificateAuthorityData: bundle,
		TLSServerName:            apiserver.ServiceName(cfg.Name) + "." + cfg.Namespace + ".svc",
	}
	kc.AuthInfos["kubelet"] = &clientcmdapi.AuthInfo{ClientCertificateData: kubeletClient.CertPEM(), ClientKeyData: clientKey}
	kc.Contexts["tenant"] = &clientcmdapi.Context{Cluster: "tenant", AuthInfo: "kubelet"}
	kc.CurrentContext = "tenant"
	kubeconfig, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	var images []string
	for _, name := range []string{"pause.tar", "nodeapp.tar", "konnectivity-agent.tar"} {
		images = append(images, filepath.Join(imagesDir(), name))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	node, err := cluster.StartNode(ctx, localcluster.NodeOptions{
		Name: natNodeName, Kubeconfig: kubeconfig, ClientCA: bundle,
		ServingCert: serving.CertPEM(), ServingKey: servingKey, Images: images,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := node.Stop(ctx); err != nil {
			t.Errorf("stopping the tenant node: %v", err)
		}
	})
	start := time.Now()
	var last string
	for time.Since(start) < 3*time.Minute {
		if err := node.Running(); err != nil {
			t.Fatal(err)
		}
		n, err := tenant.CoreV1().Nodes().Get(context.Background(), natNodeName, metav1.GetOptions{})
		if err == nil {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					t.Logf("tenant node %s (%s, behind NAT) Ready in the tenant in %s", natNodeName, nodeIP, time.Since(start).Round(100*time.Millisecond))
					return node
				}
				if cond.Type == corev1.NodeReady {
					last = cond.Message
				}
			}
		} else {
			last = err.Error()
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("tenant node %s was not Ready within 3m (last: %s); kubelet's log: %s", natNodeName, last, node.LogFile())
	return nil
}

// imagesDir holds the image tarballs that `make localcluster-binaries`
// writes.
func imagesDir() string {
	return envOr("LOCALCLUSTER_IMAGES_DIR", filepath.Join(envOr("LOCALCLUSTER_BIN_DIR", "../../bin"), "images"))
}

// applyAgents applies the published manifests in the tenant, as the
// platform does, and runs the DaemonSet's pod on the NAT node: the tenant
// has no kube-controller-manager, so the test stands in for the
// DaemonSet controller (and for the root CA publisher).
func applyAgents(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, tenant *kubernetes.Clientset, manifests []byte) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	_, bundle := tenantCA(t, c, cfg)
	rootCA := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": string(bundle)}}
	if _, err := tenant.CoreV1().ConfigMaps("kube-system").Create(ctx, rootCA, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "konnectivity-agent.yaml")
	if err := os.WriteFile(path, manifests, 0o600); err != nil {
		t.Fatal(err)
	}
	tenantKubectl(t, c, cfg, "apply", "--server-side", "-f", path)
	var ds *appsv1.DaemonSet
	for _, doc := range bytes.Split(manifests, []byte("\n---\n")) {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(bytes.TrimPrefix(doc, []byte("---\n")), nil, nil)
		if err == nil {
			if d, ok := obj.(*appsv1.DaemonSet); ok {
				ds = d
			}
		}
	}
	if ds == nil {
		t.Fatalf("the published manifests hold no DaemonSet:\n%s", manifests)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ds.Namespace, Name: ds.Name + "-" + natNodeName, Labels: ds.Spec.Template.Labels, Annotations: ds.Spec.Template.Annotations},
		Spec:       *ds.Spec.Template.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = natNodeName
	created, err := tenant.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return waitPodReady(t, tenant, created, 3*time.Minute)
}

// runNodeApp runs the workload on the NAT node, in a namespace whose
// default ServiceAccount the test creates (no kube-controller-manager).
func runNodeApp(t testing.TB, tenant *kubernetes.Clientset) *corev1.Pod {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "default"}}
	if _, err := tenant.CoreV1().ServiceAccounts("default").Create(context.Background(), sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: nodeAppName},
		Spec: corev1.PodSpec{
			NodeName:                     natNodeName,
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name:    nodeAppName,
				Image:   nodeAppImage,
				Command: []string{"/nodeapp", "serve", fmt.Sprintf(":%d", nodeAppPort)},
				Ports:   []corev1.ContainerPort{{Name: "http", ContainerPort: nodeAppPort}},
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
	created, err := tenant.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return waitPodReady(t, tenant, created, 2*time.Minute)
}

func waitPodReady(t testing.TB, tenant *kubernetes.Clientset, pod *corev1.Pod, timeout time.Duration) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		got, err := tenant.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err == nil {
			for _, cond := range got.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					return got
				}
			}
			last = fmt.Sprintf("phase %s, containers %+v", got.Status.Phase, got.Status.ContainerStatuses)
		} else {
			last = err.Error()
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("pod %s/%s on the NAT node was not Ready within %s (last: %s)", pod.Namespace, pod.Name, timeout, last)
	return nil
}

// waitNoKonnectivityServer waits until no apiserver pod of cfg, running
// or terminating, has the konnectivity server.
func waitNoKonnectivityServer(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		with := 0
		for _, p := range apiserverPods(t, c, cfg) {
			for _, ic := range p.Spec.InitContainers {
				if strings.Contains(ic.Image, "konnectivity-server") {
					with++
				}
			}
		}
		if with == 0 {
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("apiserver pods still run the konnectivity server %s after it was turned off", timeout)
}

// waitAgentCounts waits until status.konnectivity counts want agents at
// the konnectivity server of every apiserver pod, each pod ready, and as
// many servers as masterCount.
func waitAgentCounts(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, want int32, timeout time.Duration) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		got := getTenant(t, c, cfg)
		k := got.Status.Konnectivity
		last = fmt.Sprintf("%+v", k)
		if k == nil || int32(len(k.Servers)) != ptr.Deref(got.Spec.MasterCount, 1) {
			continue
		}
		all := true
		for _, s := range k.Servers {
			all = all && s.Ready && s.Agents != nil && *s.Agents == want
		}
		if all {
			return
		}
	}
	t.Fatalf("status.konnectivity of %s/%s does not count %d agent(s) at every apiserver within %s; last: %s", cfg.Namespace, cfg.Name, want, timeout, last)
}

// restartsOf is the restarts of a pod's containers, or -1 when the pod is
// gone or another pod of that name replaced it.
func restartsOf(ctx context.Context, tenant *kubernetes.Clientset, pod *corev1.Pod) int32 {
	got, err := tenant.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil || got.UID != pod.UID {
		return -1
	}
	var n int32
	for _, s := range got.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}

// execIn runs cmd in the workload through the tenant, as kubectl exec does
// (WebSocket, SPDY as the fallback), and returns its output.
func execIn(ctx context.Context, rc *rest.Config, cmd ...string) (string, error) {
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return "", err
	}
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name(nodeAppName).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: nodeAppName, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(rc, http.MethodGet, req.URL().String())
	if err != nil {
		return "", err
	}
	spdy, err := remotecommand.NewSPDYExecutor(rc, http.MethodPost, req.URL())
	if err != nil {
		return "", err
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool { return true })
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		return "", fmt.Errorf("exec %s: %w (stderr %q)", strings.Join(cmd, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// tenantKubectlE runs kubectl against the tenant with tenantArgs (those of
// tenantKubectlArgs) and returns its output and error, bounded by timeout.
// It calls no t.Fatal: goroutines may run it.
func tenantKubectlE(tenantArgs []string, timeout time.Duration, args ...string) (string, error) {
	// kubectl's own --request-timeout, when given, says why first.
	ctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Second)
	defer cancel()
	cmd := cluster.Kubectl(ctx, append(slices.Clone(tenantArgs), args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// forwardedPort matches kubectl port-forward's line about its local port.
var forwardedPort = regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) ->`)

// portForward runs kubectl port-forward to the workload through the
// tenant, with tenantArgs (those of tenantKubectlArgs), and GETs / through
// it. It calls no t.Fatal: goroutines may run it.
func portForward(tenantArgs []string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// Port 0: kubectl picks a free local port and says which.
	cmd := cluster.Kubectl(ctx, append(slices.Clone(tenantArgs), "-n", "default", "port-forward", "pod/"+nodeAppName, fmt.Sprintf(":%d", nodeAppPort))...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return "", err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(stdout)
	port := ""
	for sc.Scan() {
		if m := forwardedPort.FindStringSubmatch(sc.Text()); m != nil {
			port = m[1]
			break
		}
	}
	if port == "" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return "", fmt.Errorf("kubectl port-forward opened no port: %s", strings.TrimSpace(stderr.String()))
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+port+"/", http.NoBody)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("GET through kubectl port-forward: %w (kubectl: %s)", err, strings.TrimSpace(stderr.String()))
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("GET through kubectl port-forward: %w (kubectl: %s)", err, strings.TrimSpace(stderr.String()))
	}
	return string(body), nil
}

// nodeCalls are kubectl logs, exec and port-forward against the workload
// through the tenant; each returns an error when the call failed or did
// not answer what the workload says. The three run at once: where they
// fail, each waits for its own timeout.
func nodeCalls(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, timeout time.Duration) map[string]error {
	t.Helper()
	// Read here: tenantKubectlArgs may call t.Fatal, which only the test's
	// goroutine may.
	args := tenantKubectlArgs(t, c, cfg)
	var mu sync.Mutex
	out := map[string]error{}
	failed := func(call string, err error) {
		mu.Lock()
		defer mu.Unlock()
		out[call] = err
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if logs, err := tenantKubectlE(args, timeout, "-n", "default", "logs", nodeAppName, "--request-timeout", timeout.String()); err != nil {
			failed("logs", fmt.Errorf("%w: %s", err, strings.TrimSpace(logs)))
		} else if !strings.Contains(logs, "tick ") {
			failed("logs", fmt.Errorf("kubectl logs has no tick of the workload: %q", logs))
		}
	})
	wg.Go(func() {
		if echo, err := tenantKubectlE(args, timeout, "-n", "default", "exec", nodeAppName, "--request-timeout", timeout.String(), "--", "/nodeapp", "echo", "through", "the", "tunnel"); err != nil {
			failed("exec", fmt.Errorf("%w: %s", err, strings.TrimSpace(echo)))
		} else if strings.TrimSpace(echo) != "through the tunnel" {
			failed("exec", fmt.Errorf("kubectl exec answered %q", echo))
		}
	})
	wg.Go(func() {
		if body, err := portForward(args, timeout); err != nil {
			failed("port-forward", err)
		} else if !strings.HasPrefix(body, "nodeapp on ") {
			failed("port-forward", fmt.Errorf("GET through kubectl port-forward answered %q", body))
		}
	})
	wg.Wait()
	return out
}

// waitNodeCalls waits until logs, exec and port-forward all work, as they
// do once the agents hold a tunnel to every server.
func waitNodeCalls(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var last map[string]error
	for time.Since(start) < within {
		if last = nodeCalls(t, c, cfg, 20*time.Second); len(last) == 0 {
			return time.Since(start)
		}
		time.Sleep(2 * time.Second)
	}
	t.Fatalf("logs, exec and port-forward to the NAT node's pod did not all work within %s: %v", within, last)
	return 0
}
