package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/apiserver-operator/apiserver-operator/apiserver/etcddialer"
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
		err := run(logr.Discard(), tt.socket, tt.allow, tt.hold, tt.retry)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: run gave %v, want an error with %q", tt.name, err, tt.want)
		}
	}
	if got, err := parseAllowed("etcd-0:2379, etcd-1:2379,,"); err != nil || strings.Join(got, ";") != "etcd-0:2379;etcd-1:2379" {
		t.Errorf("parseAllowed: %v, %v", got, err)
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
		stopWhenIdle(logr.Discard(), s, signals)
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
