// Package tenantio is the operator's I/O with a tenant: its etcd servers
// (checks, counts, scans) and its own API (discovery, rewrites, the
// apiservers' metrics). The controllers decide; this package only talks,
// behind interfaces that step tests replace with fakes.
package tenantio

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Etcd talks to a tenant's etcd servers. Every error of a request is an
// *Unreachable: coarse in its message, whole in Detail.
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
	dialer := &net.Dialer{Control: RefuseMetadata}
	return clientv3.New(clientv3.Config{
		Endpoints:          endpoints,
		TLS:                tlsConfig,
		DialTimeout:        e.RequestTimeout(),
		MaxCallRecvMsgSize: MaxResponseBytes,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			if _, host, ok := strings.Cut(addr, "://"); ok {
				addr = host
			}
			return dialer.DialContext(ctx, "tcp", addr)
		})},
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

// Unreachable is the error of a request to a tenant's etcd: what was
// asked, of which servers (as the spec names them), and why it failed in
// a few words. Its message says no more: the endpoints are the spec's, and
// telling a refused connection from a timeout or a TLS failure would let
// whoever writes a spec map which addresses of the management network
// answer (status shows the message to them). Detail has the cause, for
// the operator's log.
type Unreachable struct {
	// Doing is what was asked: "" for the status of Check.
	Doing string
	// Endpoint is the server asked, or the servers, comma-separated.
	Endpoint string
	// Cause follows "etcd <Endpoint>": "did not answer" when empty.
	Cause string
	Err   error
}

func (e *Unreachable) Error() string {
	return e.what() + " (the operator's log has the cause)"
}

// Detail is the message with the cause.
func (e *Unreachable) Detail() string {
	return fmt.Sprintf("%s: %v", e.what(), e.Err)
}

func (e *Unreachable) what() string {
	s := fmt.Sprintf("etcd %s %s", e.Endpoint, cmp.Or(e.Cause, "did not answer"))
	if e.Doing != "" {
		s = e.Doing + ": " + s
	}
	return s
}

func (e *Unreachable) Unwrap() error { return e.Err }

// failed is the error of a request to endpoints that err ended. A pass
// asks a server anything else only once it answered the status check, so
// the cause may say how it answered: too much, a refusal of the
// operator's credentials, a revision compacted. Anything else (a refused
// connection, a timeout, a TLS failure alike) is that it did not answer.
func failed(doing string, endpoints []string, err error) error {
	cause := ""
	switch {
	case tooLarge(err):
		cause = fmt.Sprintf("answered more than %d MiB", MaxResponseBytes>>20)
	case errors.Is(err, rpctypes.ErrCompacted):
		cause = "compacted the revision being read"
	case errors.Is(err, rpctypes.ErrUserEmpty), code(err) == codes.PermissionDenied, code(err) == codes.Unauthenticated:
		cause = "refused the operator's credentials"
	}
	return &Unreachable{Doing: doing, Endpoint: strings.Join(endpoints, ","), Cause: cause, Err: err}
}

// code is the gRPC code of err, which the etcd client turns into an
// rpctypes.EtcdError when etcd named it.
func code(err error) codes.Code {
	var e rpctypes.EtcdError
	if errors.As(err, &e) {
		return e.Code()
	}
	return status.Code(err)
}

// tooLarge says that gRPC refused an answer over MaxResponseBytes: with
// ResourceExhausted, which etcd's own "too many requests" shares; the
// message tells.
func tooLarge(err error) bool {
	return status.Code(err) == codes.ResourceExhausted && strings.Contains(err.Error(), "larger than max")
}

// Detail is err's message with the cause that an Unreachable in it leaves
// out, for the operator's log.
func Detail(err error) string {
	var u *Unreachable
	if !errors.As(err, &u) {
		return err.Error()
	}
	if msg := err.Error(); strings.Contains(msg, u.Error()) {
		return strings.Replace(msg, u.Error(), u.Detail(), 1)
	}
	return err.Error() + ": " + u.Detail()
}

// UnreachableEndpoint is the endpoint, or endpoints, err names: "" for no
// error, the whole message for an error of another kind.
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
		return nil, failed("counting keys", endpoints, err)
	}
	defer func() { _ = cli.Close() }()
	counts := make([]int64, len(prefixes))
	for i, p := range prefixes {
		reqCtx, cancel := context.WithTimeout(ctx, e.RequestTimeout())
		resp, err := cli.Get(reqCtx, p, clientv3.WithPrefix(), clientv3.WithCountOnly())
		cancel()
		if err != nil {
			return nil, failed("counting the keys under "+p, endpoints, err)
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
		return failed("reading the keys under "+prefix, endpoints, err)
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
		if tooLarge(err) {
			if page > 1 {
				page = max(page/4, 1) // large values: smaller pages from here on
				continue
			}
			// The key is the etcd's to name, and as long as it likes:
			// the log has it, status does not.
			return 0, &Unreachable{Doing: "reading the keys under " + prefix, Endpoint: strings.Join(endpoints, ","),
				Cause: fmt.Sprintf("answered a value of more than %d MiB, more than kube-apiserver stores", MaxResponseBytes>>20),
				Err:   fmt.Errorf("the value at or after key %q: %w", strings.TrimSuffix(from, "\x00"), err)}
		}
		if err != nil {
			return 0, failed("reading the keys under "+prefix, endpoints, err)
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
		return 0, failed("deleting the keys under "+prefix, endpoints, err)
	}
	defer func() { _ = cli.Close() }()
	reqCtx, cancel := context.WithTimeout(ctx, max(deleteTimeout, e.RequestTimeout()))
	defer cancel()
	resp, err := cli.Delete(reqCtx, prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, failed("deleting the keys under "+prefix, endpoints, err)
	}
	return resp.Deleted, nil
}
