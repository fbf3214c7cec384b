package upstream

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeValidator writes a validator for version that answers with script's
// behaviour after printing "ready": it records its PID in dir/started-PID.
func fakeValidator(t *testing.T, dir, version, answer string) {
	t.Helper()
	script := "#!/bin/sh\ntouch " + dir + "/started-$$\necho ready\n" + answer + "\n"
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
	fakeValidator(t, dir, "v1.37.1", `cat >/dev/null; echo "{\"version\":\"$$\",\"problems\":[{\"flags\":[\"x\"],\"message\":\"no\"}]}"`)
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
			fakeValidator(t, dir, "v1.37.1", answer)
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
