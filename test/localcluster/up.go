package localcluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// How long each stage of Up may take. Generous: the machine has two cores
// and may be busy with builds.
const (
	apiserverReadyTimeout = 3 * time.Minute
	etcdReadyTimeout      = time.Minute
	containerdTimeout     = time.Minute
	nodeReadyTimeout      = 3 * time.Minute
	pollInterval          = 500 * time.Millisecond
)

// kubeconfigUser is a client of the cluster with its own certificate.
type kubeconfigUser struct {
	name, commonName string
	groups           []string
}

var kubeconfigUsers = []kubeconfigUser{
	{name: "admin", commonName: "kubernetes-admin", groups: []string{"system:masters"}},
	{name: compControllerMgr, commonName: "system:kube-controller-manager"},
	{name: compScheduler, commonName: "system:kube-scheduler"},
	{name: compKubelet, commonName: "system:node:" + NodeName, groups: []string{"system:nodes"}},
	{name: compKubeProxy, commonName: "system:kube-proxy"},
	{name: compMetricsServer, commonName: metricsServerUser},
}

func (l layout) ensurePKI() error {
	nodeIP := net.ParseIP(l.NodeIP)
	loopback := net.ParseIP("127.0.0.1")
	_, svcNet, err := net.ParseCIDR(ServiceCIDR)
	if err != nil {
		return fmt.Errorf("parsing the service range: %w", err)
	}
	kubernetesSvcIP := make(net.IP, len(svcNet.IP.To4()))
	copy(kubernetesSvcIP, svcNet.IP.To4())
	kubernetesSvcIP[3]++

	server := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	client := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	// etcd's gRPC gateway (its /v3 HTTP API) presents the server
	// certificate to etcd itself as a client.
	etcdServer := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	steps := []func() error{
		func() error { return l.pki.ensureCA(clusterCA, "localcluster-ca") },
		func() error { return l.pki.ensureCA(etcdCA, "localcluster-etcd-ca") },
		func() error { return l.pki.ensureCA(frontProxyCA, "localcluster-front-proxy-ca") },
		func() error {
			return l.pki.ensureSigned(frontProxyCA, certSpec{name: frontProxyClient, commonName: frontProxyClient, usages: client})
		},
		func() error { return l.pki.ensureKey(serviceAccountKey) },
		func() error {
			return l.pki.ensureSigned(clusterCA, certSpec{
				name: apiserverServing, commonName: "kube-apiserver", usages: server,
				dnsNames: []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"},
				ips:      []net.IP{nodeIP, loopback, kubernetesSvcIP},
			})
		},
		func() error {
			return l.pki.ensureSigned(clusterCA, certSpec{
				name: apiserverKubelet, commonName: "kube-apiserver-kubelet-client",
				organization: []string{"system:masters"}, usages: client,
			})
		},
		func() error {
			return l.pki.ensureSigned(clusterCA, certSpec{
				name: kubeletServing, commonName: NodeName, usages: server,
				dnsNames: []string{NodeName}, ips: []net.IP{nodeIP},
			})
		},
		func() error {
			return l.pki.ensureSigned(clusterCA, certSpec{
				name: metricsServerCert, commonName: "metrics-server", usages: server,
				dnsNames: []string{"metrics-server.kube-system.svc"}, ips: []net.IP{nodeIP},
			})
		},
		func() error {
			return l.pki.ensureSigned(etcdCA, certSpec{
				name: etcdTenantMainServer, commonName: compTenantEtcdMain, usages: etcdServer,
				dnsNames: []string{"localhost"}, ips: []net.IP{nodeIP, loopback},
			})
		},
		func() error {
			return l.pki.ensureSigned(etcdCA, certSpec{
				name: etcdTenantEvents, commonName: compTenantEtcdEvents, usages: etcdServer,
				dnsNames: []string{"localhost"}, ips: []net.IP{nodeIP, loopback},
			})
		},
		func() error {
			return l.pki.ensureSigned(etcdCA, certSpec{
				name: etcdTenantClient, commonName: etcdTenantClientUserName, usages: client,
			})
		},
		func() error {
			return l.pki.ensureSigned(etcdCA, certSpec{name: etcdTenantRoot, commonName: "root", usages: client})
		},
	}
	for _, u := range kubeconfigUsers {
		steps = append(steps, func() error {
			return l.pki.ensureSigned(clusterCA, certSpec{
				name: "user-" + u.name, commonName: u.commonName, organization: u.groups, usages: client,
			})
		})
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("generating the cluster's PKI: %w", err)
		}
	}
	return nil
}

// writeConfigs writes the kubeconfigs and the configuration files of
// containerd, the CNI network, kubelet and kube-proxy.
func (l layout) writeConfigs() error {
	for _, u := range kubeconfigUsers {
		if err := l.writeKubeconfig(u.name); err != nil {
			return err
		}
	}
	cni, err := cniConfig(l)
	if err != nil {
		return err
	}
	kubelet, err := kubeletConfig(l)
	if err != nil {
		return err
	}
	proxy, err := kubeProxyConfig(l)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		filepath.Join(l.configDir(), "containerd.toml"):           []byte(containerdConfig(l)),
		filepath.Join(l.cniConfDir(), "10-localcluster.conflist"): cni,
		filepath.Join(l.configDir(), "kubelet.yaml"):              kubelet,
		filepath.Join(l.configDir(), "kube-proxy.yaml"):           proxy,
	}
	for path, content := range files {
		if err := writeFileIfChanged(path, content, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writeFileIfChanged replaces path atomically, and only when its content
// changes: kube-proxy exits when its configuration file is written, which
// a second Up must not cause.
func writeFileIfChanged(path string, content []byte, mode os.FileMode) error {
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, content) {
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, content, mode); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("moving %s into place: %w", path, err)
	}
	return nil
}

// writeKubeconfig writes the kubeconfig of user, with its certificate
// embedded, pointing at the apiserver on the node's address.
func (l layout) writeKubeconfig(user string) error {
	ca, err := os.ReadFile(l.pki.CertFile(clusterCA))
	if err != nil {
		return fmt.Errorf("reading the cluster CA for the %s kubeconfig: %w", user, err)
	}
	cert, err := os.ReadFile(l.pki.CertFile("user-" + user))
	if err != nil {
		return fmt.Errorf("reading the certificate of %s: %w", user, err)
	}
	key, err := os.ReadFile(l.pki.KeyFile("user-" + user))
	if err != nil {
		return fmt.Errorf("reading the key of %s: %w", user, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[NodeName] = &clientcmdapi.Cluster{Server: l.apiserverURL(), CertificateAuthorityData: ca}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts[NodeName] = &clientcmdapi.Context{Cluster: NodeName, AuthInfo: user}
	cfg.CurrentContext = NodeName
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("encoding the %s kubeconfig: %w", user, err)
	}
	// It holds a private key: readable by root only.
	return writeFileIfChanged(l.kubeconfig(user), b, 0o600)
}

// startAll starts the components in order, each once the one it needs is
// ready.
func (l layout) startAll(ctx context.Context) error {
	comps := l.componentsByName()
	startAndWait := func(names []string, what string, timeout time.Duration, ready func(context.Context) error) error {
		for _, n := range names {
			if pid, ok := l.running(comps[n]); ok {
				if sameCommandLine(pid, comps[n]) {
					l.Logf("%s is already running (PID %d)", n, pid)
					continue
				}
				l.Logf("Restarting %s (PID %d): its command line changed", n, pid)
				if err := l.stop(ctx, comps[n]); err != nil {
					return err
				}
			}
			pid, err := l.start(comps[n])
			if err != nil {
				return err
			}
			l.Logf("Started %s (PID %d, log %s)", n, pid, l.logFile(n))
		}
		return l.waitFor(ctx, what, names, timeout, ready)
	}
	if err := startAndWait([]string{compEtcd, compTenantEtcdMain, compTenantEtcdEvents}, "the tenant etcd servers to be healthy over TLS", etcdReadyTimeout, l.tenantEtcdHealthy); err != nil {
		return err
	}
	if err := l.enableTenantEtcdAuth(ctx); err != nil {
		return err
	}
	if err := os.MkdirAll(l.s3Dir(), 0o700); err != nil {
		return fmt.Errorf("creating the S3 server's directory: %w", err)
	}
	if err := startAndWait([]string{compS3}, "the S3 server to answer", etcdReadyTimeout, l.s3Ready); err != nil {
		return err
	}
	if err := startAndWait([]string{compAPIServer}, "kube-apiserver to be ready", apiserverReadyTimeout, l.apiserverReady); err != nil {
		return err
	}
	if err := startAndWait([]string{compControllerMgr, compScheduler, compContainerd}, "containerd to answer", containerdTimeout, l.containerdReady); err != nil {
		return err
	}
	if err := l.importImages(ctx); err != nil {
		return err
	}
	// Before kubelet, so that kube-network-policies' pod starts with the
	// node; kube-system may be missing for a moment after the apiserver is
	// ready.
	if err := l.waitFor(ctx, "kube-network-policies' DaemonSet to be applied", nil, etcdReadyTimeout, l.applyNetworkPolicyObjects); err != nil {
		return err
	}
	if err := startAndWait([]string{compKubelet, compKubeProxy}, "the node to be Ready and kube-proxy healthy", nodeReadyTimeout, l.nodeReady); err != nil {
		return err
	}
	if err := l.applyMetricsServerObjects(ctx); err != nil {
		return err
	}
	if err := startAndWait([]string{compMetricsServer}, "the resource metrics API to be served", nodeReadyTimeout, l.metricsAPIReady); err != nil {
		return err
	}
	return l.waitFor(ctx, "kube-network-policies to enforce NetworkPolicy", []string{compKubelet}, nodeReadyTimeout, l.networkPolicyReady)
}

// waitFor polls ready until it succeeds, timeout passes, or one of the
// components called names exits; the error names what was awaited and
// quotes the end of the logs.
func (l layout) waitFor(ctx context.Context, what string, names []string, timeout time.Duration, ready func(context.Context) error) error {
	comps := l.componentsByName()
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if last = ready(ctx); last == nil {
			return nil
		}
		for _, n := range names {
			if _, ok := l.running(comps[n]); !ok {
				return fmt.Errorf("waiting for %s: %s exited; the end of %s:\n%s", what, n, l.logFile(n), l.logTail(n, 20))
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("waiting for %s: not after %s: %w; see the logs in %s", what, timeout, last, l.logDir())
		}
		select {
		case <-ctx.Done():
		case <-time.After(pollInterval):
		}
	}
}

func (l layout) tlsClient(caName, certName string) (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(l.pki.CertFile(certName), l.pki.KeyFile(certName))
	if err != nil {
		return nil, fmt.Errorf("loading client certificate %s: %w", certName, err)
	}
	caPEM, err := os.ReadFile(l.pki.CertFile(caName))
	if err != nil {
		return nil, fmt.Errorf("reading CA %s: %w", caName, err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}},
	}, nil
}

func getOK(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

func (l layout) tenantEtcdHealthy(ctx context.Context) error {
	client, err := l.tlsClient(etcdCA, etcdTenantClient)
	if err != nil {
		return err
	}
	te := l.tenantEtcd()
	for _, u := range []string{te.MainURL, te.EventsURL} {
		if err := getOK(ctx, client, u+"/health"); err != nil {
			return err
		}
	}
	return nil
}

// s3Ready: the S3 server answers HTTP (403 to an anonymous request).
func (l layout) s3Ready(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+l.s3Endpoint().Endpoint+"/", http.NoBody)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	return nil
}

// apiserverReady also proves that the cluster's etcd serves.
func (l layout) apiserverReady(ctx context.Context) error {
	return l.adminGetOK(ctx, "/readyz")
}

// adminGetOK: the cluster's admin GETs path on the apiserver, answered 200.
func (l layout) adminGetOK(ctx context.Context, path string) error {
	client, err := l.tlsClient(clusterCA, "user-admin")
	if err != nil {
		return err
	}
	return getOK(ctx, client, l.apiserverURL()+path)
}

func (l layout) ctr(ctx context.Context, args ...string) error {
	return run(ctx, l.bin("ctr"), append([]string{"--address", l.containerdSocket(), "--namespace", "k8s.io"}, args...)...)
}

func (l layout) containerdReady(ctx context.Context) error {
	return l.ctr(ctx, "version")
}

// importImages imports the image tarballs; content already present is not
// copied again.
func (l layout) importImages(ctx context.Context) error {
	for _, img := range l.Images {
		l.Logf("Importing image %s", filepath.Base(img))
		if err := l.ctr(ctx, "images", "import", "--local", img); err != nil {
			return fmt.Errorf("importing image %s into containerd: %w", img, err)
		}
	}
	return nil
}

func (l layout) nodeReady(ctx context.Context) error {
	cs, err := l.clientset()
	if err != nil {
		return err
	}
	node, err := cs.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("getting node %s: %w", NodeName, err)
	}
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status != corev1.ConditionTrue {
				return fmt.Errorf("node %s is not Ready: %s", NodeName, c.Message)
			}
			ready = true
		}
	}
	if !ready {
		return fmt.Errorf("node %s has no Ready condition yet", NodeName)
	}
	healthz := fmt.Sprintf("http://%s:%d/healthz", l.NodeIP, kubeProxyHealthzPort)
	if err := getOK(ctx, &http.Client{Timeout: 5 * time.Second}, healthz); err != nil {
		return fmt.Errorf("kube-proxy is not healthy: %w", err)
	}
	return nil
}

// ensureEtcdClientSecret creates or updates the Secret with the tenant etcd
// client credentials.
func (l layout) ensureEtcdClientSecret(ctx context.Context) error {
	te := l.tenantEtcd()
	data := map[string][]byte{}
	for key, path := range map[string]string{"ca.crt": te.CAFile, corev1.TLSCertKey: te.CertFile, corev1.TLSPrivateKeyKey: te.KeyFile} {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("reading %s for the tenant etcd client Secret: %w", path, err)
		}
		data[key] = b
	}
	cs, err := l.clientset()
	if err != nil {
		return err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: te.SecretNamespace, Name: te.SecretName},
		Type:       corev1.SecretTypeTLS,
		Data:       data,
	}
	secrets := cs.CoreV1().Secrets(te.SecretNamespace)
	_, err = secrets.Create(ctx, secret, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = secrets.Update(ctx, secret, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("creating Secret %s/%s with the tenant etcd client credentials: %w", te.SecretNamespace, te.SecretName, err)
	}
	return nil
}

func syscallKill(pid int) error {
	err := syscall.Kill(pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// Kubectl returns a kubectl command of the cluster's admin.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.l.bin("kubectl"), append([]string{"--kubeconfig", c.KubeconfigPath()}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+c.l.daemonPath())
	return cmd
}
