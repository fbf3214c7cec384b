// Package localcluster runs a real one-node Kubernetes cluster on this
// machine for end-to-end tests, in the spirit of upstream's
// hack/local-up-cluster.sh: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, containerd, kubelet and kube-proxy, all built from
// upstream sources into bin/, started directly (no systemd) and stopped by
// PID.
//
// The node lives in a network namespace of its own, linked to the host by a
// veth pair (HostIP on the host, NodeIP in the namespace), because kubelet
// and kube-apiserver reject loopback addresses. Every component runs in that
// network namespace but in the host's mount namespace, so kubelet and
// containerd see the same mounts. The host's routes, iptables rules and
// forwarding are never touched; tests reach the cluster at NodeIP.
//
// Up is idempotent: it starts what is not running and reuses the PKI and data
// under Options.Dir. Down stops every process, removes the namespace, the
// mounts, the cgroups and the state directory.
//
// Two TLS etcd servers with client-certificate authentication, a main one
// and an events one, are reachable from pods for tenants' kube-apiservers; a
// Secret with their client credentials is created in the cluster.
//
// NetworkPolicy is enforced, by SIG Network's kube-network-policies (see
// networkpolicy.go): between pods and between pods and the host, not on
// traffic from or to the node itself, as NetworkPolicy defines.
package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// Addresses and names of the cluster, fixed so that tests can rely on them.
const (
	// DefaultDir is where the cluster keeps its state unless told otherwise.
	DefaultDir = "/tmp/apiserver-operator-localcluster"
	// DefaultHostIP and DefaultNodeIP are the two ends of the veth pair.
	DefaultHostIP = "10.77.0.1"
	DefaultNodeIP = "10.77.0.2"
	// NodeName is the name of the cluster's only node.
	NodeName = "localcluster"
	// PodCIDR is the pod network, a bridge inside the node's namespace.
	PodCIDR = "10.88.0.0/16"
	// ServiceCIDR is the range of the cluster's Service ClusterIPs.
	ServiceCIDR = "10.96.0.0/16"
	// PauseImage is the sandbox image, built from ./pause.
	PauseImage = "localhost/apiserver-operator/pause:local"
	// APIServerImage is the bundled kube-apiserver image, tagged with the
	// bundled version (KUBE_VERSION in the Makefile).
	APIServerImage = "localhost/apiserver-operator/kube-apiserver:" + v1alpha1.BundledVersion
	// EtcdClientSecretNamespace and EtcdClientSecretName name the Secret
	// with the tenant etcd client credentials (ca.crt, tls.crt, tls.key).
	EtcdClientSecretNamespace = "default"
	EtcdClientSecretName      = "tenant-etcd-client"

	// killTimeout bounds how long Down waits for killed processes to leave
	// the cluster's cgroups.
	killTimeout = 30 * time.Second

	apiserverPort        = 6443
	tenantEtcdMainPort   = 2479
	tenantEtcdEventsPort = 2579
	s3Port               = 7070
	kubeProxyHealthzPort = 10256
	nodePrefixLen        = "24"
	nodeVeth             = "eth0"
	cniNetworkName       = "localcluster"
)

// Options configure a cluster. The zero value of every field but BinDir has
// a working default.
type Options struct {
	// Dir holds all of the cluster's state; Down removes it.
	Dir string
	// BinDir holds the binaries built by `make localcluster-binaries`.
	BinDir string
	// Images are image tarballs imported into containerd, such as those
	// that `make localcluster-binaries` writes into bin/images.
	Images []string
	// Netns is the name of the node's network namespace, HostVeth the name
	// of the host side of its link.
	Netns    string
	HostVeth string
	// HostIP and NodeIP are the addresses of the link, in a /24.
	HostIP, NodeIP string
	// CgroupName is the cgroup of the cluster, under the root of every
	// cgroup hierarchy.
	CgroupName string
	// RuncPath and CNIBinDir are where Debian installs runc and the CNI
	// plugins.
	RuncPath  string
	CNIBinDir string
	// Logf reports progress; nil is silent.
	Logf func(format string, args ...any) `json:"-"`
}

func (o Options) withDefaults() Options {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&o.Dir, DefaultDir)
	def(&o.Netns, "apiserver-operator-lc")
	def(&o.HostVeth, "aolc0")
	def(&o.HostIP, DefaultHostIP)
	def(&o.NodeIP, DefaultNodeIP)
	def(&o.CgroupName, "apiserver-operator-localcluster")
	def(&o.RuncPath, "/usr/sbin/runc")
	def(&o.CNIBinDir, "/usr/lib/cni")
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if abs, err := filepath.Abs(o.Dir); err == nil {
		o.Dir = abs
	}
	if abs, err := filepath.Abs(o.BinDir); err == nil && o.BinDir != "" {
		o.BinDir = abs
	}
	return o
}

// state is what Up records in the state directory for Down: the options,
// and what the host looked like before the first Up.
type state struct {
	Options         Options           `json:"options"`
	Sysctls         map[string]string `json:"sysctls,omitempty"`
	CreatedHostDirs []string          `json:"createdHostDirs,omitempty"`
}

// Cluster is a running local cluster.
type Cluster struct {
	l layout
}

// Dir is the cluster's state directory.
func (c *Cluster) Dir() string { return c.l.Dir }

// NodeIP is the node's address, where the apiserver and NodePorts are
// reachable from the host.
func (c *Cluster) NodeIP() string { return c.l.NodeIP }

// HostIP is the host's end of the link to the node: a non-loopback address
// for a kube-apiserver started on the host.
func (c *Cluster) HostIP() string { return c.l.HostIP }

// KubeconfigPath is the path of a cluster-admin kubeconfig.
func (c *Cluster) KubeconfigPath() string { return c.l.kubeconfig("admin") }

// RESTConfig is a cluster-admin client configuration.
func (c *Cluster) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.KubeconfigPath())
	if err != nil {
		return nil, fmt.Errorf("loading the local cluster's kubeconfig %s: %w", c.KubeconfigPath(), err)
	}
	return cfg, nil
}

// TenantEtcd are the etcd servers for tenants' kube-apiservers.
func (c *Cluster) TenantEtcd() TenantEtcd { return c.l.tenantEtcd() }

// S3 is the cluster's S3-compatible server, for tenants' backups.
type S3 struct {
	// Endpoint is host:port on the node's address, plain HTTP.
	Endpoint                     string
	AccessKeyID, SecretAccessKey string
}

// Credentials of the local cluster's S3 server: a throwaway server on a
// private address.
const (
	S3AccessKeyID     = "localcluster"
	S3SecretAccessKey = "localcluster-secret"
)

// S3 is where the cluster's S3-compatible server answers.
func (c *Cluster) S3() S3 { return c.l.s3Endpoint() }

func (l layout) s3Endpoint() S3 {
	return S3{Endpoint: l.NodeIP + ":" + strconv.Itoa(s3Port), AccessKeyID: S3AccessKeyID, SecretAccessKey: S3SecretAccessKey}
}

// TenantEtcdServer is one of the tenant etcd servers.
type TenantEtcdServer string

// The tenant etcd servers.
const (
	TenantEtcdMain   TenantEtcdServer = compTenantEtcdMain
	TenantEtcdEvents TenantEtcdServer = compTenantEtcdEvents
)

// StopTenantEtcd stops a tenant etcd server as an outage would (SIGTERM:
// clients are refused); its data stays for StartTenantEtcd.
func (c *Cluster) StopTenantEtcd(ctx context.Context, s TenantEtcdServer) error {
	comp, ok := c.l.componentsByName()[string(s)]
	if !ok {
		return fmt.Errorf("stopping tenant etcd %q: no such component", s)
	}
	return c.l.stop(ctx, comp)
}

// StartTenantEtcd starts a stopped tenant etcd server again and waits until
// both tenant etcd servers answer.
func (c *Cluster) StartTenantEtcd(ctx context.Context, s TenantEtcdServer) error {
	comp, ok := c.l.componentsByName()[string(s)]
	if !ok {
		return fmt.Errorf("starting tenant etcd %q: no such component", s)
	}
	if _, err := c.l.start(comp); err != nil {
		return err
	}
	return c.l.waitFor(ctx, "the tenant etcd servers to be healthy over TLS", []string{string(s)}, etcdReadyTimeout, c.l.tenantEtcdHealthy)
}

// MemoryUsage is the memory that the cluster's processes and pods use now.
func (c *Cluster) MemoryUsage() (MemoryUsage, error) { return c.l.cgroups().memoryUsage() }

// Up starts the cluster described by opts, or the parts of it that are not
// running, and waits until its node is Ready.
func Up(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.BinDir == "" {
		return nil, errors.New("starting the local cluster: Options.BinDir is empty: build the binaries with `make localcluster-binaries` and pass bin/")
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("starting the local cluster: it needs root (network namespaces, cgroups, mounts)")
	}
	l := newLayout(opts.withDefaults())
	if err := l.checkBinaries(); err != nil {
		return nil, err
	}
	if err := l.ensureHostPackages(ctx, l.Logf); err != nil {
		return nil, err
	}
	for _, d := range []string{l.pki.dir, l.configDir(), l.dataDir(), l.runDir(), l.logDir(), l.cniConfDir(), filepath.Join(l.runDir(), "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("creating state directory %s: %w", d, err)
		}
	}
	if err := os.Chmod(l.pki.dir, 0o700); err != nil {
		return nil, fmt.Errorf("restricting the PKI directory to root: %w", err)
	}
	if err := l.recordState(); err != nil {
		return nil, err
	}
	l.Logf("Generating the cluster's PKI and configuration under %s", l.Dir)
	if err := l.ensurePKI(); err != nil {
		return nil, err
	}
	if err := l.writeConfigs(); err != nil {
		return nil, err
	}
	if err := l.ensureNetwork(ctx); err != nil {
		return nil, err
	}
	if err := l.ensureNetworkPolicyQueue(ctx); err != nil {
		return nil, err
	}
	if err := l.cgroups().ensure(); err != nil {
		return nil, err
	}
	if err := l.startAll(ctx); err != nil {
		return nil, err
	}
	c := &Cluster{l: l}
	if err := l.ensureEtcdClientSecret(ctx); err != nil {
		return nil, err
	}
	l.Logf("Local cluster is up: KUBECONFIG=%s, apiserver %s", c.KubeconfigPath(), l.apiserverURL())
	return c, nil
}

func (l layout) checkBinaries() error {
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl", "containerd", "containerd-shim-runc-v2", "ctr", "versitygw", "metrics-server"} {
		if !exists(l.bin(b)) {
			return fmt.Errorf("starting the local cluster: %s is missing: build it with `make localcluster-binaries`", l.bin(b))
		}
	}
	for _, img := range l.Images {
		if !exists(img) {
			return fmt.Errorf("starting the local cluster: image tarball %s is missing: build it with `make localcluster-binaries`", img)
		}
	}
	if !slices.ContainsFunc(l.Images, func(img string) bool { return filepath.Base(img) == networkPolicyImageTarball }) {
		return fmt.Errorf("starting the local cluster: no image tarball %s among the images: build it with `make localcluster-binaries`", networkPolicyImageTarball)
	}
	return nil
}

// recordState writes state.json; what the host looked like is only
// recorded by the first Up.
func (l layout) recordState() error {
	st := state{}
	if b, err := os.ReadFile(l.statePath()); err == nil {
		if err := json.Unmarshal(b, &st); err != nil {
			return fmt.Errorf("reading %s: %w (run Down to clean up, then Up)", l.statePath(), err)
		}
	} else {
		st.CreatedHostDirs = missingHostPaths()
	}
	if st.Sysctls == nil {
		values, err := readSysctls()
		if err != nil {
			return err
		}
		st.Sysctls = values
	}
	st.Options = l.Options
	st.Options.Logf = nil
	return writeJSON(l.statePath(), st)
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// Down stops the cluster whose state is in dir (DefaultDir when empty) and
// removes everything it created: processes, containers, mounts, cgroups, the
// network namespace and the state directory. It succeeds when there is no
// cluster.
func Down(ctx context.Context, dir string) error {
	opts := Options{Dir: dir}
	l := newLayout(opts.withDefaults())
	st := state{}
	if b, err := os.ReadFile(l.statePath()); err == nil {
		if err := json.Unmarshal(b, &st); err != nil {
			return fmt.Errorf("reading %s: %w", l.statePath(), err)
		}
		st.Options.Dir = l.Dir
		l = newLayout(st.Options.withDefaults())
	}
	var errs []error
	// Tenant nodes first: their network hangs on the cluster node's.
	if err := l.downTenantNodes(ctx); err != nil {
		errs = append(errs, err)
	}
	// Stop kubelet first, so that it restarts nothing, then the pods'
	// processes, then the rest.
	comps := l.componentsByName()
	for _, name := range stopOrder {
		if name == compContainerd {
			if err := l.killCgroup(ctx, "kubepods"); err != nil {
				errs = append(errs, err)
			}
		}
		if err := l.stop(ctx, comps[name]); err != nil {
			errs = append(errs, err)
		}
	}
	// Whatever is left in the cluster's cgroups: containerd shims, and
	// processes of an earlier run whose PID files are gone.
	if err := l.killCgroup(ctx, ""); err != nil {
		errs = append(errs, err)
	}
	if err := unmountUnder(l.Dir); err != nil {
		errs = append(errs, err)
	}
	if err := l.removeNetwork(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := l.cgroups().remove(); err != nil {
		errs = append(errs, err)
	}
	if st.Sysctls != nil {
		if err := restoreSysctls(st.Sysctls); err != nil {
			errs = append(errs, err)
		}
	}
	if err := l.removeCNIResults(); err != nil {
		errs = append(errs, err)
	}
	for _, p := range st.CreatedHostDirs {
		if err := removeHostDir(p); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("stopping the local cluster in %s (state kept; fix the cause and run Down again): %w", l.Dir, errors.Join(errs...))
	}
	if err := os.RemoveAll(l.Dir); err != nil {
		return fmt.Errorf("removing the local cluster's state directory: %w", err)
	}
	return nil
}

// killCgroup kills every process in the cluster's cgroup subtree sub (all
// of it when sub is empty) and waits until the cgroups are empty: a killed
// process stays listed there until it has fully exited and been reaped.
func (l layout) killCgroup(ctx context.Context, sub string) error {
	deadline := time.Now().Add(killTimeout)
	for {
		pids, err := l.cgroups().pids(sub)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("processes %v of the cluster are still in its cgroups %s after SIGKILL", pids, killTimeout)
		}
		for _, pid := range pids {
			if err := syscallKill(pid); err != nil {
				return fmt.Errorf("killing process %d of the cluster: %w", pid, err)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// removeCNIResults removes libcni's cached results of the cluster's pod
// network, which libcni keeps in /var/lib/cni whatever the configuration.
func (l layout) removeCNIResults() error {
	matches, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", cniNetworkName+"-*"))
	var errs []error
	for _, m := range matches {
		if err := os.Remove(m); err != nil {
			errs = append(errs, fmt.Errorf("removing the cached CNI result %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

func (l layout) componentsByName() map[string]component {
	out := map[string]component{}
	for _, c := range l.components() {
		out[c.name] = c
	}
	return out
}

// components lists the cluster's processes in the order they start.
func (l layout) components() []component {
	return []component{
		l.clusterEtcd(),
		l.tenantEtcdComponent(compTenantEtcdMain, etcdTenantMainServer, tenantEtcdMainPort),
		l.tenantEtcdComponent(compTenantEtcdEvents, etcdTenantEvents, tenantEtcdEventsPort),
		l.s3(),
		l.apiserver(),
		l.controllerManager(),
		l.scheduler(),
		l.containerd(),
		l.kubelet(),
		l.kubeProxy(),
		l.metricsServer(),
	}
}

// clientset is a cluster-admin client.
func (l layout) clientset() (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.kubeconfig("admin"))
	if err != nil {
		return nil, fmt.Errorf("loading the admin kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating a client of the local cluster: %w", err)
	}
	return cs, nil
}
