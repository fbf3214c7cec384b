package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stopGrace is how long a component may take to exit after SIGTERM before
// it is killed.
const stopGrace = 10 * time.Second

// execTimeout bounds the time nsenter takes to run a component's binary.
const execTimeout = 10 * time.Second

// daemonPath is the PATH of every component: the cluster's binaries first
// (containerd finds its shim there), then the system's (runc, iptables,
// mount).
func (l layout) daemonPath() string {
	return l.BinDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
}

func (l layout) pidFile(name string) string { return filepath.Join(l.runDir(), name+".pid") }
func (l layout) logFile(name string) string { return filepath.Join(l.logDir(), name+".log") }

// running returns the PID of component c if the process recorded in its PID
// file is still alive and still runs c's binary.
func (l layout) running(c component) (int, bool) {
	pid, err := readPID(l.pidFile(c.name))
	if err != nil || !alive(pid) {
		return 0, false
	}
	argv0, err := processArgv0(pid)
	if err != nil || argv0 != c.binary {
		return 0, false
	}
	return pid, true
}

// start runs component c in the node's network namespace (only the network
// namespace: kubelet and containerd must see the host's mounts), detached
// from the caller's session so that it outlives `localcluster up`. It does
// nothing when c already runs.
func (l layout) start(c component) (int, error) {
	if pid, ok := l.running(c); ok {
		return pid, nil
	}
	logf, err := os.OpenFile(l.logFile(c.name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, fmt.Errorf("opening the log of %s: %w", c.name, err)
	}
	// The component writes its log through its own descriptors; closing
	// ours loses nothing.
	defer func() { _ = logf.Close() }()
	if _, err := fmt.Fprintf(logf, "\n=== %s starting: %s\n", time.Now().UTC().Format(time.RFC3339), c.commandLine()); err != nil {
		return 0, fmt.Errorf("writing the log of %s: %w", c.name, err)
	}

	args := append([]string{"--net=" + l.netnsPath(), "--", c.binary}, c.args...)
	cmd := exec.Command("nsenter", args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Dir = l.Dir
	cmd.Env = []string{"PATH=" + l.daemonPath(), "HOME=" + l.Dir, "TMPDIR=" + filepath.Join(l.runDir(), "tmp")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting %s: %w", c.name, err)
	}
	pid := cmd.Process.Pid
	// Reap the process when it exits while this process lives; once this
	// process has gone, init does.
	go func() { _ = cmd.Wait() }()
	if err := os.WriteFile(l.pidFile(c.name), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return 0, fmt.Errorf("recording the PID of %s: %w", c.name, err)
	}
	if err := l.cgroups().join(daemonsCgroup, pid); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return 0, fmt.Errorf("moving %s into the cluster's cgroup: %w", c.name, err)
	}
	// Until nsenter has entered the namespace and executed the binary,
	// the process does not look like c.
	deadline := time.Now().Add(execTimeout)
	for {
		if _, ok := l.running(c); ok {
			return pid, nil
		}
		if !alive(pid) || time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			return 0, fmt.Errorf("starting %s: it exited at once or never ran its binary; the end of %s:\n%s", c.name, l.logFile(c.name), l.logTail(c.name, 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM to the recorded process of component c, then SIGKILL
// after stopGrace, and removes its PID file.
func (l layout) stop(ctx context.Context, c component) error {
	pid, ok := l.running(c)
	if ok {
		if err := terminate(ctx, pid, stopGrace); err != nil {
			return fmt.Errorf("stopping %s (PID %d): %w", c.name, pid, err)
		}
	}
	if err := os.Remove(l.pidFile(c.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the PID file of %s: %w", c.name, err)
	}
	return nil
}

// terminate sends SIGTERM to pid and waits for it to exit, killing it after
// grace.
func terminate(ctx context.Context, pid int, grace time.Duration) error {
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("sending SIGTERM: %w", err)
	}
	if waitExit(ctx, []int{pid}, grace) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("sending SIGKILL: %w", err)
	}
	if !waitExit(ctx, []int{pid}, grace) {
		return fmt.Errorf("still alive %s after SIGKILL", grace)
	}
	return nil
}

// waitExit polls until every pid has exited or timeout has passed; it
// reports whether they all exited.
func waitExit(ctx context.Context, pids []int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		left := 0
		for _, pid := range pids {
			if alive(pid) {
				left++
			}
		}
		if left == 0 {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return false
	}
	state := stat[i+2]
	return state != 'Z' && state != 'X'
}

func processArgv0(pid int) (string, error) {
	argv, err := processArgv(pid)
	if err != nil || len(argv) == 0 {
		return "", err
	}
	return argv[0], nil
}

func processArgv(pid int) ([]string, error) {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00"), nil
}

// sameCommandLine reports whether pid runs c with c's current arguments.
func sameCommandLine(pid int, c component) bool {
	argv, err := processArgv(pid)
	if err != nil {
		return false
	}
	return slices.Equal(argv, append([]string{c.binary}, c.args...))
}

func readPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("PID file %s does not hold a PID", path)
	}
	return pid, nil
}

// logTail returns the last lines of a component's log, for error messages.
func (l layout) logTail(name string, lines int) string {
	b, err := os.ReadFile(l.logFile(name))
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// run runs a short command and returns an error with its output when it fails.
func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// inNetns runs a short command in the node's network namespace.
func (l layout) inNetns(ctx context.Context, name string, args ...string) error {
	return run(ctx, "nsenter", append([]string{"--net=" + l.netnsPath(), "--", name}, args...)...)
}
