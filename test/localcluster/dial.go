package localcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// DialFromNode connects to address from inside the node's network
// namespace, where pod IPs are routed (the host has no route to them):
// tests reach one pod, not whichever a Service picks. Its signature is
// that of net.Dialer.DialContext, for http.Transport and rest.Config.
func (c *Cluster) DialFromNode(ctx context.Context, network, address string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		// The socket belongs to the namespace of the thread that creates
		// it. The thread stays locked: it ends with this goroutine instead
		// of going back to the pool inside the node's namespace.
		runtime.LockOSThread()
		ns, err := os.Open(c.l.netnsPath())
		if err != nil {
			done <- result{err: fmt.Errorf("opening the node's network namespace: %w", err)}
			return
		}
		defer func() { _ = ns.Close() }()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- result{err: fmt.Errorf("entering the node's network namespace %s: %w", c.l.netnsPath(), err)}
			return
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, address)
		done <- result{conn, err}
	}()
	select {
	case r := <-done:
		return r.conn, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.conn != nil {
				_ = r.conn.Close()
			}
		}()
		return nil, ctx.Err()
	}
}
