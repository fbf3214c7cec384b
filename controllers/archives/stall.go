package archives

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// DefaultStallTimeout is how long an S3 service may send or take nothing
// before the request is given up: a stalled endpoint costs a backup or a
// restore that long, not forever.
const DefaultStallTimeout = 30 * time.Second

// errStalled is the cause of a request given up for a stall.
var errStalled = errors.New("stalled")

// stallGuard gives up a request when no byte moves for after: none of
// its body taken (an upload the service does not read), no answer, none of
// the answer's body read. Progress restarts the wait, so that a large
// archive on a slow but live link goes through.
type stallGuard struct {
	next  http.RoundTripper
	after time.Duration
	host  string
}

func (g stallGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(g.after, func() { cancel(errStalled) })
	out := req.WithContext(ctx)
	if req.Body != nil && req.Body != http.NoBody {
		out.Body = &progress{ReadCloser: req.Body, timer: timer, after: g.after}
	}
	resp, err := g.next.RoundTrip(out)
	if err != nil {
		timer.Stop()
		stalled := errors.Is(context.Cause(ctx), errStalled)
		cancel(nil)
		if stalled {
			return nil, g.stalled()
		}
		return nil, err
	}
	timer.Reset(g.after)
	resp.Body = &progress{ReadCloser: resp.Body, timer: timer, after: g.after, ctx: ctx, guard: g,
		done: func() { timer.Stop(); cancel(nil) }}
	return resp, nil
}

// stallError: a request moved no byte for the stall timeout.
type stallError struct {
	host  string
	after time.Duration
}

func (e *stallError) Error() string {
	return fmt.Sprintf("the S3 service at %s sent or took nothing for %s", e.host, e.after)
}

func (g stallGuard) stalled() error { return &stallError{host: g.host, after: g.after} }

// progress restarts the stall timer on each read that moved bytes.
type progress struct {
	io.ReadCloser
	timer *time.Timer
	after time.Duration
	// ctx, guard and done: of a response body only.
	ctx   context.Context
	guard stallGuard
	done  func()
	once  sync.Once
}

func (p *progress) Read(b []byte) (int, error) {
	n, err := p.ReadCloser.Read(b)
	if n > 0 {
		p.timer.Reset(p.after)
	}
	if err != nil && !errors.Is(err, io.EOF) && p.ctx != nil && errors.Is(context.Cause(p.ctx), errStalled) {
		err = p.guard.stalled()
	}
	return n, err
}

func (p *progress) Close() error {
	err := p.ReadCloser.Close()
	if p.done != nil {
		p.once.Do(p.done)
	}
	return err
}
