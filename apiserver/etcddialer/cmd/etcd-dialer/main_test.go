package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/apiserver-operator/apiserver-operator/apiserver/etcddialer"
	"github.com/apiserver-operator/apiserver-operator/test/testport"
)

func TestRun_RefusesBadFlags(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "s.sock")
	for _, tt := range []struct {
		name, socket, allow string
		hold, retry         time.Duration
		want                string
	}{
		{"no socket", "", "etcd:2379", time.Second, time.Second, "--socket is required"},
		{"no server", socket, " , ", time.Second, time.Second, "--allow is required"},
		{"hold past gRPC's connect timeout", socket, "etcd:2379", 20 * time.Second, time.Second, "below 20s"},
		{"no retry interval", socket, "etcd:2379", time.Second, 0, "--retry-interval=0s"},
	} {
		err := run(logr.Discard(), tt.socket, tt.allow, nil, tt.hold, tt.retry, nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: run gave %v, want an error with %q", tt.name, err, tt.want)
		}
	}
	if err := run(logr.Discard(), socket, "etcd:2379", [][]string{{"etcd:2379"}, {"other:2379"}}, time.Second, time.Second, nil); err == nil ||
		!strings.Contains(err.Error(), "--wait-for=other:2379: other:2379 is not in --allow") {
		t.Errorf("a server to wait for that may not be dialed: run gave %v", err)
	}
	if got, err := parseAllowed("etcd-0:2379, etcd-1:2379,,"); err != nil || strings.Join(got, ";") != "etcd-0:2379;etcd-1:2379" {
		t.Errorf("parseAllowed: %v, %v", got, err)
	}
}

// TestProbe_WaitReturnsOnceEtcdAccepts: the postStart hook's --wait goes on
// asking while the dialer does not listen yet and while etcd is down, and
// returns as soon as both answer; bounded, it fails saying why. Once it
// has returned, the pod is marked started: the hook of a restarted sidecar
// returns at once, even with etcd down.
func TestProbe_WaitReturnsOnceEtcdAccepts(t *testing.T) {
	etcd := net.JoinHostPort("127.0.0.1", strconv.Itoa(testport.Get(t)))
	socket := filepath.Join(t.TempDir(), "s.sock")
	if err := awaitReady(socket, 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "after 300ms: the etcd dialer does not answer") {
		t.Errorf("no dialer within the wait: %v", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- awaitReady(socket, time.Minute) }()

	// The dialer starts, etcd still down: the wait goes on.
	l, err := etcddialer.Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var notReady []string
	log := funcr.New(func(_, args string) {
		if strings.Contains(args, "Not ready") {
			mu.Lock()
			notReady = append(notReady, args)
			mu.Unlock()
		}
	}, funcr.Options{})
	s := &etcddialer.Server{Allowed: []string{etcd}, RetryInterval: 50 * time.Millisecond, Log: log}
	go func() { _ = s.Serve(ctx, l) }()
	for range 3 {
		if err := askReady(socket); err == nil || !strings.Contains(err.Error(), "etcd does not accept connections yet") {
			t.Fatalf("the dialer answers %v while etcd is down", err)
		}
	}
	// The pod's log says what its start waits for, once for many questions.
	// The line is written after the answer: wait for it, then ask three
	// more times, by which time every earlier question's line is written.
	logged := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(notReady)
	}
	for deadline := time.Now().Add(5 * time.Second); len(logged()) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	for range 3 {
		if err := askReady(socket); err == nil {
			t.Fatal("the dialer answers ready while etcd is down")
		}
	}
	if got := logged(); len(got) != 1 || !strings.Contains(got[0], etcd) {
		t.Errorf("the dialer logged %q for six refused questions, want one line naming %s", got, etcd)
	}
	select {
	case err := <-waited:
		t.Fatalf("the wait ended while etcd was down: %v", err)
	default:
	}
	marker := filepath.Join(filepath.Dir(socket), startedMarker)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the pod is marked started while etcd is down")
	}

	// etcd comes: the wait ends well within its minute.
	up, err := net.Listen("tcp", etcd)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("the wait failed once etcd accepted: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the wait did not end within 30 s of etcd accepting")
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the pod is not marked started: %v", err)
	}

	// etcd down again, the sidecar restarted: its hook returns at once.
	_ = up.Close()
	if err := askReady(socket); err == nil {
		t.Fatal("the dialer says ready with etcd down")
	}
	if err := awaitReady(socket, time.Minute); err != nil {
		t.Errorf("the hook of a restarted sidecar: %v", err)
	}
	if err := awaitReady(socket, 0); err == nil {
		t.Error("a probe without --wait says ready with etcd down: the marker is for the hook only")
	}
}

// TestProbe_AnswersOnceEveryEtcdAccepts: the probe passes only
// when a server of every etcd kube-apiserver needs at start accepts a
// connection (one of several servers is enough), and says why not.
func TestProbe_AnswersOnceEveryEtcdAccepts(t *testing.T) {
	listening := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l.Addr().String()
	}
	main, down := listening(), net.JoinHostPort("127.0.0.1", strconv.Itoa(testport.Get(t)))
	events := listening()
	socket := filepath.Join(t.TempDir(), "s.sock")
	if err := askReady(socket); err == nil || !strings.Contains(err.Error(), "does not answer") {
		t.Errorf("no dialer on the socket: the probe gave %v", err)
	}
	for _, tc := range []struct {
		name    string
		waitFor [][]string
		ready   bool
	}{
		{"every etcd accepts", [][]string{{main}, {events}}, true},
		{"one server of each etcd accepts", [][]string{{down, main}, {events, down}}, true},
		{"an override's etcd is down", [][]string{{main}, {down}}, false},
		{"no set given: each allowed server, one of them down", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := etcddialer.Listen(socket)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() {
				served <- (&etcddialer.Server{Allowed: []string{main, down, events}, WaitFor: tc.waitFor}).Serve(ctx, l)
			}()
			defer func() {
				cancel()
				if err := <-served; err != nil {
					t.Error(err)
				}
			}()
			err = askReady(socket)
			switch {
			case tc.ready && err != nil:
				t.Errorf("the probe failed: %v", err)
			case !tc.ready && (err == nil || !strings.Contains(err.Error(), "etcd does not accept connections yet (503 Service Unavailable: no server accepts a connection: "+down+")")):
				t.Errorf("the probe gave %v, want etcd not accepting yet, naming %s", err, down)
			}
		})
	}
}

// TestStopWhenIdle: after SIGTERM the dialer keeps serving while a
// connection is open (kube-apiserver drains through it), and stops once
// none has been open for idleBeforeExit.
func TestStopWhenIdle(t *testing.T) {
	l, err := etcddialer.Listen(filepath.Join(t.TempDir(), "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	s := &etcddialer.Server{Allowed: []string{"127.0.0.1:1"}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.Serve(ctx, l) }()
	conn, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	for deadline := time.Now().Add(5 * time.Second); s.Active() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the connection was not accepted")
		}
	}

	signals := make(chan os.Signal, 2)
	stopped := make(chan struct{})
	go func() {
		stopWhenIdle(logr.Discard(), s.Active, signals)
		close(stopped)
	}()
	signals <- syscall.SIGTERM
	// Longer than idleBeforeExit with the connection open (a request not
	// sent yet: read within the server's 5 s request timeout).
	select {
	case <-stopped:
		t.Fatal("the dialer stopped on SIGTERM with a connection open")
	case <-time.After(idleBeforeExit + 500*time.Millisecond):
	}
	_ = conn.Close()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the dialer did not stop once idle after SIGTERM")
	}
}
