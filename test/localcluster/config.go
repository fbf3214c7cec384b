package localcluster

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// layout holds every path and address of one cluster. It is computed from
// Options alone, so that Up and Down (even from another process) agree.
type layout struct {
	Options

	pki pki
	// nodeName and podCIDR are the node's name and pod range: NodeName
	// and PodCIDR, or a tenant node's (see node.go).
	nodeName, podCIDR string
}

func newLayout(opts Options) layout {
	return layout{Options: opts, pki: pki{dir: filepath.Join(opts.Dir, "pki")}, nodeName: NodeName, podCIDR: PodCIDR}
}

func (l layout) configDir() string  { return filepath.Join(l.Dir, "config") }
func (l layout) dataDir() string    { return filepath.Join(l.Dir, "data") }
func (l layout) runDir() string     { return filepath.Join(l.Dir, "run") }
func (l layout) logDir() string     { return filepath.Join(l.Dir, "logs") }
func (l layout) netnsPath() string  { return filepath.Join("/run/netns", l.Netns) }
func (l layout) cniConfDir() string { return filepath.Join(l.configDir(), "cni") }
func (l layout) statePath() string  { return filepath.Join(l.Dir, "state.json") }

func (l layout) kubeconfig(user string) string {
	return filepath.Join(l.configDir(), user+".kubeconfig")
}

func (l layout) containerdSocket() string {
	return filepath.Join(l.runDir(), "containerd", "containerd.sock")
}

func (l layout) apiserverURL() string {
	return "https://" + l.NodeIP + ":" + strconv.Itoa(apiserverPort)
}

// TenantEtcd are the addresses of the two etcd servers that tenants' kube-apiservers
// may use, with TLS and client certificates.
type TenantEtcd struct {
	// MainURL is the etcd for all resources, such as https://10.77.0.2:2479.
	MainURL string
	// EventsURL is a second etcd, for --etcd-servers-overrides such as events.
	EventsURL string
	// SecretNamespace and SecretName name the Secret in the cluster with
	// the client credentials: ca.crt, tls.crt and tls.key.
	SecretNamespace, SecretName string
	// CAFile, CertFile and KeyFile are the same credentials on the host.
	CAFile, CertFile, KeyFile string
	// CAKeyFile is the key of the CA the servers trust for client
	// certificates (CAFile's): what the operator's datastore Secret holds.
	CAKeyFile string
}

func (l layout) tenantEtcd() TenantEtcd {
	return TenantEtcd{
		MainURL:         "https://" + l.NodeIP + ":" + strconv.Itoa(tenantEtcdMainPort),
		EventsURL:       "https://" + l.NodeIP + ":" + strconv.Itoa(tenantEtcdEventsPort),
		SecretNamespace: EtcdClientSecretNamespace,
		SecretName:      EtcdClientSecretName,
		CAFile:          l.pki.CertFile(etcdCA),
		CertFile:        l.pki.CertFile(etcdTenantClient),
		KeyFile:         l.pki.KeyFile(etcdTenantClient),
		CAKeyFile:       l.pki.KeyFile(etcdCA),
	}
}

// containerdConfig renders containerd's configuration: all of its state
// under the cluster's directory, the local pause image as the sandbox image,
// cgroupfs, and oom_score_adj never lowered below containerd's own, because
// this machine withholds CAP_SYS_RESOURCE from runc.
func containerdConfig(l layout) string {
	q := strconv.Quote
	cd := filepath.Join(l.dataDir(), "containerd")
	run := filepath.Join(l.runDir(), "containerd")
	var b strings.Builder
	fmt.Fprintf(&b, `# Written by test/localcluster; rewritten by every Up.
version = 3
root = %s
state = %s
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = %s

[plugins."io.containerd.internal.v1.opt"]
  path = %s

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %s

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  tolerate_missing_hugetlb_controller = true
  disable_hugetlb_controller = true
  cdi_spec_dirs = []
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = %s
        Root = %s
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%s]
    conf_dir = %s
    max_conf_num = 1

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
`, q(cd), q(run), q(l.containerdSocket()), q(filepath.Join(cd, "opt")), q(PauseImage),
		q(l.RuncPath), q(filepath.Join(run, "runc")), q(l.CNIBinDir), q(l.cniConfDir()))
	return b.String()
}

// cniConfig renders the pod network: a bridge in the node's network
// namespace, masquerading what leaves the pod range.
func cniConfig(l layout) ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       cniNetworkName,
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      "cni0",
				"isGateway":   true,
				"ipMasq":      true,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": l.podCIDR}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					"dataDir": filepath.Join(l.dataDir(), "cni-ipam"),
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding the CNI configuration: %w", err)
	}
	return b, nil
}

// kubeletConfig renders the KubeletConfiguration. The host has cgroup v1
// and no systemd; disk and memory eviction are relaxed because the machine
// is shared with builds, and image garbage collection is off because the
// images cannot be pulled again. kubelet syncs each pod every 20 s rather
// than every minute: a changed ConfigMap or Secret reaches a running pod's
// files at its next sync, and the tests of what kube-apiserver reloads
// from them (authentication and authorization configurations, CA
// bundles) wait for that; the node runs a few dozen pods.
func kubeletConfig(l layout) ([]byte, error) {
	cfg := map[string]any{
		"apiVersion":                  "kubelet.config.k8s.io/v1beta1",
		"kind":                        "KubeletConfiguration",
		"address":                     l.NodeIP,
		"port":                        10250,
		"readOnlyPort":                0,
		"healthzBindAddress":          "127.0.0.1",
		"healthzPort":                 10248,
		"tlsCertFile":                 l.pki.CertFile(kubeletServing),
		"tlsPrivateKeyFile":           l.pki.KeyFile(kubeletServing),
		"rotateCertificates":          false,
		"serverTLSBootstrap":          false,
		"cgroupDriver":                "cgroupfs",
		"cgroupRoot":                  "/" + l.CgroupName,
		"failCgroupV1":                false,
		"failSwapOn":                  false,
		"oomScoreAdj":                 0,
		"containerRuntimeEndpoint":    "unix://" + l.containerdSocket(),
		"clusterDomain":               "cluster.local",
		"podLogsDir":                  filepath.Join(l.logDir(), "pods"),
		"volumePluginDir":             filepath.Join(l.dataDir(), "kubelet-plugins"),
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"serializeImagePulls":         false,
		"syncFrequency":               "20s",
		"evictionHard": map[string]string{
			"memory.available":  "100Mi",
			"nodefs.available":  "1%",
			"nodefs.inodesFree": "1%",
			"imagefs.available": "1%",
		},
		"authentication": map[string]any{
			"anonymous": map[string]bool{"enabled": false},
			"webhook":   map[string]bool{"enabled": true},
			"x509":      map[string]string{"clientCAFile": l.pki.CertFile(clusterCA)},
		},
		"authorization": map[string]string{"mode": "Webhook"},
	}
	if l.nodeName != NodeName {
		// A tenant node takes only callers with a certificate of the
		// tenant's CA, a file it re-reads (SetClientCA), and asks its
		// apiserver nothing about them. kubelet reads its kubeconfig's CA
		// once: with webhooks, a tenant's CA rotation would need a
		// kubelet restart once the apiservers present the new CA.
		cfg["authentication"].(map[string]any)["webhook"] = map[string]bool{"enabled": false}
		cfg["authorization"] = map[string]string{"mode": "AlwaysAllow"}
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encoding the kubelet configuration: %w", err)
	}
	return b, nil
}

// kubeProxyConfig renders the KubeProxyConfiguration, in iptables mode. It
// leaves conntrack sysctls alone (they are the host's, not the namespace's)
// and does not try to lower its oom_score_adj.
func kubeProxyConfig(l layout) ([]byte, error) {
	cfg := map[string]any{
		"apiVersion":         "kubeproxy.config.k8s.io/v1alpha1",
		"kind":               "KubeProxyConfiguration",
		"mode":               "iptables",
		"clientConnection":   map[string]string{"kubeconfig": l.kubeconfig("kube-proxy")},
		"hostnameOverride":   NodeName,
		"bindAddress":        l.NodeIP,
		"healthzBindAddress": l.NodeIP + ":" + strconv.Itoa(kubeProxyHealthzPort),
		"metricsBindAddress": "127.0.0.1:10249",
		"clusterCIDR":        PodCIDR,
		"nodePortAddresses":  []string{"primary"},
		"oomScoreAdj":        0,
		"conntrack": map[string]any{
			"maxPerCore":            0,
			"min":                   0,
			"tcpEstablishedTimeout": "0s",
			"tcpCloseWaitTimeout":   "0s",
		},
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encoding the kube-proxy configuration: %w", err)
	}
	return b, nil
}
