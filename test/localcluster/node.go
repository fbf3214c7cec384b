package localcluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// A tenant node is a kubelet, with a containerd of its own, registered to
// a tenant's kube-apiserver instead of the cluster's: the node a platform's
// customer runs elsewhere. It lives in a network namespace of its own,
// linked to the cluster node's namespace (which routes for it) and behind
// NAT: it dials out to the cluster node's address, where the tenant's
// NodePorts are, and takes no connection that it did not open. So the
// tenant's apiserver, a pod of the cluster, cannot reach its kubelet but
// through a tunnel that the node opened (konnectivity).
//
// Its state is under the cluster's directory, in nodes/<name>; Down stops
// it with the cluster.

// tenantNodesDir holds the tenant nodes' directories.
const tenantNodesDir = "nodes"

// MaxTenantNodes bounds NodeOptions.Index.
const MaxTenantNodes = 250

var tenantNodeName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$`)

// NodeOptions describe a tenant node.
type NodeOptions struct {
	// Name is the node's name in the tenant (a DNS label of at most 40
	// characters), and the name of its directory.
	Name string
	// Index numbers the tenant nodes that run at once, from 0: the node's
	// link is 10.66.<Index>.0/24 (TenantNodeIP) and its pods are
	// 10.89.<Index>.0/24.
	Index int
	// Kubeconfig is kubelet's: the tenant apiserver's address as the node
	// reaches it (a NodePort on the cluster node's address) and a client
	// certificate of system:node:<Name>, group system:nodes.
	Kubeconfig []byte
	// ClientCA verifies kubelet's callers (the tenant apiserver's kubelet
	// client certificate). SetClientCA replaces it; kubelet re-reads it.
	ClientCA []byte
	// ServingCert and ServingKey are kubelet's serving certificate, for
	// TenantNodeIP(Index): what the tenant apiserver verifies with its
	// --kubelet-certificate-authority.
	ServingCert, ServingKey []byte
	// Images are image tarballs to import into the node's containerd: the
	// pause image and those of the pods the node is to run.
	Images []string
}

// TenantNodeIP is the address of the tenant node of that index.
func TenantNodeIP(index int) string { return "10.66." + strconv.Itoa(index) + ".2" }

// Node is a running tenant node.
type Node struct {
	l, parent layout
}

// tenantNode is the layout of the tenant node called name.
func (l layout) tenantNode(name string, index int) layout {
	sum := sha256.Sum256([]byte(name))
	id := hex.EncodeToString(sum[:])[:8]
	prefix := "10.66." + strconv.Itoa(index) + "."
	n := newLayout(Options{
		Dir:        filepath.Join(l.Dir, tenantNodesDir, name),
		BinDir:     l.BinDir,
		Netns:      l.Netns + "-" + id,
		HostVeth:   "aotn" + id,
		HostIP:     prefix + "1",
		NodeIP:     prefix + "2",
		CgroupName: l.CgroupName + "-" + name,
		RuncPath:   l.RuncPath,
		CNIBinDir:  l.CNIBinDir,
		Logf:       l.Logf,
	})
	n.nodeName, n.podCIDR = name, "10.89."+strconv.Itoa(index)+".0/24"
	return n
}

// StartNode starts a tenant node. It returns once kubelet runs: whether
// the node registers and turns Ready is the tenant's to say.
func (c *Cluster) StartNode(ctx context.Context, opts NodeOptions) (*Node, error) {
	if !tenantNodeName.MatchString(opts.Name) {
		return nil, fmt.Errorf("starting tenant node %q: the name must be a DNS label of at most 40 characters", opts.Name)
	}
	if opts.Index < 0 || opts.Index >= MaxTenantNodes {
		return nil, fmt.Errorf("starting tenant node %s: index %d is not in [0, %d)", opts.Name, opts.Index, MaxTenantNodes)
	}
	n := &Node{l: c.l.tenantNode(opts.Name, opts.Index), parent: c.l}
	n.l.Images = opts.Images
	if err := n.start(ctx, opts); err != nil {
		// The logs go with the node: the error keeps their end.
		err = fmt.Errorf("starting tenant node %s: %w; the end of containerd's log:\n%s\nthe end of kubelet's log:\n%s",
			opts.Name, err, n.l.logTail(compContainerd, 10), n.l.logTail(compKubelet, 10))
		// Nothing half made stays behind: the next start begins anew.
		if downErr := c.l.downTenantNode(ctx, opts.Name); downErr != nil {
			err = errors.Join(err, downErr)
		}
		return nil, err
	}
	return n, nil
}

func (n *Node) start(ctx context.Context, opts NodeOptions) error {
	l := n.l
	for _, d := range []string{l.pki.dir, l.configDir(), l.dataDir(), l.runDir(), l.logDir(), l.cniConfDir(), filepath.Join(l.runDir(), "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("creating state directory %s: %w", d, err)
		}
	}
	// Down needs the index to find the node's NAT rule.
	if err := os.WriteFile(filepath.Join(l.Dir, "index"), []byte(strconv.Itoa(opts.Index)+"\n"), 0o644); err != nil {
		return fmt.Errorf("recording the tenant node's index: %w", err)
	}
	cni, err := cniConfig(l)
	if err != nil {
		return err
	}
	kubelet, err := kubeletConfig(l)
	if err != nil {
		return err
	}
	files := []struct {
		path    string
		content []byte
		mode    os.FileMode
	}{
		{l.pki.CertFile(clusterCA), opts.ClientCA, 0o644},
		{l.pki.CertFile(kubeletServing), opts.ServingCert, 0o644},
		{l.pki.KeyFile(kubeletServing), opts.ServingKey, 0o600},
		{l.kubeconfig(compKubelet), opts.Kubeconfig, 0o600},
		{filepath.Join(l.configDir(), "containerd.toml"), []byte(containerdConfig(l)), 0o644},
		{filepath.Join(l.cniConfDir(), "10-localcluster.conflist"), cni, 0o644},
		{filepath.Join(l.configDir(), "kubelet.yaml"), kubelet, 0o644},
	}
	for _, f := range files {
		if len(f.content) == 0 {
			return fmt.Errorf("writing %s: NodeOptions leave it empty", f.path)
		}
		if err := writeFileIfChanged(f.path, f.content, f.mode); err != nil {
			return err
		}
	}
	if err := n.ensureNetwork(ctx); err != nil {
		return err
	}
	if err := l.cgroups().ensure(); err != nil {
		return err
	}
	if _, err := l.start(l.containerd()); err != nil {
		return err
	}
	if err := l.waitFor(ctx, "the tenant node's containerd to answer", []string{compContainerd}, containerdTimeout, l.containerdReady); err != nil {
		return err
	}
	if err := l.importImages(ctx); err != nil {
		return err
	}
	if _, err := l.start(l.kubelet()); err != nil {
		return err
	}
	return nil
}

// componentsByName of a tenant node: waitFor and Running look them up.
func (n *Node) components() []component { return []component{n.l.containerd(), n.l.kubelet()} }

// IP is the node's address (its InternalIP in the tenant).
func (n *Node) IP() string { return n.l.NodeIP }

// Running reports an error, with the end of its log, when containerd or
// kubelet of the node has exited.
func (n *Node) Running() error {
	for _, c := range n.components() {
		if _, ok := n.l.running(c); !ok {
			return fmt.Errorf("%s of tenant node %s exited; the end of %s:\n%s", c.name, n.l.nodeName, n.l.logFile(c.name), n.l.logTail(c.name, 20))
		}
	}
	return nil
}

// LogFile is the log of the node's kubelet.
func (n *Node) LogFile() string { return n.l.logFile(compKubelet) }

// SetClientCA replaces the CA bundle that kubelet verifies its callers
// with, as a platform that follows the tenant's CA rotation does; kubelet
// re-reads the file.
func (n *Node) SetClientCA(pem []byte) error {
	return writeFileIfChanged(n.l.pki.CertFile(clusterCA), pem, 0o644)
}

// Stop stops the node and removes everything it created.
func (n *Node) Stop(ctx context.Context) error {
	return n.parent.downTenantNode(ctx, n.l.nodeName)
}

// ensureNetwork links the node's namespace to the cluster node's: the
// cluster node routes for it and masquerades what it sends, and the node
// drops every connection it did not open.
func (n *Node) ensureNetwork(ctx context.Context) error {
	l, parent := n.l, n.parent
	if !exists(l.netnsPath()) {
		if err := run(ctx, "ip", "netns", "add", l.Netns); err != nil {
			return fmt.Errorf("creating the tenant node's network namespace: %w", err)
		}
	}
	subnet := l.HostIP + "/" + nodePrefixLen
	if err := l.inNetns(ctx, "ip", "link", "show", nodeVeth); err != nil {
		steps := []struct {
			in   *layout
			args []string
		}{
			{nil, []string{"ip", "link", "add", l.HostVeth, "type", "veth", "peer", "name", nodeVeth, "netns", l.Netns}},
			{nil, []string{"ip", "link", "set", l.HostVeth, "netns", parent.Netns}},
			{&parent, []string{"ip", "addr", "add", subnet, "dev", l.HostVeth}},
			{&parent, []string{"ip", "link", "set", l.HostVeth, "up"}},
			{&l, []string{"ip", "addr", "add", l.NodeIP + "/" + nodePrefixLen, "dev", nodeVeth}},
			{&l, []string{"ip", "link", "set", nodeVeth, "up"}},
			{&l, []string{"ip", "link", "set", "lo", "up"}},
			{&l, []string{"ip", "route", "replace", "default", "via", l.HostIP}},
		}
		for _, s := range steps {
			var err error
			if s.in == nil {
				err = run(ctx, s.args[0], s.args[1:]...)
			} else {
				err = s.in.inNetns(ctx, s.args[0], s.args[1:]...)
			}
			if err != nil {
				return fmt.Errorf("linking the tenant node to the cluster node: %w", err)
			}
		}
	}
	for _, s := range []string{"net.ipv4.ip_forward=1", "net.bridge.bridge-nf-call-iptables=1"} {
		if err := l.inNetns(ctx, "sysctl", "-q", "-w", s); err != nil {
			return fmt.Errorf("setting %s in the tenant node's network namespace: %w", s, err)
		}
	}
	// Behind NAT: what the node did not open does not reach it, nor its
	// pods; its own address and its pods talk to each other.
	rules := []struct {
		in    *layout
		table string
		chain string
		rule  []string
	}{
		{&l, "filter", "INPUT", []string{"-i", "lo", "-j", "ACCEPT"}},
		{&l, "filter", "INPUT", []string{"-i", nodeVeth, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"}},
		{&l, "filter", "INPUT", []string{"-i", nodeVeth, "-j", "DROP"}},
		{&l, "filter", "FORWARD", []string{"-i", nodeVeth, "-m", "conntrack", "--ctstate", "NEW", "-j", "DROP"}},
		{&parent, "nat", "POSTROUTING", n.masquerade()},
	}
	for _, r := range rules {
		check := append([]string{"-w", "-t", r.table, "-C", r.chain}, r.rule...)
		if r.in.inNetns(ctx, "iptables", check...) == nil {
			continue
		}
		add := append([]string{"-w", "-t", r.table, "-A", r.chain}, r.rule...)
		if err := r.in.inNetns(ctx, "iptables", add...); err != nil {
			return fmt.Errorf("putting the tenant node behind NAT: %w", err)
		}
	}
	return nil
}

// masquerade is the cluster node's rule that hides the tenant node's
// address behind its own.
func (n *Node) masquerade() []string {
	subnet := n.l.HostIP + "/" + nodePrefixLen
	return []string{"-s", subnet, "!", "-d", subnet, "-j", "MASQUERADE"}
}

// downTenantNode stops the tenant node called name and removes its
// processes, mounts, network namespace, cgroups and directory.
func (l layout) downTenantNode(ctx context.Context, name string) error {
	index := -1 // unknown: only the NAT rule needs it, and it goes with the cluster node
	if b, err := os.ReadFile(filepath.Join(l.Dir, tenantNodesDir, name, "index")); err == nil {
		if i, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			index = i
		}
	}
	n := &Node{l: l.tenantNode(name, max(index, 0)), parent: l}
	var errs []error
	if err := n.l.stop(ctx, n.l.kubelet()); err != nil {
		errs = append(errs, err)
	}
	if err := n.l.killCgroup(ctx, ""); err != nil {
		errs = append(errs, err)
	}
	if err := unmountUnder(n.l.Dir); err != nil {
		errs = append(errs, err)
	}
	if exists(n.l.netnsPath()) {
		if err := run(ctx, "ip", "netns", "delete", n.l.Netns); err != nil {
			errs = append(errs, fmt.Errorf("deleting the tenant node's network namespace: %w", err))
		}
	}
	// The link's address went with the namespace; the cluster node's NAT
	// rule did not.
	rule := n.masquerade()
	if index >= 0 && exists(l.netnsPath()) && l.inNetns(ctx, "iptables", append([]string{"-w", "-t", "nat", "-C", "POSTROUTING"}, rule...)...) == nil {
		if err := l.inNetns(ctx, "iptables", append([]string{"-w", "-t", "nat", "-D", "POSTROUTING"}, rule...)...); err != nil {
			errs = append(errs, fmt.Errorf("removing the tenant node's NAT rule: %w", err))
		}
	}
	if err := n.l.cgroups().remove(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("stopping tenant node %s: %w", name, errors.Join(errs...))
	}
	if err := os.RemoveAll(n.l.Dir); err != nil {
		return fmt.Errorf("removing the directory of tenant node %s: %w", name, err)
	}
	return nil
}

// downTenantNodes stops every tenant node of the cluster.
func (l layout) downTenantNodes(ctx context.Context) error {
	entries, err := os.ReadDir(filepath.Join(l.Dir, tenantNodesDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing the tenant nodes: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() {
			errs = append(errs, l.downTenantNode(ctx, e.Name()))
		}
	}
	return errors.Join(errs...)
}
