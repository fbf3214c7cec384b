package validatorpool

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeValidator writes a validator of v1.37.1 that answers with script's
// behaviour after printing "ready": it records its PID in dir/started-PID.
func fakeValidator(t *testing.T, dir, answer string) {
	t.Helper()
	const version = "v1.37.1"
	script := "#!/bin/sh\n[ \"$1\" = --generate-loopback-cert-key ] && exit 1\ntouch " + dir + "/started-$$\necho ready\n" + answer + "\n"
	if err := os.WriteFile(filepath.Join(dir, BinaryPrefix+version), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

func started(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "started-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestPool_OneProcessPerRequestAndOneWaiting(t *testing.T) {
	dir := t.TempDir()
	// The answer carries the process's PID as the version.
	fakeValidator(t, dir, `cat >/dev/null; echo "{\"version\":\"$$\",\"problems\":[{\"flags\":[\"x\"],\"message\":\"no\"}]}"`)
	p := NewPool(dir)
	defer p.Close()
	if got := p.Versions(); len(got) != 1 || got[0] != "v1.37.1" || !p.Has("v1.37.1") || p.Has("v1.36.4") {
		t.Fatalf("Versions() = %v", got)
	}

	p.Warm()
	waitFor(t, func() bool { return len(started(t, dir)) == 1 })
	warm := strings.TrimPrefix(filepath.Base(started(t, dir)[0]), "started-")

	first, err := p.Validate(context.Background(), "v1.37.1", Request{Args: []string{"--x=1"}})
	if err != nil {
		t.Fatal(err)
	}
	if first.Version != warm {
		t.Fatalf("the first request was judged by process %s, not by the waiting one %s", first.Version, warm)
	}
	if len(first.Problems) != 1 || first.Problems[0].Message != "no" {
		t.Fatalf("the answer was not read: %+v", first)
	}
	// The next process is started after the request and waits for the
	// next one.
	waitFor(t, func() bool { return p.waitingPID() != "" })
	next := p.waitingPID()
	second, err := p.Validate(context.Background(), "v1.37.1", Request{})
	if err != nil {
		t.Fatal(err)
	}
	if second.Version == first.Version {
		t.Fatal("one process judged two requests: kube-apiserver's global state would leak between them")
	}
	if second.Version != next {
		t.Fatalf("the second request was judged by process %s, not by the waiting one %s", second.Version, next)
	}
	waitFor(t, func() bool { w := p.waitingPID(); return w != "" && w != next })
	waiting := p.waitingPID()

	// The same request again is answered from memory: the answer is the
	// first process's, and the waiting process was not taken.
	again, err := p.Validate(context.Background(), "v1.37.1", Request{Args: []string{"--x=1"}})
	if err != nil {
		t.Fatal(err)
	}
	if again.Version != first.Version {
		t.Fatalf("a repeated request was judged again, by process %s", again.Version)
	}
	if w := p.waitingPID(); w != waiting {
		t.Fatalf("a repeated request took the waiting process %s (now waiting: %q)", waiting, w)
	}
	p.mu.Lock()
	n := len(p.waiting)
	p.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d processes wait, want 1", n)
	}
}

func TestPool_NoAnswerIsAnError(t *testing.T) {
	cases := map[string]string{
		"exits without answering": "exit 3",
		"answers garbage":         "echo '{not json'",
		"hangs":                   "sleep 30",
	}
	for name, answer := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			fakeValidator(t, dir, answer)
			p := NewPool(dir)
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			res, err := p.Validate(ctx, "v1.37.1", Request{})
			if err == nil {
				t.Fatalf("no error, result %+v", res)
			}
			t.Logf("Error as expected: %v", err)
			// The process is gone: none of them is left running.
			for _, f := range started(t, dir) {
				pid := strings.TrimPrefix(filepath.Base(f), "started-")
				waitFor(t, func() bool {
					_, err := os.Stat("/proc/" + pid)
					return os.IsNotExist(err) || p.waitingPID() == pid
				})
			}
		})
	}
}

func TestPool_UnknownVersion(t *testing.T) {
	_, err := NewPool(t.TempDir()).Validate(context.Background(), "v1.99.0", Request{})
	if err == nil || !strings.Contains(err.Error(), "no validator") {
		t.Fatalf("want ErrNoValidator, got %v", err)
	}
}

// waitingPID is the PID of the waiting process, if any.
func (p *Pool) waitingPID() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, proc := range p.waiting {
		return strconv.Itoa(proc.cmd.Process.Pid)
	}
	return ""
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 100 {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("condition not met within 5s")
}

// tenantRequest is a request of one tenant of a fleet: its own etcd
// servers and prefix.
func tenantRequest(i int) Request {
	return Request{Args: []string{
		"--etcd-servers=https://etcd-" + strconv.Itoa(i) + ".tenants:2379",
		"--etcd-prefix=/tenants/t" + strconv.Itoa(i),
		"--etcd-servers-overrides=/events#https://events-" + strconv.Itoa(i) + ":2379",
		"--secure-port=6443",
	}}
}

func TestPool_EquivalentRequestsShareAnAcceptanceOnly(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer string
		exact  bool
		shared bool
	}{
		{"an acceptance is shared", `{"version":"$$"}`, false, true},
		{"a refusal is not", `{"version":"$$","problems":[{"message":"no"}]}`, false, false},
		{"nothing is shared by an exact pool", `{"version":"$$"}`, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			fakeValidator(t, dir, "cat >/dev/null; echo '"+strings.ReplaceAll(tc.answer, "$$", `'$$'`)+"'")
			var opts []Option
			if tc.exact {
				opts = append(opts, Exact())
			}
			p := NewPool(dir, opts...)
			defer p.Close()
			first, err := p.Validate(context.Background(), "v1.37.1", tenantRequest(1))
			if err != nil {
				t.Fatal(err)
			}
			second, err := p.Validate(context.Background(), "v1.37.1", tenantRequest(2))
			if err != nil {
				t.Fatal(err)
			}
			if shared := second.Version == first.Version; shared != tc.shared {
				t.Fatalf("the second tenant's request answered by process %s, the first's by %s: shared %v, want %v", second.Version, first.Version, shared, tc.shared)
			}
			// A request that differs in anything else is judged on its own.
			other := tenantRequest(3)
			other.Args[3] = "--secure-port=443"
			third, err := p.Validate(context.Background(), "v1.37.1", other)
			if err != nil {
				t.Fatal(err)
			}
			if third.Version == first.Version || third.Version == second.Version {
				t.Fatalf("a request with another --secure-port was answered from memory (process %s)", third.Version)
			}
		})
	}
}

func TestPool_ABurstOfEquivalentRequestsIsJudgedOnce(t *testing.T) {
	dir := t.TempDir()
	// Each judgement takes a while, so that the burst arrives while the
	// first is under way.
	fakeValidator(t, dir, `cat >/dev/null; sleep 0.5; echo "{\"version\":\"$$\"}"`)
	p := NewPool(dir)
	defer p.Close()
	results := make(chan *Result, 16)
	for i := range 16 {
		go func() {
			res, err := p.Validate(context.Background(), "v1.37.1", tenantRequest(i))
			if err != nil {
				t.Error(err)
			}
			results <- res
		}()
	}
	judges := map[string]bool{}
	for range 16 {
		if res := <-results; res != nil {
			judges[res.Version] = true
		}
	}
	if len(judges) != 1 {
		t.Fatalf("16 equivalent requests at once were judged by %d processes, want 1", len(judges))
	}
}

func TestEquivalent_KeepsWhatIsJudged(t *testing.T) {
	class, ok := Equivalent(tenantRequest(1))
	if !ok {
		t.Fatal("a tenant's request is not shareable")
	}
	want := []string{"--etcd-servers=https://etcd.invalid:2379", "--etcd-prefix=/registry",
		"--etcd-servers-overrides=/events#https://etcd.invalid:2379", "--secure-port=6443"}
	if !slices.Equal(class.Args, want) {
		t.Fatalf("Equivalent = %q, want %q", class.Args, want)
	}
	// Forms outside those whose values start-up does not judge: judged on
	// their own.
	for _, arg := range []string{
		"--etcd-prefix=registry", "--etcd-prefix=/a b", "--etcd-prefix=/" + strings.Repeat("x", 128),
		"--etcd-servers=unix:///run/etcd.sock", "--etcd-servers=https://etcd", "--etcd-servers=https://u:p@etcd:2379",
		"--etcd-servers=https://etcd:2379/path", "--etcd-servers=https://etcd:2379?x=1", "--etcd-servers=",
		"--etcd-servers-overrides=/events", "--etcd-servers-overrides=/events#etcd:2379",
	} {
		if _, ok := Equivalent(Request{Args: []string{arg}}); ok {
			t.Errorf("%s is shared with other values", arg)
		}
	}
	// The scheme and the number of servers are kept.
	a, _ := Equivalent(Request{Args: []string{"--etcd-servers=http://a:1,http://b:2"}})
	b, _ := Equivalent(Request{Args: []string{"--etcd-servers=https://a:1"}})
	if slices.Equal(a.Args, b.Args) {
		t.Fatal("two http servers and one https server are one class")
	}
}

// A namespace that sends a stream of distinct specs, each of which takes a
// validator, delays another namespace's spec by a turn, not by the stream:
// without turns, the other spec would wait behind every request queued
// before it and miss its deadline, which is the flood's too (the webhook's
// budget).
func TestPool_AQueueFloodingTheValidatorsDelaysAnotherByATurn(t *testing.T) {
	dir := t.TempDir()
	fakeValidator(t, dir, `cat >/dev/null; sleep 0.1; echo '{"version":"v1.37.1","problems":[{"message":"no"}]}'`)
	p := NewPool(dir)
	defer p.Close()

	const budget = 3 * time.Second
	flooders := 40 * Concurrency() // 4 s of judging queued: more than the budget
	stop := make(chan struct{})
	done := make(chan struct{}, flooders)
	var timedOut atomic.Int64
	for i := range flooders {
		go func() {
			defer func() { done <- struct{}{} }()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), budget)
				_, err := p.Validate(ctx, "v1.37.1", Request{Args: []string{fmt.Sprintf("--flood=%d-%d", i, j)}, Queue: "flood"})
				cancel()
				if err != nil {
					timedOut.Add(1) // some give up waiting: the queue forgets them
				}
			}
		}()
	}
	// The flood holds every validator and a queue of waiters.
	waitFor(t, func() bool {
		p.busy.mu.Lock()
		defer p.busy.mu.Unlock()
		return len(p.busy.waiting["flood"]) >= flooders-2*Concurrency()
	})
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		start := time.Now()
		_, err := p.Validate(ctx, "v1.37.1", Request{Args: []string{fmt.Sprintf("--mine=%d", i)}, Queue: "other"})
		cancel()
		if err != nil {
			t.Fatalf("another queue's request %d, under the flood: %v", i, err)
		}
		t.Logf("another queue's request %d was judged in %s", i, time.Since(start).Round(time.Millisecond))
	}
	close(stop)
	for range flooders {
		<-done
	}
	if timedOut.Load() == 0 {
		t.Errorf("no flooding request gave up waiting: the flood was no flood")
	}
	// Every slot is back: no waiter that gave up kept one.
	p.busy.mu.Lock()
	free, waiting := p.busy.free, len(p.busy.turns)
	p.busy.mu.Unlock()
	if free != Concurrency() || waiting != 0 {
		t.Fatalf("after the flood: %d of %d slots free, %d queues waiting", free, Concurrency(), waiting)
	}
	// Every validator ends with the pool, before its directory goes.
	p.Close()
	waitFor(t, func() bool {
		for _, f := range started(t, dir) {
			if _, err := os.Stat("/proc/" + strings.TrimPrefix(filepath.Base(f), "started-")); err == nil {
				return false
			}
		}
		return true
	})
}

// A validator that is killed (it did not answer in time) leaves no file
// behind, and what an earlier operator process left in the work directory
// goes when the pool starts.
func TestPool_ValidatorFilesGoEvenWhenItIsKilled(t *testing.T) {
	dir, work := t.TempDir(), filepath.Join(t.TempDir(), "validators")
	stale := filepath.Join(work, "validator-from-a-killed-operator")
	if err := os.MkdirAll(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stale, "pod-file"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The validator writes the pod's files where TMPDIR says, then hangs.
	fakeValidator(t, dir, `echo files > "$TMPDIR/pod-file"; touch `+dir+`/wrote-$$; sleep 30`)
	p := NewPool(dir, WorkDir(work))
	defer p.Close()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("what an earlier process left is still there: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := p.Validate(ctx, "v1.37.1", Request{}); err == nil {
		t.Fatal("a validator that hangs answered")
	}
	wrote, _ := filepath.Glob(filepath.Join(dir, "wrote-*"))
	if len(wrote) == 0 {
		t.Fatal("the validator did not get to write its files: the test proves nothing")
	}
	// Only the next validator, waiting for its request, has files now:
	// it hangs too, once it has written them.
	p.Close()
	waitFor(t, func() bool {
		left, _ := filepath.Glob(filepath.Join(work, "validator-*", "pod-file"))
		return len(left) == 0
	})
}
