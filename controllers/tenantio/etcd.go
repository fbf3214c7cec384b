// Package tenantio is the operator's I/O with a tenant: its etcd servers
// (checks, counts, scans) and its own API (discovery, rewrites, the
// apiservers' metrics). The controllers decide; this package only talks,
// behind interfaces that step tests replace with fakes.
package tenantio

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Etcd talks to a tenant's etcd servers.
type Etcd interface {
	// Check asks every endpoint for its status; the error names the first
	// one that does not answer.
	Check(ctx context.Context, endpoints []string, tlsConfig *tls.Config) error
	// Count returns how many keys each prefix holds, with count-only reads.
	Count(ctx context.Context, endpoints []string, tlsConfig *tls.Config, prefixes ...string) ([]int64, error)
	// Scan calls fn with every key and value under prefix, as one
	// consistent snapshot read page by page.
	Scan(ctx context.Context, endpoints []string, tlsConfig *tls.Config, prefix string, fn func(key, value []byte)) error
	// Delete removes every key under prefix and returns how many it
	// removed.
	Delete(ctx context.Context, endpoints []string, tlsConfig *tls.Config, prefix string) (int64, error)
}

// EtcdV3 is the Etcd of go.etcd.io/etcd/client/v3.
type EtcdV3 struct {
	// Timeout bounds each dial and each request.
	Timeout time.Duration
}

// RequestTimeout bounds each dial and each request: Timeout, or 5 s.
func (e EtcdV3) RequestTimeout() time.Duration {
	if e.Timeout == 0 {
		return 5 * time.Second
	}
	return e.Timeout
}

// MaxResponseBytes is the largest response the operator takes from a
// tenant's etcd, against the client's default of 2 GiB (four times the
// operator's memory limit): gRPC refuses a longer message before it
// allocates it. It is five times etcd's own largest request (1.5 MiB), so
// that a page of a scan holds several of the largest values kube-apiserver
// can store; Scan reads pages that do not fit again, smaller.
const MaxResponseBytes = 8 << 20

// Client opens a client of endpoints; the caller closes it.
func (e EtcdV3) Client(endpoints []string, tlsConfig *tls.Config) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:          endpoints,
		TLS:                tlsConfig,
		DialTimeout:        e.RequestTimeout(),
		MaxCallRecvMsgSize: MaxResponseBytes,
		// The client's own logger would print every failed dial.
		Logger: zap.NewNop(),
	})
}

// Check implements Etcd.
func (e EtcdV3) Check(ctx context.Context, endpoints []string, tlsConfig *tls.Config) error {
	for _, ep := range endpoints {
		cli, err := e.Client([]string{ep}, tlsConfig)
		if err != nil {
			return &Unreachable{Endpoint: ep, Err: err}
		}
		reqCtx, cancel := context.WithTimeout(ctx, e.RequestTimeout())
		_, err = cli.Status(reqCtx, ep)
		cancel()
		_ = cli.Close()
		if err != nil {
			return &Unreachable{Endpoint: ep, Err: err}
		}
	}
	return nil
}

// Unreachable is the error of Check: the first endpoint that did not
// answer. Its message does not say why: the endpoints are the spec's, and
// telling a refused connection from a timeout or a TLS failure would let
// whoever writes a spec map which addresses of the management network
// answer. Detail has the cause, for the operator's log.
type Unreachable struct {
	Endpoint string
	Err      error
}

func (e *Unreachable) Error() string {
	return fmt.Sprintf("etcd %s did not answer (the operator's log has the cause)", e.Endpoint)
}

// Detail is the message with the cause.
func (e *Unreachable) Detail() string {
	return fmt.Sprintf("etcd %s did not answer: %v", e.Endpoint, e.Err)
}
func (e *Unreachable) Unwrap() error { return e.Err }

// Detail is err's message with its cause, for the operator's log.
func Detail(err error) string {
	var u *Unreachable
	if errors.As(err, &u) {
		return u.Detail()
	}
	return err.Error()
}

// UnreachableEndpoint is the endpoint err names: "" for no error, the whole
// message for an error of another kind.
func UnreachableEndpoint(err error) string {
	var u *Unreachable
	switch {
	case err == nil:
		return ""
	case errors.As(err, &u):
		return u.Endpoint
	default:
		return err.Error()
	}
}

// Count implements Etcd.
func (e EtcdV3) Count(ctx context.Context, endpoints []string, tlsConfig *tls.Config, prefixes ...string) ([]int64, error) {
	cli, err := e.Client(endpoints, tlsConfig)
	if err != nil {
		return nil, fmt.Errorf("connecting to etcd %v: %w", endpoints, err)
	}
	defer func() { _ = cli.Close() }()
	counts := make([]int64, len(prefixes))
	for i, p := range prefixes {
		reqCtx, cancel := context.WithTimeout(ctx, e.RequestTimeout())
		resp, err := cli.Get(reqCtx, p, clientv3.WithPrefix(), clientv3.WithCountOnly())
		cancel()
		if err != nil {
			return nil, fmt.Errorf("counting keys under %s in etcd %v: %w", p, endpoints, err)
		}
		counts[i] = resp.Count
	}
	return counts, nil
}

// scanPage is how many keys a Scan reads at once.
const scanPage = 500

// Scan implements Etcd: linearizable pages, all at the revision of
// the first one.
func (e EtcdV3) Scan(ctx context.Context, endpoints []string, tlsConfig *tls.Config, prefix string, fn func(key, value []byte)) error {
	cli, err := e.Client(endpoints, tlsConfig)
	if err != nil {
		return fmt.Errorf("connecting to etcd %v: %w", endpoints, err)
	}
	defer func() { _ = cli.Close() }()
	_, err = e.pages(ctx, cli, endpoints, prefix, func(kvs []*mvccpb.KeyValue) error {
		for _, kv := range kvs {
			fn(kv.Key, kv.Value)
		}
		return nil
	})
	return err
}

// pages reads every key under prefix at one revision, the first page's,
// page by page (smaller ones after a page too large for the client), and
// returns that revision.
func (e EtcdV3) pages(ctx context.Context, cli *clientv3.Client, endpoints []string, prefix string, fn func([]*mvccpb.KeyValue) error) (int64, error) {
	end := clientv3.GetPrefixRangeEnd(prefix)
	from := prefix
	var rev int64
	page := int64(scanPage)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(page)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		reqCtx, cancel := context.WithTimeout(ctx, e.RequestTimeout())
		resp, err := cli.Get(reqCtx, from, opts...)
		cancel()
		// gRPC refuses an answer over the limit with ResourceExhausted,
		// which etcd's own "too many requests" shares: the message tells.
		if status.Code(err) == codes.ResourceExhausted && strings.Contains(err.Error(), "larger than max") {
			if page > 1 {
				page = max(page/4, 1) // large values: smaller pages from here on
				continue
			}
			return 0, fmt.Errorf("reading the keys under %s in etcd %v: a value at or after key %q is larger than %d MiB, more than kube-apiserver stores: not read", prefix, endpoints, strings.TrimSuffix(from, "\x00"), MaxResponseBytes>>20)
		}
		if err != nil {
			return 0, fmt.Errorf("reading the keys under %s in etcd %v: %w", prefix, endpoints, err)
		}
		if rev == 0 {
			// Later pages answer with the store's revision in their
			// header, not the one they were read at.
			rev = resp.Header.Revision
		}
		if err := fn(resp.Kvs); err != nil {
			return 0, err
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// deleteTimeout bounds the deletion of a prefix: one request, which etcd
// applies at once however many keys it removes.
const deleteTimeout = 2 * time.Minute

// Delete implements Etcd with one range deletion.
func (e EtcdV3) Delete(ctx context.Context, endpoints []string, tlsConfig *tls.Config, prefix string) (int64, error) {
	if prefix == "" || prefix == "/" {
		return 0, fmt.Errorf("refusing to delete every key of etcd %v: a tenant's prefix is never the root", endpoints)
	}
	cli, err := e.Client(endpoints, tlsConfig)
	if err != nil {
		return 0, fmt.Errorf("connecting to etcd %v: %w", endpoints, err)
	}
	defer func() { _ = cli.Close() }()
	reqCtx, cancel := context.WithTimeout(ctx, max(deleteTimeout, e.RequestTimeout()))
	defer cancel()
	resp, err := cli.Delete(reqCtx, prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("deleting the keys under %s in etcd %v: %w", prefix, endpoints, err)
	}
	return resp.Deleted, nil
}
