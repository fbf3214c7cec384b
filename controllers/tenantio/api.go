package tenantio

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// API is what the operator does through a tenant's own API: the
// re-encryption rewrites stored objects there, so that kube-apiserver
// encrypts them again with the key that encrypts now.
type API interface {
	// Resources are the group/resources the tenant serves that can be
	// rewritten (listed, patched), custom resources included. When a
	// group's discovery failed, the others come with an error.
	Resources(ctx context.Context) (map[schema.GroupResource]Resource, error)
	// Rewrite writes an object back unchanged. An object that is gone is
	// not an error: whatever replaced it was written with the current key.
	Rewrite(ctx context.Context, r Resource, namespace, name string) error
	// Metrics reads the metric families named of the /metrics of the
	// apiserver pod at podIP (each apiserver counts its own requests),
	// in the text format; the rest is read past, not kept.
	Metrics(ctx context.Context, podIP string, families ...string) ([]byte, error)
}

// Resource is one resource a tenant serves.
type Resource struct {
	// Version is the served version the operator talks to (the
	// preferred one).
	schema.GroupVersionResource
	Namespaced bool
	// Custom: a custom resource (a CRD's), stored under group/resource.
	Custom bool
}

// Timeout bounds each call to a tenant's API.
const Timeout = 10 * time.Second

// What the operator reads from a tenant's API at most. A tenant's
// apiserver may run any image (spec.image), and a process in it may answer
// anything: every response is cut at MaxAPIResponseBytes (a discovery
// document, a page of a list, a patched object are far smaller), and of
// an apiserver's /metrics, which grows with the resources it serves, at
// most MaxMetricsBytes are read and only the families asked for are kept,
// at most MaxMetricsKeptBytes of them.
const (
	MaxAPIResponseBytes = 32 << 20
	MaxMetricsBytes     = 256 << 20
	MaxMetricsKeptBytes = 16 << 20
	// A discovery document (a tenant's aggregated discovery with hundreds
	// of resources is about 1 MiB), and all of one discovery's documents.
	MaxDiscoveryDocumentBytes = 8 << 20
	MaxDiscoveryBytes         = 32 << 20
	// The body of an answer that is an error: client-go reads it whole.
	maxErrorBodyBytes = 64 << 10
)

// DefaultReadBudgetBytes is what the operator holds at most of the answers
// it is reading from every tenant at once (SetReadBudget).
const DefaultReadBudgetBytes = 256 << 20

// readBudget bounds the bytes of the tenants' answers held at once, over
// every tenant and reconcile worker: API answers and discovery documents
// are read whole before they are decoded, so each holds what it read
// until its body is closed. A read that would pass the budget waits for
// room, within its own deadline (Timeout). /metrics is streamed and keeps
// only the families asked for: it is bounded on its own.
var readBudget atomic.Pointer[semaphore.Weighted]

func init() { _ = SetReadBudget(DefaultReadBudgetBytes) }

// SetReadBudget sets the budget of the bytes read from tenants at once; it
// must be at least MaxAPIResponseBytes, or the largest answer could never
// be read.
func SetReadBudget(size int64) error {
	if size < MaxAPIResponseBytes {
		return fmt.Errorf("the budget for reads from tenants is %d bytes: it must hold at least one whole answer, %d MiB", size, MaxAPIResponseBytes>>20)
	}
	readBudget.Store(semaphore.NewWeighted(size))
	readBudgetBytes.Store(size)
	return nil
}

// readBudgetChunk is the most one read of a body takes of the budget
// before it reads.
const readBudgetChunk = 1 << 20

// readBudgetBytes is the budget SetReadBudget set last, for errors.
var readBudgetBytes atomic.Int64

// Connect reaches a tenant's API at host:port (its Service), as the
// administrator adminKubeconfig holds; serverName, a SAN of the serving
// certificate, verifies an apiserver pod reached at its own address on
// podPort.
func Connect(adminKubeconfig []byte, host string, port int32, serverName string, podPort int32) (API, error) {
	rc, err := clientcmd.RESTConfigFromKubeConfig(adminKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("connecting to the tenant's API: reading the admin kubeconfig: %w", err)
	}
	rc.Host = "https://" + net.JoinHostPort(host, strconv.Itoa(int(port)))
	rc.Timeout = Timeout
	// The operator paces its own writes (spec.encryption.rewritesPerSecond).
	rc.QPS, rc.Burst = -1, 0
	rc.UserAgent = "apiserver-operator"
	base := rest.CopyConfig(rc)
	wrapCapped(rc, MaxAPIResponseBytes, nil, true)
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("connecting to the tenant's API at %s: %w", rc.Host, err)
	}
	meta, err := metadata.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("connecting to the tenant's API at %s: %w", rc.Host, err)
	}
	return &client{dyn: dyn, meta: meta, host: rc.Host, rc: base, clusterIP: serverName, port: podPort}, nil
}

// wrapCapped caps the responses of rc's client at limit bytes each
// (capResponses), and, with total, at what is left of total over all of
// them, budgeted or not; after what rc already wraps its transport with.
func wrapCapped(rc *rest.Config, limit int64, total *atomic.Int64, budgeted bool) {
	prev := rc.WrapTransport
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if prev != nil {
			rt = prev(rt)
		}
		return capResponses(limit, total, budgeted)(rt)
	}
}

type client struct {
	dyn  dynamic.Interface
	meta metadata.Interface
	host string
	// rc reaches the Service, uncapped (each use caps it); clusterIP (a
	// SAN of the serving certificate) verifies a pod reached at its own
	// address, on port.
	rc        *rest.Config
	clusterIP string
	port      int32
}

func (t *client) metrics(ctx context.Context, podIP string, families ...string) ([]byte, error) {
	rc := rest.CopyConfig(t.rc)
	rc.Host = "https://" + net.JoinHostPort(podIP, strconv.Itoa(int(t.port)))
	rc.TLSClientConfig.ServerName = t.clusterIP
	rc.GroupVersion, rc.NegotiatedSerializer = &schema.GroupVersion{}, scheme.Codecs.WithoutConversion()
	// The client is this call's own, so its connection is never used
	// again: closed at once rather than left idle until its timeout (the
	// audit watch reads thousands of apiservers each round).
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return closingTransport{rt} }
	wrapCapped(rc, MaxMetricsBytes, nil, false)
	rcl, err := rest.RESTClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("reaching the apiserver pod at %s: %w", rc.Host, err)
	}
	req := rcl.Get().AbsPath("/metrics")
	// kube-apiserver's handler (client_golang's promhttp, from v1.24 in
	// kube-apiserver 1.37) serves only the families named; an older one
	// serves all, which metricFamilies filters.
	for _, f := range families {
		req = req.Param("name[]", f)
	}
	body, err := req.Stream(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the metrics of the apiserver pod at %s: %w", rc.Host, err)
	}
	defer func() { _ = body.Close() }()
	data, err := metricFamilies(body, families)
	if err != nil {
		return nil, fmt.Errorf("reading the metrics of the apiserver pod at %s: %w", rc.Host, err)
	}
	return data, nil
}

// closingTransport asks for the connection of each request to be closed
// after its response.
type closingTransport struct{ rt http.RoundTripper }

func (c closingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Close = true
	return c.rt.RoundTrip(req)
}

// metricFamilies keeps the lines of the text exposition format that
// belong to one of families (their HELP and TYPE lines, their samples, a
// histogram's or summary's _bucket, _sum and _count).
func metricFamilies(r io.Reader, families []string) ([]byte, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var out bytes.Buffer
	for sc.Scan() {
		line := sc.Bytes()
		name := line
		if after, ok := bytes.CutPrefix(line, []byte("# HELP ")); ok {
			name = after
		} else if after, ok := bytes.CutPrefix(line, []byte("# TYPE ")); ok {
			name = after
		}
		if i := bytes.IndexAny(name, "{ \t"); i >= 0 {
			name = name[:i]
		}
		if !slices.ContainsFunc(families, func(f string) bool { return isSeriesOf(string(name), f) }) {
			continue
		}
		if out.Len()+len(line)+1 > MaxMetricsKeptBytes {
			return nil, fmt.Errorf("the metrics %v are longer than %d MiB: not read", families, MaxMetricsKeptBytes>>20)
		}
		out.Write(line)
		out.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// isSeriesOf reports whether the series name belongs to family.
func isSeriesOf(name, family string) bool {
	suffix, ok := strings.CutPrefix(name, family)
	return ok && (suffix == "" || suffix == "_bucket" || suffix == "_sum" || suffix == "_count")
}

// capResponses cuts every response body at limit bytes (an error answer's
// at maxErrorBodyBytes, which client-go reads whole), and, with total, at
// what is left of it: reading past either is an error, so that a truncated
// document is never taken for a whole one. A budgeted body takes what it
// reads from readBudget until it is closed.
func capResponses(limit int64, total *atomic.Int64, budgeted bool) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err != nil {
				return resp, err
			}
			what := req.Method + " " + req.URL.Path
			capped := limit
			if resp.StatusCode < 200 || resp.StatusCode > 299 {
				capped = min(capped, maxErrorBodyBytes)
			}
			if resp.ContentLength > capped {
				_ = resp.Body.Close()
				return nil, fmt.Errorf("%s: the answer is %d bytes, more than the %d the operator reads from a tenant", what, resp.ContentLength, capped)
			}
			body := &cappedBody{ReadCloser: resp.Body, left: capped, max: capped, total: total, what: what}
			if budgeted {
				body.budget, body.ctx = readBudget.Load(), req.Context()
			}
			resp.Body = body
			return resp, nil
		})
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// cappedBody reads at most max bytes of a body, and what is left of total
// (when set), and fails if there are more.
type cappedBody struct {
	io.ReadCloser
	left, max int64
	total     *atomic.Int64
	what      string
	// budget, when set, holds held bytes of it until Close; ctx bounds
	// the wait for room.
	budget *semaphore.Weighted
	ctx    context.Context
	mu     sync.Mutex
	held   int64
}

// Close closes the body and gives back what it held of the budget.
func (b *cappedBody) Close() error {
	err := b.ReadCloser.Close()
	if b.budget != nil {
		b.mu.Lock()
		held := b.held
		b.held = 0
		b.mu.Unlock()
		if held > 0 {
			b.budget.Release(held)
		}
	}
	return err
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		n, err := io.ReadFull(b.ReadCloser, one[:])
		switch {
		case n > 0:
			return 0, fmt.Errorf("%s: the answer is longer than the %d MiB the operator reads from a tenant", b.what, b.max>>20)
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			return 0, io.EOF
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	if b.budget != nil {
		// Taken a chunk at a time: a reader's buffer may be far larger
		// than what one read returns, and would hold others back.
		p = p[:min(len(p), readBudgetChunk)]
		want := int64(len(p))
		if err := b.budget.Acquire(b.ctx, want); err != nil {
			return 0, fmt.Errorf("%s: waiting for room in the operator's budget for what it reads from tenants at once (%d MiB, --tenant-read-budget): %w", b.what, readBudgetBytes.Load()>>20, err)
		}
		n, err := b.ReadCloser.Read(p)
		b.mu.Lock()
		b.held += int64(n)
		b.mu.Unlock()
		if surplus := want - int64(n); surplus > 0 {
			b.budget.Release(surplus)
		}
		return b.counted(n, err)
	}
	return b.counted(b.ReadCloser.Read(p))
}

// counted takes n bytes read off what is left.
func (b *cappedBody) counted(n int, err error) (int, error) {
	b.left -= int64(n)
	if b.total != nil && b.total.Add(-int64(n)) < 0 {
		return n, fmt.Errorf("%s: the tenant's answers are longer than the operator reads from it at once", b.what)
	}
	return n, err
}

// crdResource is where a tenant lists its custom resource definitions.
var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

func (t *client) resources(ctx context.Context) (map[schema.GroupResource]Resource, error) {
	// Discovery reads a document per group, side by side: each is capped,
	// and so are all of them together.
	rc := rest.CopyConfig(t.rc)
	var left atomic.Int64
	left.Store(MaxDiscoveryBytes)
	wrapCapped(rc, MaxDiscoveryDocumentBytes, &left, true)
	disc, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("connecting to the tenant's API at %s: %w", t.host, err)
	}
	lists, discoveryErr := disc.ServerPreferredResources()
	if discoveryErr != nil && len(lists) == 0 {
		return nil, fmt.Errorf("reading the discovery of the tenant's API at %s: %w", t.host, discoveryErr)
	}
	// Their names only: a CRD is named <plural>.<group> (apiextensions
	// refuses any other name), and its schema may be large.
	crds, err := t.meta.Resource(crdResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the custom resource definitions of the tenant's API at %s: %w", t.host, err)
	}
	custom := map[schema.GroupResource]bool{}
	for _, crd := range crds.Items {
		plural, group, _ := strings.Cut(crd.Name, ".")
		custom[schema.GroupResource{Group: group, Resource: plural}] = true
	}
	out := map[schema.GroupResource]Resource{}
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			if !canRewrite(r) {
				continue
			}
			gr := schema.GroupResource{Group: gv.Group, Resource: r.Name}
			out[gr] = Resource{GroupVersionResource: gv.WithResource(r.Name), Namespaced: r.Namespaced, Custom: custom[gr]}
		}
	}
	if discoveryErr != nil {
		// A group whose discovery failed (an aggregated API that is down):
		// enough to rewrite with, not to prove that nothing was missed.
		return out, fmt.Errorf("reading the discovery of the tenant's API at %s: %w", t.host, discoveryErr)
	}
	return out, nil
}

func canRewrite(r metav1.APIResource) bool {
	has := func(verb string) bool {
		for _, v := range r.Verbs {
			if v == verb {
				return true
			}
		}
		return false
	}
	return has("list") && has("patch")
}

// rewrite writes an object back with an empty merge patch: kube-apiserver
// writes an unchanged object again only when it read it with a key that no
// longer encrypts (the value is stale), which is exactly what must be
// rewritten; an object already under the current key costs no write.
func (t *client) rewrite(ctx context.Context, r Resource, namespace, name string) error {
	ri := t.dyn.Resource(r.GroupVersionResource)
	var err error
	if r.Namespaced {
		_, err = ri.Namespace(namespace).Patch(ctx, name, types.MergePatchType, []byte("{}"), metav1.PatchOptions{FieldManager: "apiserver-operator-reencrypt"})
	} else {
		_, err = ri.Patch(ctx, name, types.MergePatchType, []byte("{}"), metav1.PatchOptions{FieldManager: "apiserver-operator-reencrypt"})
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Metrics implements API.
func (t *client) Metrics(ctx context.Context, podIP string, families ...string) ([]byte, error) {
	data, err := t.metrics(ctx, podIP, families...)
	return data, bounded(err)
}

// Resources implements API.
func (t *client) Resources(ctx context.Context) (map[schema.GroupResource]Resource, error) {
	out, err := t.resources(ctx)
	return out, bounded(err)
}

// Rewrite implements API: see rewrite.
func (t *client) Rewrite(ctx context.Context, r Resource, namespace, name string) error {
	return bounded(t.rewrite(ctx, r, namespace, name))
}

// maxErrorMessage bounds what an error of a tenant's API says: client-go
// quotes what the tenant answered (a whole document it could not decode),
// which the tenant chooses, and the message reaches status.
const maxErrorMessage = 1024

type boundedError struct{ err error }

func (e boundedError) Error() string {
	m := e.err.Error()
	if len(m) <= maxErrorMessage {
		return m
	}
	return strings.ToValidUTF8(m[:maxErrorMessage], "") + "… (cut)"
}

func (e boundedError) Unwrap() error { return e.err }

func bounded(err error) error {
	if err == nil {
		return nil
	}
	return boundedError{err}
}
