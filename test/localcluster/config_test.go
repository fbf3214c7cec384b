package localcluster

import (
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func testLayout() layout {
	return newLayout(Options{Dir: "/state", BinDir: "/bin-dir"}.withDefaults())
}

// TestContainerdConfig checks the settings without which no pod starts on
// this kind of machine.
func TestContainerdConfig(t *testing.T) {
	cfg := containerdConfig(testLayout())
	for _, want := range []string{
		"restrict_oom_score_adj = true",
		`sandbox = "` + PauseImage + `"`,
		"SystemdCgroup = false",
		`root = "/state/data/containerd"`,
		`address = "/state/run/containerd/containerd.sock"`,
		`conf_dir = "/state/config/cni"`,
		"netns_mounts_under_state_dir = true",
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("containerd config lacks %q:\n%s", want, cfg)
		}
	}
}

func TestKubeletConfig(t *testing.T) {
	b, err := kubeletConfig(testLayout())
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("kubelet config is not YAML: %v", err)
	}
	tests := map[string]any{
		"failCgroupV1":             false,
		"cgroupDriver":             "cgroupfs",
		"cgroupRoot":               "/apiserver-operator-localcluster",
		"address":                  DefaultNodeIP,
		"containerRuntimeEndpoint": "unix:///state/run/containerd/containerd.sock",
	}
	for key, want := range tests {
		if cfg[key] != want {
			t.Errorf("kubelet config %s = %v, want %v", key, cfg[key], want)
		}
	}
}

func TestKubeProxyConfig(t *testing.T) {
	b, err := kubeProxyConfig(testLayout())
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Mode               string `json:"mode"`
		HealthzBindAddress string `json:"healthzBindAddress"`
		Conntrack          struct {
			MaxPerCore int `json:"maxPerCore"`
		} `json:"conntrack"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("kube-proxy config is not YAML: %v", err)
	}
	if cfg.Mode != "iptables" || cfg.HealthzBindAddress != DefaultNodeIP+":10256" || cfg.Conntrack.MaxPerCore != 0 {
		t.Errorf("kube-proxy config = %+v, want iptables mode, healthz on the node address, host conntrack untouched", cfg)
	}
}

func TestCNIConfig(t *testing.T) {
	b, err := cniConfig(testLayout())
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Plugins []struct {
			Type string `json:"type"`
			IPAM struct {
				Ranges  [][]map[string]string `json:"ranges"`
				DataDir string                `json:"dataDir"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("CNI config is not JSON: %v", err)
	}
	bridge := cfg.Plugins[0]
	if bridge.Type != "bridge" || bridge.IPAM.Ranges[0][0]["subnet"] != PodCIDR || bridge.IPAM.DataDir != "/state/data/cni-ipam" {
		t.Errorf("CNI config = %s, want a bridge with host-local addresses from %s under the state directory", b, PodCIDR)
	}
}
