package tenantio

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// realEtcd starts the etcd of KUBEBUILDER_ASSETS (make test sets it).
func realEtcd(t *testing.T) []string {
	t.Helper()
	path := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "etcd")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no etcd binary at %s: set KUBEBUILDER_ASSETS to bin/ (make test does): %v", path, err)
	}
	e := &envtest.Etcd{Path: path}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop() })
	return []string{e.URL.String()}
}

func TestEtcdV3_SnapshotIsOneRevisionAndLoadWritesItElsewhere(t *testing.T) {
	ctx := context.Background()
	endpoints := realEtcd(t)
	e := EtcdV3{}
	cli, err := e.Client(endpoints, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	const n = 1234 // more than two pages
	for i := range n {
		if _, err := cli.Put(ctx, fmt.Sprintf("/tenants/a/configmaps/default/cm-%05d", i), fmt.Sprintf("value %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	lease, err := cli.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/tenants/a/events/default/e", "an event", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	// Keys beside the prefix are not the tenant's.
	if _, err := cli.Put(ctx, "/tenants/ab/configmaps/default/x", "x"); err != nil {
		t.Fatal(err)
	}

	var keys []SnapshotKey
	written := false
	rev, err := e.Snapshot(ctx, endpoints, nil, "/tenants/a/", func(k SnapshotKey) error {
		keys = append(keys, k)
		if !written {
			// Written after the snapshot's revision: not in it.
			written = true
			if _, err := cli.Put(ctx, "/tenants/a/configmaps/default/zz-later", "later"); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != n+1 || rev == 0 {
		t.Fatalf("the snapshot holds %d keys at revision %d, want %d", len(keys), rev, n+1)
	}
	event := keys[len(keys)-1]
	if string(event.Key) != "/tenants/a/events/default/e" || event.TTL < 3500 || event.TTL > 3600 {
		t.Fatalf("the last key is %s with a TTL of %d s", event.Key, event.TTL)
	}

	l, err := e.Loader(endpoints, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	for _, k := range keys {
		moved := append([]byte("/tenants/b/"), bytes.TrimPrefix(k.Key, []byte("/tenants/a/"))...)
		if err := l.Put(ctx, moved, k.Value, k.TTL); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if l.Written != int64(len(keys)) {
		t.Fatalf("wrote %d keys", l.Written)
	}
	got, err := cli.Get(ctx, "/tenants/b/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != n+1 {
		t.Fatalf("%d keys under the new prefix", len(got.Kvs))
	}
	for i, kv := range got.Kvs {
		if !bytes.Equal(kv.Value, keys[i].Value) {
			t.Fatalf("%s holds %q, want %q", kv.Key, kv.Value, keys[i].Value)
		}
	}
	ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(got.Kvs[n].Lease))
	if err != nil || ttl.TTL < 3500 {
		t.Fatalf("the moved event's lease has %d s left (%v)", ttl.TTL, err)
	}
}
