// Package testport hands out TCP ports on 127.0.0.1 for the servers tests
// start (etcd, kube-apiserver, the manager) without the race of "listen on
// :0, close, pass the port on": another process could take the port in
// between. A port comes from below the kernel's ephemeral range, which no
// outgoing connection and no listen on port 0 ever uses, and is held by a
// lock file for the life of the test process, so that no other test of
// this repository, in this process or another, is given it.
package testport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// lowest is the lowest port handed out: above the well-known and most
// registered service ports.
const lowest = 20000

var (
	mu sync.Mutex
	// held are the lock files of the ports this process holds.
	held = map[int]*os.File{}
)

// Get returns a free port that stays this test's until it ends.
func Get(t testing.TB) int {
	t.Helper()
	port, err := get()
	if err != nil {
		t.Fatalf("choosing a port for a test server: %v", err)
	}
	t.Cleanup(func() { release(port) })
	return port
}

func get() (int, error) {
	highest := ephemeralStart() - 1
	if highest <= lowest {
		return 0, fmt.Errorf("the ephemeral port range starts at %d: no room below it", highest+1)
	}
	dir := filepath.Join(os.TempDir(), "apiserver-operator-testports")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	mu.Lock()
	defer mu.Unlock()
	for range 200 {
		port := lowest + rand.IntN(highest-lowest+1)
		if held[port] != nil {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return 0, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			_ = f.Close() // another test process holds it
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			_ = f.Close() // something outside the tests listens there
			continue
		}
		_ = l.Close()
		held[port] = f
		return port, nil
	}
	return 0, fmt.Errorf("no free port between %d and %d after 200 tries", lowest, highest)
}

func release(port int) {
	mu.Lock()
	defer mu.Unlock()
	if f := held[port]; f != nil {
		_ = f.Close() // closing releases the lock
		delete(held, port)
	}
}

// ephemeralStart is the first port of the kernel's ephemeral range
// (32768 when it cannot be read, Linux's default).
func ephemeralStart() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(fields[0])
	if err != nil {
		return 32768
	}
	return n
}
