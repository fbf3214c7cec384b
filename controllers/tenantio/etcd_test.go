package tenantio

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
)

// hostileKV is a tenant's etcd that answers ranges with large values: the
// keys of values, each of its size, and one giant value under /giant/.
type hostileKV struct {
	etcdserverpb.UnimplementedKVServer
	values map[string]int
}

func (h *hostileKV) Range(_ context.Context, r *etcdserverpb.RangeRequest) (*etcdserverpb.RangeResponse, error) {
	var keys []string
	for k := range h.values {
		if k >= string(r.Key) && (len(r.RangeEnd) == 0 || k < string(r.RangeEnd)) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	resp := &etcdserverpb.RangeResponse{Header: &etcdserverpb.ResponseHeader{Revision: 7}, Count: int64(len(keys))}
	if r.Limit > 0 && int64(len(keys)) > r.Limit {
		keys, resp.More = keys[:r.Limit], true
	}
	for _, k := range keys {
		resp.Kvs = append(resp.Kvs, &mvccpb.KeyValue{Key: []byte(k), Value: bytes.Repeat([]byte("x"), h.values[k])})
	}
	return resp, nil
}

// serveHostileEtcd runs the hostile etcd in a process of its own (this
// test binary, as TestHostileEtcdProcess), so that what it allocates to
// answer does not count in the heap the test measures.
func serveHostileEtcd(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHostileEtcdProcess$")
	cmd.Env = append(os.Environ(), "TENANTIO_HOSTILE_ETCD=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close() // the process ends when its stdin does
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("the hostile etcd did not say where it listens: %v", err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if !ok {
		t.Fatalf("the hostile etcd said %q", line)
	}
	return "http://" + addr
}

// TestHostileEtcdProcess is the hostile etcd's process: it serves until
// its stdin closes.
func TestHostileEtcdProcess(t *testing.T) {
	if os.Getenv("TENANTIO_HOSTILE_ETCD") == "" {
		t.Skip("the hostile etcd of TestEtcdV3_AHostileEtcdCannotMakeTheOperatorHoldWhatItSends")
	}
	kv := &hostileKV{values: map[string]int{"/giant/a": 100 << 20}}
	// 30 values of 1 MiB: 30 MiB in one page of 500 keys.
	for i := range 30 {
		kv.values[fmt.Sprintf("/big/%02d", i)] = 1 << 20
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.MaxSendMsgSize(1 << 30))
	etcdserverpb.RegisterKVServer(s, kv)
	go func() { _ = s.Serve(lis) }()
	fmt.Printf("listening on %s\n", lis.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	s.Stop()
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func TestEtcdV3_AHostileEtcdCannotMakeTheOperatorHoldWhatItSends(t *testing.T) {
	endpoint := serveHostileEtcd(t)
	e := EtcdV3{Timeout: 20 * time.Second}
	ctx := context.Background()

	before := heapInUse()
	err := e.Scan(ctx, []string{endpoint}, nil, "/giant/", func(key, value []byte) {
		t.Errorf("a value of %d bytes was handed over", len(value))
	})
	if err == nil || !strings.Contains(err.Error(), "is larger than 8 MiB") {
		t.Fatalf("want the 100 MiB answer refused, got %v", err)
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
