package tenantio

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// SnapshotKey is one key a Snapshot read.
type SnapshotKey struct {
	Key, Value []byte
	// TTL is what is left of the key's lease, in seconds; 0 without one.
	TTL int64
}

// Snapshot reads every key under prefix on endpoints at one revision (a
// consistent snapshot, page by page) and calls fn with each, in key order,
// with what is left of its lease; it returns the revision. A key whose
// lease ran out meanwhile is left out: etcd is deleting it.
func (e EtcdV3) Snapshot(ctx context.Context, endpoints []string, tlsConfig *tls.Config, prefix string, fn func(SnapshotKey) error) (int64, error) {
	cli, err := e.Client(endpoints, tlsConfig)
	if err != nil {
		return 0, failed("reading the keys under "+prefix, endpoints, err)
	}
	defer func() { _ = cli.Close() }()
	ttls := map[int64]int64{} // lease → seconds left (-1: gone)
	return e.pages(ctx, cli, endpoints, prefix, func(kvs []*mvccpb.KeyValue) error {
		for _, kv := range kvs {
			var ttl int64
			if kv.Lease != 0 {
				left, seen := ttls[kv.Lease]
				if !seen {
					reqCtx, cancel := context.WithTimeout(ctx, e.RequestTimeout())
					resp, err := cli.TimeToLive(reqCtx, clientv3.LeaseID(kv.Lease))
					cancel()
					if err != nil {
						// The key is the etcd's to name: the log has it.
						return failed("reading the leases of the keys under "+prefix, endpoints, fmt.Errorf("the lease of %q: %w", kv.Key, err))
					}
					left = resp.TTL
					ttls[kv.Lease] = left
				}
				if left <= 0 {
					continue
				}
				ttl = left
			}
			if err := fn(SnapshotKey{Key: kv.Key, Value: kv.Value, TTL: ttl}); err != nil {
				return err
			}
		}
		return nil
	})
}

// IsCompacted reports whether err says that etcd compacted the revision a
// read was pinned to: a Snapshot that outlasted the compaction interval.
func IsCompacted(err error) bool { return errors.Is(err, rpctypes.ErrCompacted) }

// Limits of one write transaction: etcd's defaults (--max-txn-ops 128,
// --max-request-bytes 1.5 MiB), with room to spare.
const (
	loadOps   = 100
	loadBytes = 1 << 20
)

// Loader writes keys into an etcd, in transactions of several puts, each
// key with a lease of its TTL (one lease per distinct TTL, rounded up to
// ten seconds).
type Loader struct {
	e         EtcdV3
	cli       *clientv3.Client
	endpoints []string
	leases    map[int64]clientv3.LeaseID
	ops       []clientv3.Op
	bytes     int
	// Written counts the keys written so far.
	Written int64
}

// Loader opens a Loader of endpoints; Close it.
func (e EtcdV3) Loader(endpoints []string, tlsConfig *tls.Config) (*Loader, error) {
	cli, err := e.Client(endpoints, tlsConfig)
	if err != nil {
		return nil, failed("writing keys", endpoints, err)
	}
	return &Loader{e: e, cli: cli, endpoints: endpoints, leases: map[int64]clientv3.LeaseID{}}, nil
}

// Put writes key (in a later transaction: Flush writes what is left).
func (l *Loader) Put(ctx context.Context, key, value []byte, ttl int64) error {
	var opts []clientv3.OpOption
	if ttl > 0 {
		ttl = (ttl + 9) / 10 * 10
		lease, ok := l.leases[ttl]
		if !ok {
			reqCtx, cancel := context.WithTimeout(ctx, l.e.RequestTimeout())
			resp, err := l.cli.Grant(reqCtx, ttl)
			cancel()
			if err != nil {
				return failed(fmt.Sprintf("granting a lease of %d s", ttl), l.endpoints, err)
			}
			lease = resp.ID
			l.leases[ttl] = lease
		}
		opts = append(opts, clientv3.WithLease(lease))
	}
	size := len(key) + len(value)
	if len(l.ops) > 0 && (len(l.ops) >= loadOps || l.bytes+size > loadBytes) {
		if err := l.Flush(ctx); err != nil {
			return err
		}
	}
	l.ops = append(l.ops, clientv3.OpPut(string(key), string(value), opts...))
	l.bytes += size
	return nil
}

// Flush writes the keys Put holds, in one transaction.
func (l *Loader) Flush(ctx context.Context) error {
	if len(l.ops) == 0 {
		return nil
	}
	reqCtx, cancel := context.WithTimeout(ctx, l.e.RequestTimeout())
	defer cancel()
	if _, err := l.cli.Txn(reqCtx).Then(l.ops...).Commit(); err != nil {
		return failed(fmt.Sprintf("writing %d keys", len(l.ops)), l.endpoints, err)
	}
	l.Written += int64(len(l.ops))
	l.ops, l.bytes = l.ops[:0], 0
	return nil
}

// Close releases the client (not what was written).
func (l *Loader) Close() error { return l.cli.Close() }
