// Package bench measures the operator as users run it: the manager binary,
// started as its own process, against the bundled kube-apiserver and etcd.
// Its CPU time and peak RSS come from /proc, its API requests and reconciles
// from its own metrics endpoint. Run the benchmarks with `make bench`; the
// output is the standard benchmark format, for benchstat.
package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"

	"github.com/apiserver-operator/apiserver-operator/test/envtest"
	"github.com/apiserver-operator/apiserver-operator/test/testport"
)

var (
	buildOnce   sync.Once
	managerDir  string
	managerPath string
	buildErr    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if managerDir != "" {
		_ = os.RemoveAll(managerDir)
	}
	os.Exit(code)
}

// managerBinary builds the operator from this tree, once per run, so that
// what is measured is the code under test and not a stale bin/manager.
func managerBinary(b testing.TB) string {
	b.Helper()
	buildOnce.Do(func() {
		managerDir, buildErr = os.MkdirTemp("", "bench-manager-")
		if buildErr != nil {
			return
		}
		managerPath = filepath.Join(managerDir, "manager")
		cmd := exec.Command("go", "build", "-o", managerPath, ".")
		cmd.Dir = envtest.RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building the manager: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		b.Fatal(buildErr)
	}
	return managerPath
}

// operator is a running manager process.
type operator struct {
	cmd        *exec.Cmd
	proc       procfs.Proc
	metricsURL string
	pprofURL   string
	logPath    string
	exited     chan struct{}
}

func freePort(b testing.TB) string {
	b.Helper()
	return strconv.Itoa(testport.Get(b))
}

// startOperator starts the manager against env, without webhooks (unless
// extraArgs turn them on) or leader election, and waits until its controller runs workers. It is stopped
// when the benchmark ends.
func startOperator(b testing.TB, env *envtest.Environment, extraArgs ...string) *operator {
	b.Helper()
	metricsAddr, pprofAddr := "127.0.0.1:"+freePort(b), "127.0.0.1:"+freePort(b)
	o := &operator{
		metricsURL: "http://" + metricsAddr + "/metrics",
		pprofURL:   "http://" + pprofAddr + "/debug/pprof",
		logPath:    filepath.Join(b.TempDir(), "operator.log"),
		exited:     make(chan struct{}),
	}
	logFile, err := os.Create(o.logPath)
	if err != nil {
		b.Fatal(err)
	}
	args := []string{"--kubeconfig", env.KubeconfigPath, "--webhooks=false", "--leader-elect=false",
		"--ownership-key-secret=kube-system/apiserver-operator-ownership-key",
		"--metrics-bind-address", metricsAddr, "--metrics-secure=false", "--health-probe-bind-address", "127.0.0.1:" + freePort(b),
		"--pprof-bind-address", pprofAddr}
	o.cmd = exec.Command(managerBinary(b), append(args, extraArgs...)...)
	o.cmd.Stdout, o.cmd.Stderr = logFile, logFile
	// The manager dies with the benchmark, even one killed by a timeout.
	o.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := o.cmd.Start(); err != nil {
		_ = logFile.Close()
		b.Fatalf("starting the manager: %v", err)
	}
	go func() {
		_ = o.cmd.Wait()
		// The manager wrote the log through its own descriptors; closing
		// ours loses nothing.
		_ = logFile.Close()
		close(o.exited)
	}()
	b.Cleanup(func() { o.stop(b) })
	if o.proc, err = procfs.NewProc(o.cmd.Process.Pid); err != nil {
		b.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; {
		if o.logContains("Starting workers") {
			return o
		}
		select {
		case <-o.exited:
			b.Fatalf("the manager exited while starting:\n%s", o.logTail())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Fatalf("the manager did not start its workers within a minute:\n%s", o.logTail())
		}
	}
}

func (o *operator) logContains(s string) bool {
	data, err := os.ReadFile(o.logPath)
	return err == nil && strings.Contains(string(data), s)
}

// logTail is the end of the manager's log, for a failure message.
func (o *operator) logTail() string {
	f, err := os.Open(o.logPath)
	if err != nil {
		return err.Error()
	}
	defer func() { _ = f.Close() }()
	var lines []string
	for s := bufio.NewScanner(f); s.Scan(); {
		lines = append(lines, s.Text())
	}
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}

// stop sends SIGTERM and waits, bounded, for the manager to exit.
func (o *operator) stop(b testing.TB) {
	b.Helper()
	select {
	case <-o.exited:
		return
	default:
	}
	_ = o.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-o.exited:
	case <-time.After(30 * time.Second):
		_ = o.cmd.Process.Kill()
		<-o.exited
		b.Errorf("the manager did not stop within 30 s of SIGTERM")
	}
}

// usage is what the manager process used so far.
type usage struct {
	cpuSeconds float64
	peakRSS    uint64 // bytes, the high-water mark since the process started
}

func (o *operator) usage(b testing.TB) usage {
	b.Helper()
	stat, err := o.proc.Stat()
	if err != nil {
		b.Fatalf("reading the manager's CPU time: %v", err)
	}
	status, err := o.proc.NewStatus()
	if err != nil {
		b.Fatalf("reading the manager's memory: %v", err)
	}
	return usage{cpuSeconds: stat.CPUTime(), peakRSS: status.VmHWM}
}

// waitIdle waits, bounded, until the operator has nothing queued, no
// worker busy and no reconcile for a second: the passes that follow a
// batch's convergence (an owned object's event brings its owner back) are
// part of what the batch cost.
func (o *operator) waitIdle(b testing.TB, timeout time.Duration) counters {
	b.Helper()
	deadline := time.Now().Add(timeout)
	last := o.counters(b)
	quietSince := time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		c := o.counters(b)
		if c.reconciles != last.reconciles || c.queued > 0 || c.busy > 0 {
			quietSince = time.Now()
		} else if time.Since(quietSince) >= time.Second {
			return c
		}
		last = c
	}
	b.Fatalf("the operator was still busy %s after the batch converged (%.0f queued, %.0f workers busy)", timeout, last.queued, last.busy)
	return last
}

// rest is what the operator costs at rest, between two completed rounds
// of its etcd watch (its only periodic work): bounded by timeout.
type restCost struct {
	window     time.Duration
	cpuSeconds float64
	counters   counters
}

func (o *operator) atRest(b testing.TB, timeout time.Duration) restCost {
	b.Helper()
	waitRound := func(after float64) counters {
		deadline := time.Now().Add(timeout)
		for time.Now().Before(deadline) {
			if c := o.counters(b); c.etcdRounds > after {
				return c
			}
			time.Sleep(200 * time.Millisecond)
		}
		b.Fatalf("the etcd watch completed no round within %s", timeout)
		return counters{}
	}
	c0 := waitRound(o.counters(b).etcdRounds)
	u0, t0 := o.usage(b), time.Now()
	c1 := waitRound(c0.etcdRounds + 1)
	return restCost{window: time.Since(t0), cpuSeconds: o.usage(b).cpuSeconds - u0.cpuSeconds, counters: c1.sub(c0)}
}

// controlPlaneCPU is the CPU time, in seconds, of the kube-apiserver and
// etcd this test process started: what the operator's load costs the
// management cluster.
func controlPlaneCPU(b testing.TB) float64 {
	b.Helper()
	procs, err := procfs.AllProcs()
	if err != nil {
		b.Fatalf("listing processes: %v", err)
	}
	var cpu float64
	for _, p := range procs {
		stat, err := p.Stat()
		if err != nil || stat.PPID != os.Getpid() || (stat.Comm != "kube-apiserver" && stat.Comm != "etcd") {
			continue
		}
		cpu += stat.CPUTime()
	}
	return cpu
}

// counters are the manager's cumulative API requests and reconciles, from
// its metrics: client-go's rest_client_requests_total counts every request
// the manager sends, reads, watches and writes alike.
type counters struct {
	requests, writes, reconciles float64
	// Gauges, at the time of the scrape: the controller's queue and busy
	// workers.
	queued, busy float64
	// etcdRounds are the etcd watch's completed rounds, etcdLooks the
	// status requests it sent.
	etcdRounds, etcdLooks float64
}

func (c counters) sub(d counters) counters {
	return counters{requests: c.requests - d.requests, writes: c.writes - d.writes, reconciles: c.reconciles - d.reconciles,
		etcdRounds: c.etcdRounds - d.etcdRounds, etcdLooks: c.etcdLooks - d.etcdLooks}
}

func (c counters) add(d counters) counters {
	return counters{requests: c.requests + d.requests, writes: c.writes + d.writes, reconciles: c.reconciles + d.reconciles}
}

func (o *operator) counters(b testing.TB) counters {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body, err := httpGet(ctx, o.metricsURL)
	if err != nil {
		b.Fatalf("scraping the manager's metrics: %v", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		b.Fatalf("parsing the manager's metrics: %v", err)
	}
	var c counters
	requests, ok := families["rest_client_requests_total"]
	if !ok {
		b.Fatal("the manager exports no rest_client_requests_total")
	}
	for _, m := range requests.GetMetric() {
		v := m.GetCounter().GetValue()
		c.requests += v
		for _, l := range m.GetLabel() {
			if l.GetName() == "method" && l.GetValue() != http.MethodGet {
				c.writes += v
			}
		}
	}
	for family, label := range map[string]string{"workqueue_depth": "name", "controller_runtime_active_workers": "controller"} {
		for _, m := range families[family].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == "apiserverconfig" {
					if family == "workqueue_depth" {
						c.queued += m.GetGauge().GetValue()
					} else {
						c.busy += m.GetGauge().GetValue()
					}
				}
			}
		}
	}
	for family, v := range map[string]*float64{"apiserver_operator_etcd_watch_rounds_total": &c.etcdRounds, "apiserver_operator_etcd_watch_looks_total": &c.etcdLooks} {
		for _, m := range families[family].GetMetric() {
			*v += m.GetCounter().GetValue()
		}
	}
	if reconciles, ok := families["controller_runtime_reconcile_total"]; ok {
		for _, m := range reconciles.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "apiserverconfig" {
					c.reconciles += m.GetCounter().GetValue()
				}
			}
		}
	}
	return c
}
