package tenantio

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/test/hostileetcd"
)

// The hostile etcd's process is this test binary: it serves before any
// test runs.
func init() { hostileetcd.ServeIfAsked() }

// hostileValues: one giant value under /giant/, and 30 values of 1 MiB
// (30 MiB in one page of 500 keys) under /big/.
func hostileValues() hostileetcd.Values {
	values := hostileetcd.Values{"/giant/a": 100 << 20}
	for i := range 30 {
		values[fmt.Sprintf("/big/%02d", i)] = 1 << 20
	}
	return values
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func TestEtcdV3_AHostileEtcdCannotMakeTheOperatorHoldWhatItSends(t *testing.T) {
	endpoint := hostileetcd.Start(t, hostileValues())
	e := EtcdV3{Timeout: 20 * time.Second}
	ctx := context.Background()

	before := heapInUse()
	err := e.Scan(ctx, []string{endpoint}, nil, "/giant/", func(key, value []byte) {
		t.Errorf("a value of %d bytes was handed over", len(value))
	})
	if err == nil || err.Error() != "reading the keys under /giant/: etcd "+endpoint+" answered a value of more than 8 MiB, more than kube-apiserver stores (the operator's log has the cause)" {
		t.Fatalf("want the 100 MiB answer refused, got %v", err)
	}
	// The key and gRPC's words are the log's.
	if d := Detail(err); !strings.Contains(d, `key "/giant/"`) || !strings.Contains(d, "larger than max") {
		t.Errorf("the detail is %q", d)
	}
	// gRPC refuses the message from its length, before reading it.
	if grown := int64(heapInUse()) - int64(before); grown > 20<<20 {
		t.Errorf("the heap grew by %d MiB reading a refused answer", grown>>20)
	}

	// Large values that kube-apiserver can store are read, in pages small
	// enough to take.
	var seen []string
	if err := e.Scan(ctx, []string{endpoint}, nil, "/big/", func(key, value []byte) {
		if len(value) != 1<<20 {
			t.Errorf("%s: %d bytes, want 1 MiB", key, len(value))
		}
		seen = append(seen, string(key))
	}); err != nil {
		t.Fatalf("scanning 30 values of 1 MiB: %v", err)
	}
	if len(seen) != 30 || !sort.StringsAreSorted(seen) {
		t.Fatalf("the scan saw %d keys (%v), want the 30 in order", len(seen), seen)
	}
}

// A spec's etcd servers are any address: what Check reports (status shows
// it to whoever wrote the spec) must not tell an address where nothing
// answers from one where a server answers that is no etcd. The operator's
// log has the cause.
func TestEtcdV3_CheckTellsNotWhyAnAddressDidNotAnswer(t *testing.T) {
	closing, grpcOnly := listen(t), listen(t)
	go func() {
		for {
			c, err := closing.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	s := grpc.NewServer() // a gRPC server, but no etcd
	go func() { _ = s.Serve(grpcOnly) }()
	t.Cleanup(s.Stop)

	e := EtcdV3{Timeout: time.Second}
	messages, details := map[string]bool{}, map[string]bool{}
	for _, lis := range []net.Listener{closing, grpcOnly} {
		ep := "http://" + lis.Addr().String()
		err := e.Check(context.Background(), []string{ep}, nil)
		if err == nil {
			t.Fatalf("%s answered", ep)
		}
		if UnreachableEndpoint(err) != ep {
			t.Fatalf("the error names %q, want %s", UnreachableEndpoint(err), ep)
		}
		messages[strings.ReplaceAll(err.Error(), ep, "EP")] = true
		details[strings.ReplaceAll(Detail(err), ep, "EP")] = true
	}
	if len(messages) != 1 {
		t.Errorf("the messages tell the two addresses apart: %v", messages)
	}
	if len(details) != 2 {
		t.Errorf("the log's details do not tell the causes apart: %v", details)
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	return lis
}

// What a request to a tenant's etcd met is told in status in a few words;
// gRPC's, with the addresses it dialled, are the log's.
func TestFailed_SaysCoarselyWhy(t *testing.T) {
	refused := status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 10.0.0.7:2379: connect: connection refused"`)
	for _, tt := range []struct {
		err  error
		want string
	}{
		{refused, "did not answer"},
		{context.DeadlineExceeded, "did not answer"},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"`), "did not answer"},
		{status.Error(codes.ResourceExhausted, "grpc: received message larger than max (104857612 vs. 8388608)"), "answered more than 8 MiB"},
		{rpctypes.ErrTooManyRequests, "did not answer"},
		{rpctypes.ErrPermissionDenied, "refused the operator's credentials"},
		{rpctypes.ErrUserEmpty, "refused the operator's credentials"},
		{rpctypes.ErrInvalidAuthToken, "refused the operator's credentials"},
		{rpctypes.ErrCompacted, "compacted the revision being read"},
	} {
		err := fmt.Errorf("checking the data: %w", failed("reading the keys under /t/", []string{"https://a:2379", "https://b:2379"}, tt.err))
		want := "checking the data: reading the keys under /t/: etcd https://a:2379,https://b:2379 " + tt.want + " (the operator's log has the cause)"
		if err.Error() != want {
			t.Errorf("%v:\n got %s\nwant %s", tt.err, err, want)
		}
		if d := Detail(err); !strings.HasPrefix(d, "checking the data: reading the keys under /t/: etcd https://a:2379,https://b:2379 "+tt.want+": ") || !strings.HasSuffix(d, tt.err.Error()) {
			t.Errorf("%v: the detail is %s", tt.err, d)
		}
		if !errors.Is(err, tt.err) {
			t.Errorf("%v: not in the chain of %v", tt.err, err)
		}
	}
	if !IsCompacted(failed("reading", nil, rpctypes.ErrCompacted)) {
		t.Error("a compaction is not told as one")
	}
}

// Whatever the operator asks of an etcd that stops answering after its
// check, the error says what was asked of which servers, not why.
func TestEtcdV3_EveryRequestIsTold(t *testing.T) {
	closing := listen(t)
	go func() {
		for {
			c, err := closing.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	ep := "http://" + closing.Addr().String()
	eps := []string{ep}
	e := EtcdV3{Timeout: 500 * time.Millisecond}
	ctx := context.Background()
	_, count := e.Count(ctx, eps, nil, "/t/")
	scan := e.Scan(ctx, eps, nil, "/t/", func(_, _ []byte) {})
	// A deletion waits minutes for the etcd, unless its context says less.
	short, cancel := context.WithTimeout(ctx, e.Timeout)
	_, del := e.Delete(short, eps, nil, "/t/")
	cancel()
	_, snapshot := e.Snapshot(ctx, eps, nil, "/t/", func(SnapshotKey) error { return nil })
	var load error
	if l, err := e.Loader(eps, nil); err != nil {
		load = err
	} else {
		_ = l.Put(ctx, []byte("/t/a"), []byte("a"), 0)
		load = l.Flush(ctx)
		_ = l.Close()
	}
	ensure := e.EnsureUser(ctx, eps, nil, "u", []apiserver.EtcdKeyRange{{Key: "/t/", End: "/t0"}})
	remove := e.RemoveUser(ctx, eps, nil, "u")
	for _, tt := range []struct {
		err   error
		doing string
	}{
		{count, "counting the keys under /t/"},
		{scan, "reading the keys under /t/"},
		{del, "deleting the keys under /t/"},
		{snapshot, "reading the keys under /t/"},
		{load, "writing 1 keys"},
		{ensure, "asking whether etcd enforces authentication"},
		{remove, "deleting the etcd user u"},
	} {
		want := tt.doing + ": etcd " + ep + " did not answer (the operator's log has the cause)"
		if tt.err == nil || tt.err.Error() != want {
			t.Errorf("got %v\nwant %s", tt.err, want)
			continue
		}
		if UnreachableEndpoint(tt.err) != ep || Detail(tt.err) == tt.err.Error() {
			t.Errorf("%s: names %q, and its detail is %q", tt.doing, UnreachableEndpoint(tt.err), Detail(tt.err))
		}
	}
}
