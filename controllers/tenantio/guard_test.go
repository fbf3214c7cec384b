package tenantio

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

func TestRefuseMetadata(t *testing.T) {
	for addr, refused := range map[string]bool{
		"169.254.169.254:80":       true,
		"[fe80::1%eth0]:2379":      true,
		"[fd00:ec2::254]:80":       true,
		"100.100.100.200:80":       true,
		"[::ffff:169.254.1.1]:443": true,
		"127.0.0.1:2379":           false,
		"10.96.0.10:2379":          false,
		"[2001:db8::1]:2379":       false,
		"/run/some.sock":           false,
	} {
		if err := RefuseMetadata("tcp", addr, nil); (err != nil) != refused {
			t.Errorf("RefuseMetadata(%s) = %v, want refused %v", addr, err, refused)
		}
	}
}

// An etcd server a spec gives at a refused address is never dialed (the
// test refuses an address of its own, where something listens).
func TestEtcdV3_NeverDialsAMetadataAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.3:0")
	if err != nil {
		t.Skipf("listening on 127.0.0.3: %v", err)
	}
	var accepted atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = c.Close()
		}
	}()
	defer func() { _ = l.Close() }()
	saved := metadataRanges
	metadataRanges = append(slices.Clone(saved), netip.MustParsePrefix("127.0.0.3/32"))
	defer func() { metadataRanges = saved }()

	err = EtcdV3{Timeout: time.Second}.Check(context.Background(), []string{"http://" + l.Addr().String()}, nil)
	var u *Unreachable
	if !errors.As(err, &u) {
		t.Fatalf("checking an etcd at a refused address: %v, want it unreachable", err)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the refused address accepted %d connections of the operator's etcd client, want none", n)
	}
}
