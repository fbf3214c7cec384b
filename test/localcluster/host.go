package localcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// hostRequirement is a program the cluster needs from the host and the
// Debian package that provides it.
type hostRequirement struct {
	path, pkg string
}

func (l layout) hostRequirements() []hostRequirement {
	return []hostRequirement{
		{l.RuncPath, "runc"},
		{filepath.Join(l.CNIBinDir, "bridge"), "containernetworking-plugins"},
		{filepath.Join(l.CNIBinDir, "host-local"), "containernetworking-plugins"},
		{filepath.Join(l.CNIBinDir, "loopback"), "containernetworking-plugins"},
		{filepath.Join(l.CNIBinDir, "portmap"), "containernetworking-plugins"},
		{"iptables", "iptables"},
		{"conntrack", "conntrack"},
		{"ip", "iproute2"},
		{"nsenter", "util-linux"},
	}
}

// ensureHostPackages installs the Debian packages of missing programs, with
// apt-get update first.
func (l layout) ensureHostPackages(ctx context.Context, logf func(string, ...any)) error {
	var missing []string
	seen := map[string]bool{}
	for _, r := range l.hostRequirements() {
		if _, err := exec.LookPath(r.path); err == nil || seen[r.pkg] {
			continue
		}
		seen[r.pkg] = true
		missing = append(missing, r.pkg)
	}
	if len(missing) == 0 {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("the local cluster needs root, and the Debian packages %s", strings.Join(missing, " "))
	}
	logf("Installing Debian packages %s", strings.Join(missing, " "))
	if err := run(ctx, "apt-get", "update", "-q"); err != nil {
		return fmt.Errorf("updating the package lists to install %s: %w", strings.Join(missing, " "), err)
	}
	args := append([]string{"install", "-y", "-q", "--no-install-recommends"}, missing...)
	cmd := exec.CommandContext(ctx, "apt-get", args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("installing %s: %w: %s", strings.Join(missing, " "), err, lastLines(string(out), 10))
	}
	for _, r := range l.hostRequirements() {
		if _, err := exec.LookPath(r.path); err != nil {
			return fmt.Errorf("%s is still missing after installing %s", r.path, r.pkg)
		}
	}
	return nil
}

// ensureNetwork creates the node's network namespace and the veth pair that
// links it to the host: HostIP on the host side, NodeIP inside. It changes
// nothing else in the host's namespace: no route but the link's own, no
// iptables rule, no forwarding.
func (l layout) ensureNetwork(ctx context.Context) error {
	if !exists(l.netnsPath()) {
		if err := run(ctx, "ip", "netns", "add", l.Netns); err != nil {
			return fmt.Errorf("creating the node's network namespace: %w", err)
		}
	}
	hostCIDR := l.HostIP + "/" + nodePrefixLen
	nodeCIDR := l.NodeIP + "/" + nodePrefixLen
	if !exists(filepath.Join("/sys/class/net", l.HostVeth)) {
		if err := run(ctx, "ip", "link", "add", l.HostVeth, "type", "veth", "peer", "name", nodeVeth, "netns", l.Netns); err != nil {
			return fmt.Errorf("creating the veth pair of the node: %w", err)
		}
		if err := run(ctx, "ip", "addr", "add", hostCIDR, "dev", l.HostVeth); err != nil {
			return fmt.Errorf("addressing the host side of the node's link: %w", err)
		}
		if err := run(ctx, "ip", "link", "set", l.HostVeth, "up"); err != nil {
			return fmt.Errorf("bringing up the host side of the node's link: %w", err)
		}
		steps := [][]string{
			{"ip", "addr", "add", nodeCIDR, "dev", nodeVeth},
			{"ip", "link", "set", nodeVeth, "up"},
			{"ip", "link", "set", "lo", "up"},
			{"ip", "route", "replace", "default", "via", l.HostIP},
		}
		for _, s := range steps {
			if err := l.inNetns(ctx, s[0], s[1:]...); err != nil {
				return fmt.Errorf("configuring the node's network namespace: %w", err)
			}
		}
	}
	// Pods are routed, and bridged traffic goes through iptables, in the
	// node's namespace only.
	for _, s := range []string{"net.ipv4.ip_forward=1", "net.bridge.bridge-nf-call-iptables=1"} {
		if err := l.inNetns(ctx, "sysctl", "-q", "-w", s); err != nil {
			return fmt.Errorf("setting %s in the node's network namespace: %w", s, err)
		}
	}
	return nil
}

// removeNetwork deletes the node's network namespace; the veth pair goes
// with it.
func (l layout) removeNetwork(ctx context.Context) error {
	var errs []error
	if exists(l.netnsPath()) {
		if err := run(ctx, "ip", "netns", "delete", l.Netns); err != nil {
			errs = append(errs, fmt.Errorf("deleting the node's network namespace: %w", err))
		}
	}
	// Deleting the namespace deletes the pair, but not at once.
	veth := filepath.Join("/sys/class/net", l.HostVeth)
	if exists(veth) {
		if err := run(ctx, "ip", "link", "delete", l.HostVeth); err != nil && exists(veth) {
			errs = append(errs, fmt.Errorf("deleting the host side of the node's link: %w", err))
		}
	}
	return errors.Join(errs...)
}

// kubeletSysctls are the host-wide kernel settings that kubelet sets when it
// starts; Up records them and Down puts them back.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

func readSysctls() (map[string]string, error) {
	out := map[string]string{}
	for _, k := range kubeletSysctls {
		b, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			return nil, fmt.Errorf("reading sysctl %s: %w", k, err)
		}
		out[k] = strings.TrimSpace(string(b))
	}
	return out, nil
}

func restoreSysctls(values map[string]string) error {
	var errs []error
	for k, v := range values {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring sysctl %s: %w", k, err))
		}
	}
	return errors.Join(errs...)
}

// hostPaths are directories outside the state directory that containerd
// (shim sockets), kubelet (container log links, the device plugin socket),
// libcni (its result cache), libmount and `ip netns` create whatever they
// are told; Down removes those that did not exist before the first Up.
var hostPaths = []string{"/run/containerd", "/var/lib/cni", "/var/log/containers", "/var/lib/kubelet", "/run/mount", "/run/netns"}

func missingHostPaths() []string {
	var out []string
	for _, p := range hostPaths {
		if !exists(p) {
			out = append(out, p)
		}
	}
	return out
}

// removeHostDir removes a directory that the cluster created outside its
// state directory. /run/netns may hold other namespaces by now: it is only
// removed when empty.
func removeHostDir(p string) error {
	if p == "/run/netns" && !isEmptyDir(p) {
		return nil
	}
	if err := unmountUnder(p); err != nil {
		return err
	}
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("removing %s: %w", p, err)
	}
	return nil
}

// isEmptyDir reports whether p is a directory that can be read and holds
// nothing.
func isEmptyDir(p string) bool {
	entries, err := os.ReadDir(p)
	return err == nil && len(entries) == 0
}

// unmountUnder unmounts every mount point under the given directories,
// deepest first: kubelet's volumes and its root directory, containerd's
// overlay root filesystems, sandbox shm and network namespace mounts.
func unmountUnder(dirs ...string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("reading the mount table: %w", err)
	}
	defer func() { _ = f.Close() }()
	var points []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountPath(fields[4])
		for _, d := range dirs {
			if mp == d || strings.HasPrefix(mp, d+"/") {
				points = append(points, mp)
				break
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading the mount table: %w", err)
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, mp := range points {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", mp, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMountPath undoes the octal escapes of /proc/self/mountinfo.
func unescapeMountPath(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
