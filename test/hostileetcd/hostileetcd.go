// Package hostileetcd is a tenant's etcd that answers what the operator
// must not take whole: it passes the operator's status check like any
// etcd, then its ranges answer values of the sizes a test gives, 100 MiB
// as readily as one byte. It runs in a process of its own (the test binary
// again), so that what it allocates to answer does not count in the heap
// of the test's process, which the test measures.
package hostileetcd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
)

// Values is what the etcd holds: each key and the size of its value.
type Values map[string]int

// valuesEnv carries the Values to the etcd's process.
const valuesEnv = "HOSTILE_ETCD_VALUES"

// Start runs an etcd that holds values and returns its endpoint; the etcd
// stops with the test. Its process is the test binary, which must call
// ServeIfAsked from an init function.
func Start(t testing.TB, values Values) string {
	t.Helper()
	encoded, err := json.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), valuesEnv+"="+string(encoded))
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
		t.Fatalf("the hostile etcd did not say where it listens (does an init function of the test call hostileetcd.ServeIfAsked?): %v", err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if !ok {
		t.Fatalf("the hostile etcd said %q", line)
	}
	return "http://" + addr
}

// ServeIfAsked serves as the etcd, and exits when its stdin closes, in the
// process that Start runs; in any other it returns at once. Call it from an
// init function of the test package: it runs before TestMain starts
// anything.
func ServeIfAsked() {
	encoded, ok := os.LookupEnv(valuesEnv)
	if !ok {
		return
	}
	if err := serve(encoded); err != nil {
		fmt.Fprintf(os.Stderr, "hostile etcd: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func serve(encoded string) error {
	var values Values
	if err := json.Unmarshal([]byte(encoded), &values); err != nil {
		return err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	// An answer is made and marshalled once, however many times it is
	// asked: it comes at once however busy the machine, before the
	// operator's request times out.
	c := &codec{proto: encoding.GetCodecV2("proto")}
	s := grpc.NewServer(grpc.MaxSendMsgSize(1<<30), grpc.ForceServerCodecV2(c))
	held := map[string][]byte{}
	for k, size := range values {
		held[k] = bytes.Repeat([]byte("x"), size)
	}
	store := &kv{values: held, codec: c}
	// The answer naming one key is made before the operator asks: it is
	// the answer of a range that holds only that key, whatever its limit.
	for k := range held {
		if _, err := store.Range(context.Background(), &etcdserverpb.RangeRequest{Key: []byte(k)}); err != nil {
			return err
		}
	}
	etcdserverpb.RegisterKVServer(s, store)
	etcdserverpb.RegisterMaintenanceServer(s, maintenance{})
	go func() { _ = s.Serve(lis) }()
	fmt.Printf("listening on %s\n", lis.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	s.Stop()
	return nil
}

// header is the header of every answer: an etcd at revision 7.
func header() *etcdserverpb.ResponseHeader {
	return &etcdserverpb.ResponseHeader{ClusterId: 1, MemberId: 1, Revision: 7, RaftTerm: 1}
}

// maintenance answers the operator's status check as a healthy etcd.
type maintenance struct {
	etcdserverpb.UnimplementedMaintenanceServer
}

func (maintenance) Status(context.Context, *etcdserverpb.StatusRequest) (*etcdserverpb.StatusResponse, error) {
	return &etcdserverpb.StatusResponse{Header: header(), Version: "3.6.0", Leader: 1, RaftIndex: 7, RaftTerm: 1}, nil
}

// codec is gRPC's, but for the answers it holds marshalled.
type codec struct {
	proto      encoding.CodecV2
	marshalled sync.Map // *etcdserverpb.RangeResponse → []byte
}

func (c *codec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := c.marshalled.Load(v); ok {
		return mem.BufferSlice{mem.SliceBuffer(b.([]byte))}, nil
	}
	return c.proto.Marshal(v)
}

func (c *codec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (c *codec) Name() string { return c.proto.Name() }

// kv answers ranges with the values, in key order, as many as the limit
// asks.
type kv struct {
	etcdserverpb.UnimplementedKVServer
	values map[string][]byte
	codec  *codec
	mu     sync.Mutex
	// answers are the answers given, by what they hold.
	answers map[string]*etcdserverpb.RangeResponse
}

func (h *kv) Range(_ context.Context, r *etcdserverpb.RangeRequest) (*etcdserverpb.RangeResponse, error) {
	from, end := string(r.Key), string(r.RangeEnd)
	var keys []string
	for k := range h.values {
		// No end: the key alone; "\x00": every key from it on.
		if k == from || k > from && (end == "\x00" || end != "" && k < end) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	count, more := len(keys), false
	if r.CountOnly {
		keys = nil
	} else if r.Limit > 0 && int64(len(keys)) > r.Limit {
		keys, more = keys[:r.Limit], true
	}
	holds := fmt.Sprintf("%d %t %q", count, more, keys)
	h.mu.Lock()
	defer h.mu.Unlock()
	if resp, ok := h.answers[holds]; ok {
		return resp, nil
	}
	resp := &etcdserverpb.RangeResponse{Header: header(), Count: int64(count), More: more}
	for _, k := range keys {
		resp.Kvs = append(resp.Kvs, &mvccpb.KeyValue{Key: []byte(k), Value: h.values[k], CreateRevision: 7, ModRevision: 7, Version: 1})
	}
	marshalled, err := h.codec.proto.Marshal(resp)
	if err != nil {
		return nil, err
	}
	h.codec.marshalled.Store(resp, marshalled.Materialize())
	marshalled.Free()
	if h.answers == nil {
		h.answers = map[string]*etcdserverpb.RangeResponse{}
	}
	h.answers[holds] = resp
	return resp, nil
}
