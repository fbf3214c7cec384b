// Package etcddialer is a dialer sidecar that holds kube-apiserver's
// connection to etcd while etcd is down.
//
// kube-apiserver's etcd client reconnects with gRPC's exponential backoff
// (1 s growing by 1.6 times up to 120 s) after each refused connection, so
// after an etcd outage of half a minute it serves again only seconds after
// etcd is back. Pointed at this dialer through its egress selector (selection
// etcd, HTTPConnect over a Unix socket), kube-apiserver asks for each
// connection with an HTTP CONNECT request. Instead of refusing while etcd is
// down, the dialer keeps that request pending and retries etcd every
// RetryInterval: it answers 200 and splices the bytes as soon as etcd accepts
// a TCP connection, or 503 once Hold has passed. Hold stays below gRPC's
// minimum connect timeout of 20 s, so that an answer never comes after the
// attempt's deadline; gRPC then waits its backoff and its next attempt is
// held again. While the backoff is short (outages up to about a minute and a
// half) kube-apiserver reconnects within about RetryInterval of etcd's
// return; the backoff still grows with each attempt, up to gRPC's 120 s.
//
// kube-apiserver has an etcd client per resource, each with a connection per
// etcd server: hundreds of CONNECTs can be held at once. They do not each
// dial: one dial loop per etcd server tells them all when it accepts again.
//
// The sidecar's second socket is the pod's egress filter (EgressFilter):
// every other call kube-apiserver makes goes through it, and it refuses
// the pod's node, the pod, the management cluster's networks and the
// link-local and metadata addresses.
package etcddialer

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
)

const (
	// DefaultHold is below gRPC's minimum connect timeout (20 s): a CONNECT
	// answered later would find the attempt's deadline already passed.
	DefaultHold = 15 * time.Second
	// DefaultRetryInterval is how late kube-apiserver may learn that etcd is back.
	DefaultRetryInterval = 200 * time.Millisecond
	// DefaultDialTimeout bounds an attempt to a host that drops packets.
	DefaultDialTimeout = time.Second

	// requestTimeout bounds reading a request and writing an answer, so that
	// a client that never sends or never reads does not keep a goroutine.
	requestTimeout = 5 * time.Second
	// maxRequestBytes bounds the memory a request may take, as net/http does.
	maxRequestBytes = http.DefaultMaxHeaderBytes
)

// The answers carry no body: kube-apiserver's client refuses a connection
// with bytes buffered after the response header.
const (
	answerEstablished = "HTTP/1.1 200 Connection established\r\n\r\n"
	answerOK          = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
	answerBadRequest  = "HTTP/1.1 400 Bad Request\r\n\r\n"
	answerForbidden   = "HTTP/1.1 403 Forbidden\r\n\r\n"
	answerNotAllowed  = "HTTP/1.1 405 Method Not Allowed\r\n\r\n"
	answerUnavailable = "HTTP/1.1 503 Service Unavailable\r\n\r\n"
)

// Server answers HTTP CONNECT requests for the etcd servers in Allowed.
type Server struct {
	// Allowed lists the host:port the dialer may connect to (from the etcd
	// URLs); a CONNECT to anything else gets 403.
	Allowed []string
	// Hold is how long a CONNECT waits for etcd before 503; 0 means DefaultHold.
	Hold time.Duration
	// RetryInterval is the pause between failed dials; 0 means DefaultRetryInterval.
	RetryInterval time.Duration
	// DialTimeout bounds each dial attempt; 0 means DefaultDialTimeout.
	DialTimeout time.Duration
	// Dial connects to etcd; nil means (&net.Dialer{}).DialContext.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// WaitFor are the sets of etcd servers kube-apiserver's start-up
	// needs, each set one etcd (the main servers, each override's):
	// "GET /readyz" on the socket answers 200 only when a server of every
	// set accepts a connection, so that the sidecar's postStart hook can
	// hold kube-apiserver's start until then (its storage gives up on an
	// etcd it cannot reach within 20 s, and the container exits). Empty:
	// every Allowed server is a set of its own.
	WaitFor [][]string
	// Log receives a line when an etcd server refuses and when it accepts
	// again, one at most every notReadyLogInterval while readiness is
	// asked and refused (kube-apiserver waits to start), and at V(1) one
	// per request held, connected after holding or given up; the zero
	// Logger discards.
	Log logr.Logger

	active atomic.Int64
	// notReadyLogged is when a refused readiness was last logged, in Unix
	// nanoseconds.
	notReadyLogged atomic.Int64
	// connDone, if set, is called when a connection has been handled and all
	// its goroutines have ended; tests wait on it.
	connDone func()

	// probes are the dial loops of the etcd servers that refused, by
	// address, while a request waits for them.
	mu     sync.Mutex
	probes map[string]*probe
}

// probe is the one dial loop of an etcd server that refused: held requests
// wait for up to be closed; the first takes the loop's connection (conn),
// the others dial themselves. s.mu guards waiters and conn.
type probe struct {
	up      chan struct{}
	waiters int
	conn    net.Conn
}

// Active returns the number of client connections being handled.
func (s *Server) Active() int {
	return int(s.active.Load())
}

// Serve answers the connections l accepts, each in its own goroutine, until
// ctx is done (then it closes l and returns nil) or Accept fails. Spliced
// connections outlive Serve and end when either side closes; held ones
// answer 503 when ctx is done.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	return serveConns(ctx, l, s.Log, &s.active, s.connDone, func(conn net.Conn) { s.handle(ctx, conn) })
}

// serveConns runs handle on each connection l accepts, each in its own
// goroutine counted in active (done is called after each when set), until
// ctx is done (then it closes l and returns nil) or Accept fails.
func serveConns(ctx context.Context, l net.Listener, log logr.Logger, active *atomic.Int64, done func(), handle func(net.Conn)) error {
	stop := context.AfterFunc(ctx, func() { _ = l.Close() })
	defer stop()
	var pause time.Duration
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// Out of file descriptors, say: wait and go on, as net/http
			// does, rather than cut every connection by exiting.
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ECONNABORTED) {
				pause = min(max(2*pause, 5*time.Millisecond), time.Second)
				log.Info("Accepting a connection failed, retrying", "err", err, "in", pause)
				time.Sleep(pause)
				continue
			}
			_ = l.Close()
			return fmt.Errorf("accepting connections: %w", err)
		}
		pause = 0
		active.Add(1)
		go func() {
			handle(conn)
			active.Add(-1)
			if done != nil {
				done()
			}
		}()
	}
}

// Listen listens on the Unix socket at path, replacing a socket left behind
// by an earlier run, and lets the socket's group (the pod's fsGroup) connect.
func Listen(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("listening on %s: a file that is not a socket is in the way", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing stale socket %s: %w", path, err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil { //nolint:gosec // G302: kube-apiserver may run as another user of the pod's group.
		_ = l.Close()
		return nil, fmt.Errorf("setting the permissions of %s: %w", path, err)
	}
	return l, nil
}

// handle answers one CONNECT request and, once etcd accepts, splices the
// connection to etcd's.
func (s *Server) handle(ctx context.Context, conn net.Conn) {
	defer func() { _ = conn.Close() }()

	_ = conn.SetDeadline(time.Now().Add(requestTimeout))
	br := bufio.NewReader(io.LimitReader(conn, maxRequestBytes))
	req, err := http.ReadRequest(br)
	switch {
	case err != nil:
		answer(conn, answerBadRequest)
		return
	case req.Method == http.MethodGet && req.URL.Path == ReadyPath:
		_ = conn.SetDeadline(time.Now().Add(requestTimeout))
		if down := s.unreachable(ctx); len(down) == 0 {
			answer(conn, answerOK)
		} else {
			body := "no server accepts a connection: " + strings.Join(down, "; ")
			answer(conn, fmt.Sprintf("HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
			if last := s.notReadyLogged.Load(); time.Since(time.Unix(0, last)) >= notReadyLogInterval && s.notReadyLogged.CompareAndSwap(last, time.Now().UnixNano()) {
				s.Log.Info("Not ready: kube-apiserver starts once an etcd server of each set accepts", "unreachable", down)
			}
		}
		return
	case req.Method != http.MethodConnect:
		answer(conn, answerNotAllowed)
		return
	case !slices.Contains(s.Allowed, req.RequestURI):
		answer(conn, answerForbidden)
		return
	case br.Buffered() > 0:
		// A TLS client speaks only once the tunnel is established: bytes
		// sent with the request belong to a client that does not wait.
		answer(conn, answerBadRequest)
		return
	}
	target := req.RequestURI
	_ = conn.SetDeadline(time.Time{})

	// While the request is held, a read on the client notices when it
	// leaves. kube-apiserver reads the answer without a deadline, so it
	// leaves only when it exits; Hold is what bounds the wait.
	holdCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	type readResult struct {
		n   int
		err error
	}
	watched := make(chan readResult, 1)
	go func() {
		var b [1]byte
		n, err := conn.Read(b[:])
		cancel()
		watched <- readResult{n, err}
	}()

	start := time.Now()
	up, dialErr := s.dialHeld(holdCtx, target)

	// Interrupt the watching read so that the connection has a single reader.
	_ = conn.SetReadDeadline(time.Now())
	watch := <-watched
	_ = conn.SetReadDeadline(time.Time{})
	// Only the interruption ends the read with a deadline error; any other
	// error (EOF first of all) means that the client has gone.
	sent := watch.n > 0
	clientLeft := !sent && !errors.Is(watch.err, os.ErrDeadlineExceeded)
	if up != nil && (clientLeft || sent) {
		_ = up.Close()
		up = nil
	}
	switch {
	case sent:
		answer(conn, answerBadRequest)
	case clientLeft:
		// Nobody is waiting for an answer.
		if dialErr != nil {
			s.Log.V(1).Info("Client left while held", "target", target, "waited", time.Since(start))
		}
	case up == nil:
		// One line per request would be hundreds per outage: the dial
		// loop logs the outage once per etcd server.
		s.Log.V(1).Info("Gave up waiting for etcd", "target", target, "waited", time.Since(start), "err", dialErr)
		answer(conn, answerUnavailable)
	default:
		if answer(conn, answerEstablished) {
			splice(conn, up)
		} else {
			_ = up.Close()
		}
	}
}

// ReadyPath is the path of the readiness answer (see Server.WaitFor).
const ReadyPath = "/readyz"

// notReadyLogInterval spaces the lines that say readiness was refused: the
// pod's log says what its start waits for without a line per question.
const notReadyLogInterval = 10 * time.Second

// unreachable lists the sets of WaitFor of which no server accepts a
// connection now (each as its servers joined by commas); the sets are
// dialed at once, the servers of each in turn.
func (s *Server) unreachable(ctx context.Context) []string {
	sets := s.WaitFor
	if len(sets) == 0 {
		for _, a := range s.Allowed {
			sets = append(sets, []string{a})
		}
	}
	reached := make([]bool, len(sets))
	var wg sync.WaitGroup
	for i, set := range sets {
		wg.Go(func() {
			for _, target := range set {
				if conn, err := s.dialOnce(ctx, target, s.dialTimeout()); err == nil {
					_ = conn.Close()
					reached[i] = true
					return
				}
			}
		})
	}
	wg.Wait()
	var down []string
	for i, set := range sets {
		if !reached[i] {
			down = append(down, strings.Join(set, ","))
		}
	}
	return down
}

// dialHeld dials target until it accepts, Hold has passed or ctx is done.
// Between its own dials it waits for target's dial loop (awaitUp). It
// returns the last dial error when it gives up.
func (s *Server) dialHeld(ctx context.Context, target string) (net.Conn, error) {
	start := time.Now()
	giveUp := start.Add(s.hold())
	var lastErr error
	for {
		remaining := time.Until(giveUp)
		if remaining <= 0 {
			return nil, lastErr
		}
		up, err := s.dialOnce(ctx, target, min(s.dialTimeout(), remaining))
		if err != nil {
			lastErr = err
			var ok bool
			if up, ok = s.awaitUp(ctx, target, giveUp, err); !ok {
				return nil, lastErr
			}
			if up == nil {
				continue // another request took the loop's connection
			}
		}
		if lastErr != nil {
			s.Log.V(1).Info("Connected to etcd after holding", "target", target, "waited", time.Since(start))
		}
		return up, nil
	}
}

func (s *Server) dialOnce(ctx context.Context, target string, timeout time.Duration) (net.Conn, error) {
	dial := s.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := dial(ctx, "tcp", target)
	if err != nil {
		return nil, fmt.Errorf("dialing etcd %s: %w", target, err)
	}
	return conn, nil
}

// awaitUp waits until target's dial loop connected, and returns its
// connection if no other waiter took it first; false when giveUp came or
// ctx was done first. The loop starts with the first waiter (refused with
// err) and stops once it connected or nobody waits.
func (s *Server) awaitUp(ctx context.Context, target string, giveUp time.Time, err error) (net.Conn, bool) {
	s.mu.Lock()
	p := s.probes[target]
	if p == nil {
		if s.probes == nil {
			s.probes = map[string]*probe{}
		}
		p = &probe{up: make(chan struct{})}
		s.probes[target] = p
		// The loop outlives the request that started it: it stops when no
		// request waits.
		s.Log.Info("Etcd refused a connection: holding kube-apiserver's until it accepts", "target", target, "err", err)
		go s.runProbe(context.WithoutCancel(ctx), target, p)
	}
	p.waiters++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		// The last waiter to leave closes a connection nobody took.
		p.waiters--
		if p.waiters == 0 && p.conn != nil {
			_ = p.conn.Close()
			p.conn = nil
		}
	}()

	t := time.NewTimer(time.Until(giveUp))
	defer t.Stop()
	select {
	case <-p.up:
		s.mu.Lock()
		defer s.mu.Unlock()
		conn := p.conn
		p.conn = nil
		return conn, true
	case <-ctx.Done():
		return nil, false
	case <-t.C:
		return nil, false
	}
}

// runProbe dials target every RetryInterval until it accepts (then wakes
// the waiters) or nobody waits any more.
func (s *Server) runProbe(ctx context.Context, target string, p *probe) {
	start := time.Now()
	for {
		time.Sleep(s.retryInterval())
		s.mu.Lock()
		if p.waiters == 0 {
			s.endProbe(target, p)
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		conn, err := s.dialOnce(ctx, target, s.dialTimeout())
		if err != nil {
			continue
		}
		s.Log.Info("Etcd accepts connections again", "target", target, "after", time.Since(start))
		s.mu.Lock()
		s.endProbe(target, p)
		if p.waiters > 0 {
			p.conn = conn
		} else {
			_ = conn.Close()
		}
		close(p.up)
		s.mu.Unlock()
		return
	}
}

// endProbe forgets p; s.mu is held.
func (s *Server) endProbe(target string, p *probe) {
	if s.probes[target] == p {
		delete(s.probes, target)
	}
}

// answer writes a status line, reporting whether the client took it.
func answer(conn net.Conn, status string) bool {
	_ = conn.SetWriteDeadline(time.Now().Add(requestTimeout))
	_, err := io.WriteString(conn, status)
	_ = conn.SetWriteDeadline(time.Time{})
	return err == nil
}

// splice copies bytes both ways until one direction ends, then closes
// both: over TLS and HTTP/2 the end of one side is the end of the
// connection, and waiting for the other side of an etcd that vanished
// would keep the connection for TCP's retransmission timeout. The
// connections are copied as they are so that Go can splice them in the
// kernel.
func splice(client, up net.Conn) {
	ended := make(chan struct{}, 2)
	copyHalf := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		ended <- struct{}{}
	}
	go copyHalf(up, client)
	go copyHalf(client, up)
	<-ended
	// Closing both ends the other direction's copy.
	_ = client.Close()
	_ = up.Close()
	<-ended
}

func (s *Server) hold() time.Duration {
	return cmp.Or(s.Hold, DefaultHold)
}

func (s *Server) retryInterval() time.Duration {
	return cmp.Or(s.RetryInterval, DefaultRetryInterval)
}

func (s *Server) dialTimeout() time.Duration {
	return cmp.Or(s.DialTimeout, DefaultDialTimeout)
}
