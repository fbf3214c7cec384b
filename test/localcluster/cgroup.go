package localcluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// cgroupMount is where the host mounts its cgroup v1 hierarchies.
const cgroupMount = "/sys/fs/cgroup"

// daemonsCgroup holds the cluster's own processes, and the containerd shims
// they start; kubelet puts pods in kubepods next to it.
const daemonsCgroup = "daemons"

// cgroups is the cluster's cgroup tree, /<name> in every cgroup v1
// hierarchy of the host. kubelet uses it as its cgroupRoot; it lets Down
// find every process the cluster started, and tells how much memory the
// cluster uses.
type cgroups struct {
	name string
}

func (l layout) cgroups() cgroups { return cgroups{name: l.CgroupName} }

// hierarchies lists the mounted cgroup v1 hierarchies, such as memory and
// cpu,cpuacct; the cgroup v2 hierarchy, if any, is left out.
func hierarchies() ([]string, error) {
	return listHierarchies(false)
}

// listHierarchies lists the mounted cgroup hierarchies, with the cgroup v2
// one of a hybrid host (where runc also creates the cluster's cgroups) when
// withV2 is set.
func listHierarchies(withV2 bool) ([]string, error) {
	entries, err := os.ReadDir(cgroupMount)
	if err != nil {
		return nil, fmt.Errorf("listing cgroup hierarchies: %w", err)
	}
	var out []string
	for _, e := range entries {
		dir := filepath.Join(cgroupMount, e.Name())
		if !e.IsDir() || !exists(filepath.Join(dir, "cgroup.procs")) {
			continue
		}
		if !withV2 && exists(filepath.Join(dir, "cgroup.controllers")) { // cgroup v2
			continue
		}
		out = append(out, dir)
	}
	if len(out) == 0 {
		return nil, errors.New("no cgroup v1 hierarchy is mounted under " + cgroupMount + ": this harness needs a cgroup v1 host")
	}
	return out, nil
}

// ensure creates the cluster's cgroup and its daemons child in every
// hierarchy. cpuset cgroups start without CPUs or memory nodes; they get
// their parent's.
func (c cgroups) ensure() error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		for _, dir := range []string{filepath.Join(h, c.name), filepath.Join(h, c.name, daemonsCgroup)} {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("creating cgroup %s: %w", dir, err)
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				if err := inheritCpuset(dir, f); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func inheritCpuset(dir, file string) error {
	path := filepath.Join(dir, file)
	if !exists(path) {
		return nil
	}
	cur, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	if strings.TrimSpace(string(cur)) != "" {
		return nil
	}
	parent, err := os.ReadFile(filepath.Join(filepath.Dir(dir), file))
	if err != nil {
		return fmt.Errorf("reading the parent of %s: %w", path, err)
	}
	if err := os.WriteFile(path, parent, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// join moves pid into the cluster's child cgroup sub in every hierarchy.
func (c cgroups) join(sub string, pid int) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		procs := filepath.Join(h, c.name, sub, "cgroup.procs")
		if err := os.WriteFile(procs, []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("writing PID %d to %s: %w", pid, procs, err)
		}
	}
	return nil
}

// pids lists every process in the cluster's cgroup tree, or in its subtree
// sub when sub is not empty. The memory hierarchy holds them all.
func (c cgroups) pids(sub string) ([]int, error) {
	root := filepath.Join(cgroupMount, "memory", c.name, sub)
	seen := map[int]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				seen[pid] = true
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing the processes of cgroup %s: %w", root, err)
	}
	out := make([]int, 0, len(seen))
	for pid := range seen {
		out = append(out, pid)
	}
	sort.Ints(out)
	return out, nil
}

// remove removes the cluster's cgroup tree, deepest first, from every
// hierarchy. The cgroups must hold no process.
func (c cgroups) remove() error {
	hs, err := listHierarchies(true)
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hs {
		root := filepath.Join(h, c.name)
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		// Deeper paths are longer than their parents.
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// MemoryUsage is the memory that the cluster's processes use.
type MemoryUsage struct {
	// RSS is the anonymous memory of all processes, containers included.
	RSS int64
	// Total adds the page cache charged to them (memory.usage_in_bytes).
	Total int64
}

func (c cgroups) memoryUsage() (MemoryUsage, error) {
	dir := filepath.Join(cgroupMount, "memory", c.name)
	var u MemoryUsage
	b, err := os.ReadFile(filepath.Join(dir, "memory.usage_in_bytes"))
	if err != nil {
		return u, fmt.Errorf("reading the cluster's memory usage: %w", err)
	}
	if u.Total, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
		return u, fmt.Errorf("parsing memory.usage_in_bytes: %w", err)
	}
	stat, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return u, fmt.Errorf("reading the cluster's memory.stat: %w", err)
	}
	for _, line := range strings.Split(string(stat), "\n") {
		if v, ok := strings.CutPrefix(line, "total_rss "); ok {
			u.RSS, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return u, nil
}
