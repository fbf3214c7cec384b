package etcddialer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/server/egressselector"
)

// wait bounds every wait of these tests; nothing should come close to it.
const wait = 10 * time.Second

// notify signals on c without waiting: a missed signal while one is
// pending is the same signal.
func notify(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// serve runs s on a fresh socket until the test ends, then checks that Serve
// returned nil and waits for every connection to have been handled. It
// returns the socket's path and a function that waits until s is idle.
func serve(t *testing.T, s *Server) (path string, waitIdle func()) {
	t.Helper()
	s.Log = testr.New(t)
	changed := make(chan struct{}, 1)
	s.connDone = func() {
		notify(changed)
	}
	path = filepath.Join(t.TempDir(), "dialer.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	waitIdle = func() {
		t.Helper()
		timeout := time.After(wait)
		for s.Active() > 0 {
			select {
			case <-changed:
			case <-timeout:
				t.Fatalf("%d connections still handled after %s", s.Active(), wait)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		waitIdle()
	})
	return path, waitIdle
}

// request connects to the dialer at path and sends the CONNECT request
// that kube-apiserver's egress dialer sends.
func request(t *testing.T, path, target string) net.Conn {
	t.Helper()
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", target); err != nil {
		t.Fatal(err)
	}
	return conn
}

// readAnswer reads an answer as kube-apiserver's egress dialer does, checks
// that nothing follows its header and returns its status code.
func readAnswer(conn net.Conn) (int, error) {
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	defer func() { _ = conn.SetReadDeadline(time.Time{}) }()
	br := bufio.NewReader(io.LimitReader(conn, http.DefaultMaxHeaderBytes))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, fmt.Errorf("reading the answer: %w", err)
	}
	_ = resp.Body.Close()
	if br.Buffered() > 0 {
		return 0, fmt.Errorf("%d bytes follow the answer %q", br.Buffered(), resp.Status)
	}
	return resp.StatusCode, nil
}

// answerStatus reads an answer and returns its status code.
func answerStatus(t *testing.T, conn net.Conn) int {
	t.Helper()
	code, err := readAnswer(conn)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// freeAddr returns a local address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// echoTarget answers one connection at l: it echoes one line, then reads
// until EOF. It reports what went wrong on errs.
func echoTarget(t *testing.T, l net.Listener) {
	t.Helper()
	errs := make(chan error, 1)
	go func() {
		errs <- func() error {
			conn, err := l.Accept()
			if err != nil {
				return err
			}
			defer func() { _ = conn.Close() }()
			_ = conn.SetDeadline(time.Now().Add(wait))
			br := bufio.NewReader(conn)
			line, err := br.ReadString('\n')
			if err != nil {
				return fmt.Errorf("reading a line: %w", err)
			}
			if _, err := io.WriteString(conn, line); err != nil {
				return err
			}
			rest, err := io.ReadAll(br)
			if err != nil {
				return fmt.Errorf("reading to EOF: %w", err)
			}
			if len(rest) > 0 {
				return fmt.Errorf("unexpected %q before EOF", rest)
			}
			return nil
		}()
	}()
	t.Cleanup(func() {
		_ = l.Close()
		if err := <-errs; err != nil {
			t.Errorf("target: %v", err)
		}
	})
}

// listenTarget starts an echo target at addr.
func listenTarget(t *testing.T, addr string) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	echoTarget(t, l)
}

// checkEcho checks that a line travels to the echo target and back, and
// that the end of the client's side ends the connection: the target sees
// EOF (echoTarget) and so does the client.
func checkEcho(t *testing.T, conn net.Conn) {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(wait))
	if _, err := io.WriteString(conn, "hello\n"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(io.LimitReader(conn, 6)).ReadString('\n')
	if err != nil || line != "hello\n" {
		t.Fatalf("echo: got %q, %v", line, err)
	}
	if err := conn.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(conn)
	if err != nil || len(rest) > 0 {
		t.Fatalf("after the client's end: got %q, %v; want EOF", rest, err)
	}
}

// failingDials wraps the real dialer and reports each failed attempt.
func failingDials(failed chan<- struct{}) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			notify(failed)
		}
		return conn, err
	}
}

// waitFor receives n times from c.
func waitFor(t *testing.T, c <-chan struct{}, n int) {
	t.Helper()
	timeout := time.After(wait)
	for range n {
		select {
		case <-c:
		case <-timeout:
			t.Fatalf("waited %s", wait)
		}
	}
}

func TestConnectSplicesBothWays(t *testing.T) {
	target := freeAddr(t)
	listenTarget(t, target)
	path, _ := serve(t, &Server{Allowed: []string{target}})

	conn := request(t, path, target)
	if code := answerStatus(t, conn); code != http.StatusOK {
		t.Fatalf("got %d, want 200", code)
	}
	checkEcho(t, conn)
}

func TestConnectHeldUntilEtcdListens(t *testing.T) {
	target := freeAddr(t)
	failed := make(chan struct{}, 100)
	s := &Server{Allowed: []string{target}, Hold: 3 * time.Second, RetryInterval: 50 * time.Millisecond, Dial: failingDials(failed)}
	path, _ := serve(t, s)

	conn := request(t, path, target)
	type result struct {
		code int
		err  error
		at   time.Time
	}
	answered := make(chan result, 1)
	go func() {
		code, err := readAnswer(conn)
		answered <- result{code, err, time.Now()}
	}()
	// Several refused attempts show that the CONNECT is held and retried.
	waitFor(t, failed, 3)
	listening := time.Now()
	listenTarget(t, target)

	r := <-answered
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.code != http.StatusOK {
		t.Fatalf("got %d, want 200", r.code)
	}
	if r.at.Before(listening) {
		t.Errorf("answered at %s, before the target listened at %s", r.at, listening)
	}
	if waited := r.at.Sub(listening); waited >= s.Hold {
		t.Errorf("answered %s after the target listened, want well below Hold (%s)", waited, s.Hold)
	}
	checkEcho(t, conn)
}

func TestConnectGivesUpAfterHold(t *testing.T) {
	target := freeAddr(t)
	s := &Server{Allowed: []string{target}, Hold: time.Second, RetryInterval: 50 * time.Millisecond}
	path, _ := serve(t, s)

	start := time.Now()
	conn := request(t, path, target)
	if code := answerStatus(t, conn); code != http.StatusServiceUnavailable {
		t.Fatalf("got %d, want 503", code)
	}
	if waited := time.Since(start); waited < s.Hold {
		t.Errorf("answered after %s, want at least Hold (%s)", waited, s.Hold)
	}
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	if n, err := conn.Read(make([]byte, 1)); n > 0 || !errors.Is(err, io.EOF) {
		t.Errorf("after the answer: read %d bytes, %v; want EOF", n, err)
	}
}

func TestConnectRefused(t *testing.T) {
	target := freeAddr(t)
	path, _ := serve(t, &Server{Allowed: []string{target}})

	for _, tc := range []struct {
		name    string
		request string
		want    int
	}{
		{"target not allowed", "CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", http.StatusForbidden},
		{"host header is no target", "CONNECT /x HTTP/1.1\r\nHost: " + target + "\r\n\r\n", http.StatusForbidden},
		{"not CONNECT", "GET / HTTP/1.1\r\nHost: " + target + "\r\n\r\n", http.StatusMethodNotAllowed},
		{"bytes sent with the request", "CONNECT " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n\x16\x03\x01", http.StatusBadRequest},
		{"no HTTP", "hello\r\n\r\n", http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close() }()
			if _, err := io.WriteString(conn, tc.request); err != nil {
				t.Fatal(err)
			}
			if code := answerStatus(t, conn); code != tc.want {
				t.Errorf("got %d, want %d", code, tc.want)
			}
		})
	}
}

func TestConnectClientSpeaksWhileHeld(t *testing.T) {
	target := freeAddr(t)
	failed := make(chan struct{}, 100)
	path, _ := serve(t, &Server{Allowed: []string{target}, Hold: time.Minute, RetryInterval: 50 * time.Millisecond, Dial: failingDials(failed)})

	conn := request(t, path, target)
	waitFor(t, failed, 1)
	if _, err := io.WriteString(conn, "\x16"); err != nil {
		t.Fatal(err)
	}
	if code := answerStatus(t, conn); code != http.StatusBadRequest {
		t.Errorf("got %d, want 400", code)
	}
}

func TestConnectClientLeavesWhileHeld(t *testing.T) {
	var (
		mu    sync.Mutex
		dials []time.Time
	)
	dialed := make(chan struct{}, 100)
	s := &Server{
		Allowed:       []string{"etcd:2379"},
		Hold:          time.Minute,
		RetryInterval: 50 * time.Millisecond,
		DialTimeout:   100 * time.Millisecond,
		Dial: func(context.Context, string, string) (net.Conn, error) {
			mu.Lock()
			dials = append(dials, time.Now())
			mu.Unlock()
			notify(dialed)
			return nil, errors.New("connection refused")
		},
	}
	path, waitIdle := serve(t, s)

	conn := request(t, path, "etcd:2379")
	waitFor(t, dialed, 2)
	_ = conn.Close()
	closed := time.Now()

	// The wait ends long before Hold: a handler that kept dialing would
	// still be busy.
	waitIdle()
	mu.Lock()
	defer mu.Unlock()
	for _, d := range dials {
		if late := d.Sub(closed); late > s.RetryInterval+s.DialTimeout {
			t.Errorf("dialed %s after the client left", late)
		}
	}
}

// egressDialer returns the dial function kube-apiserver uses for etcd when
// its egress selector points the etcd selection at path.
func egressDialer(t *testing.T, path string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	t.Helper()
	sel, err := egressselector.NewEgressSelector(&apiserver.EgressSelectorConfiguration{
		EgressSelections: []apiserver.EgressSelection{{
			Name: "etcd",
			Connection: apiserver.Connection{
				ProxyProtocol: apiserver.ProtocolHTTPConnect,
				Transport:     &apiserver.Transport{UDS: &apiserver.UDSTransport{UDSName: path}},
			},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	dial, err := sel.Lookup(egressselector.Etcd.AsNetworkContext())
	if err != nil {
		t.Fatal(err)
	}
	return dial
}

func TestUpstreamEgressDialer(t *testing.T) {
	target := freeAddr(t)
	listenTarget(t, target)
	path, _ := serve(t, &Server{Allowed: []string{target}})
	dial := egressDialer(t, path)

	conn, err := dial(context.Background(), "tcp", target)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	checkEcho(t, conn)
}

func TestUpstreamEgressDialerHeld(t *testing.T) {
	target := freeAddr(t)
	failed := make(chan struct{}, 100)
	path, _ := serve(t, &Server{Allowed: []string{target}, Hold: 3 * time.Second, RetryInterval: 50 * time.Millisecond, Dial: failingDials(failed)})
	dial := egressDialer(t, path)

	type result struct {
		conn net.Conn
		err  error
	}
	dialed := make(chan result, 1)
	go func() {
		conn, err := dial(context.Background(), "tcp", target)
		dialed <- result{conn, err}
	}()
	waitFor(t, failed, 3)
	listenTarget(t, target)

	r := <-dialed
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer func() { _ = r.conn.Close() }()
	checkEcho(t, r.conn)
}

func TestListen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dialer.sock")
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	_ = stale.Close()

	l, err := Listen(path)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	defer func() { _ = l.Close() }()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o660 {
		t.Errorf("mode %s, want a socket with permissions 0660", fi.Mode())
	}
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("connecting to the new socket: %v", err)
	}
	_ = conn.Close()
}

func TestListenRefusesToRemoveAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dialer.sock")
	if err := os.WriteFile(path, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if l, err := Listen(path); err == nil {
		_ = l.Close()
		t.Fatal("Listen replaced a regular file")
	}
	if data, err := os.ReadFile(path); err != nil || string(data) != "data" {
		t.Errorf("the file changed: %q, %v", data, err)
	}
}

// TestConnectHeldRequestsShareOneDialLoop: many CONNECTs held for one etcd
// (kube-apiserver has a client per resource) dial it together only once
// each; then a single loop dials, and when etcd accepts again every one of
// them is connected.
func TestConnectHeldRequestsShareOneDialLoop(t *testing.T) {
	const requests = 20
	addr := freeAddr(t)
	var (
		mu                 sync.Mutex
		dials, inFlight    int
		maxInFlightAfter   int
		firstDialsFinished bool
	)
	loopDialed := make(chan struct{}, 100)
	back := make(chan struct{})
	s := &Server{
		Allowed:       []string{addr},
		Hold:          time.Minute,
		RetryInterval: 10 * time.Millisecond,
		DialTimeout:   time.Second,
		Dial: func(ctx context.Context, network, a string) (net.Conn, error) {
			select {
			case <-back:
				return (&net.Dialer{}).DialContext(ctx, network, a)
			default:
			}
			mu.Lock()
			dials++
			inFlight++
			if firstDialsFinished {
				maxInFlightAfter = max(maxInFlightAfter, inFlight)
			}
			firstDialsFinished = firstDialsFinished || dials >= requests
			mu.Unlock()
			// A refusal that takes a moment, so that dials of several
			// loops would overlap.
			time.Sleep(5 * time.Millisecond)
			mu.Lock()
			inFlight--
			mu.Unlock()
			notify(loopDialed)
			return nil, errors.New("connection refused")
		},
	}
	path, _ := serve(t, s)
	conns := make([]net.Conn, requests)
	for i := range conns {
		conns[i] = request(t, path, addr)
	}
	// Each request's own first dial, then 20 more dials: a loop per
	// request would have each of them dialing every 10 ms meanwhile.
	waitFor(t, loopDialed, 2*requests)

	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	accepted := make(chan net.Conn, 2*requests)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	defer func() {
		for range len(accepted) {
			_ = (<-accepted).Close()
		}
	}()
	close(back)
	for i, conn := range conns {
		if status := answerStatus(t, conn); status != http.StatusOK {
			t.Errorf("request %d: %d once etcd accepted again, want 200", i, status)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if maxInFlightAfter > 1 {
		t.Errorf("%d dials of one etcd were in flight at once while %d requests were held: each request dialed on its own", maxInFlightAfter, requests)
	}
}

// failingListener fails its first Accept as a process out of file
// descriptors sees it.
type failingListener struct {
	net.Listener
	failed atomic.Bool
}

func (l *failingListener) Accept() (net.Conn, error) {
	if !l.failed.Swap(true) {
		return nil, &net.OpError{Op: "accept", Net: "unix", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestServeOutlivesTemporaryAcceptErrors: running out of file descriptors
// for a moment does not stop the dialer (which would cut every relay).
func TestServeOutlivesTemporaryAcceptErrors(t *testing.T) {
	target := freeAddr(t)
	listenTarget(t, target)
	path := filepath.Join(t.TempDir(), "dialer.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	fl := &failingListener{Listener: l}
	s := &Server{Allowed: []string{target}, Log: testr.New(t)}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, fl) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	conn := request(t, path, target)
	defer func() { _ = conn.Close() }()
	if status := answerStatus(t, conn); status != http.StatusOK {
		t.Fatalf("CONNECT after a failed Accept: %d, want 200", status)
	}
	if !fl.failed.Load() {
		t.Fatal("the listener's Accept never failed: the test proves nothing")
	}
	checkEcho(t, conn)
}
