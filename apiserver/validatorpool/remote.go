package validatorpool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The validators can run apart from the webhook that asks them: in a
// container of their own, under a user of their own and without the pod's
// service account token (config/webhook). They run kube-apiserver's
// start-up code on values from any user's spec; a flaw there then reaches
// neither the management cluster's credentials nor the webhook's serving
// key. Serve answers for a Pool on a Unix socket that the two containers
// share, and Remote asks it.

// Limits on what crosses the socket: a request holds the pod's files
// (certificates, configuration files: tens of KiB), a result the
// validator's messages (its stderr tail is capped at 64 KiB).
const (
	maxRequestBytes = 16 << 20
	maxResultBytes  = 1 << 20
)

// queueHeader carries Request.Queue, which the JSON form leaves out.
const queueHeader = "X-Validator-Queue"

// Handler answers GET /versions with the versions of pool, and POST
// /validate?version=<v> with pool's judgement of the JSON Request in the
// body: 404 for a version without a validator, 500 with the error when no
// judgement was made.
func Handler(pool *Pool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /versions", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(pool.Versions())
	})
	mux.HandleFunc("POST /validate", func(w http.ResponseWriter, r *http.Request) {
		var req Request
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBytes)).Decode(&req); err != nil {
			http.Error(w, fmt.Sprintf("reading the request: %v", err), http.StatusBadRequest)
			return
		}
		req.Queue = r.Header.Get(queueHeader)
		res, err := pool.Validate(r.Context(), r.URL.Query().Get("version"), req)
		switch {
		case errors.Is(err, ErrNoValidator):
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	})
	return mux
}

// Serve answers for pool on the Unix socket at path until ctx ends. The
// socket is made writable by every user of the container's directory, so
// that the webhook's user, another than the validators', can connect:
// the directory is one only the two containers mount.
func Serve(ctx context.Context, path string, pool *Pool) error {
	_ = os.Remove(path) // a socket a killed process left
	l, err := (&net.ListenConfig{}).Listen(ctx, "unix", path)
	if err != nil {
		return fmt.Errorf("listening on the validators' socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o666); err != nil { //nolint:gosec // G302: see above
		_ = l.Close()
		return fmt.Errorf("opening the validators' socket %s to the webhook's user: %w", path, err)
	}
	srv := &http.Server{Handler: Handler(pool), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), Timeout)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	err = srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil
	}
	return fmt.Errorf("serving the validators on %s: %w", path, err)
}

// Remote is a Validator that asks validators served (Serve) on a Unix
// socket.
type Remote struct {
	socket string
	client *http.Client

	mu       sync.Mutex
	versions []string
	known    bool
	// answered is when the validators last answered Ready.
	answered time.Time
	// asking: Has is asking for the versions in the background.
	asking atomic.Bool
}

var _ Validator = (*Remote)(nil)

// NewRemote asks the validators served on the Unix socket at path.
func NewRemote(path string) *Remote {
	dialer := &net.Dialer{Timeout: 2 * time.Second}
	return &Remote{socket: path, client: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", path)
		},
		MaxIdleConnsPerHost: MaxConcurrency * 4,
	}}}
}

// Versions asks which versions the validators have, and remembers the
// answer for Has.
func (r *Remote) Versions(ctx context.Context) ([]string, error) {
	var versions []string
	if err := r.call(ctx, http.MethodGet, "/versions", nil, "", &versions); err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.versions, r.known = versions, true
	r.mu.Unlock()
	return versions, nil
}

// Ready says whether the validators answer, for the webhook's readiness:
// a failure counts only once they have not answered for readyGrace, so
// that one slow answer under a burst does not take every replica out of
// the webhook Service at once.
func (r *Remote) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := r.Versions(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if err == nil {
		r.answered = now
		return nil
	}
	if !r.answered.IsZero() && now.Sub(r.answered) < readyGrace {
		return nil
	}
	return err
}

// readyGrace is how long the validators may fail to answer before the
// webhook is no longer ready.
const readyGrace = 5 * time.Second

// Has reports whether the validators have version, as they last said.
// Until they have answered, it reports true and asks in the background,
// so that Validate's error, not a missing binary, tells why nothing is
// judged, and no caller waits here.
func (r *Remote) Has(version string) bool {
	r.mu.Lock()
	versions, known := r.versions, r.known
	r.mu.Unlock()
	if !known {
		if !r.asking.CompareAndSwap(false, true) {
			return true
		}
		go func() {
			defer r.asking.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, _ = r.Versions(ctx)
		}()
		return true
	}
	return slices.Contains(versions, version)
}

// Validate has the validators judge req with version's code.
func (r *Remote) Validate(ctx context.Context, version string, req Request) (*Result, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encoding the request for the validators: %w", err)
	}
	var res Result
	if err := r.call(ctx, http.MethodPost, "/validate?version="+url.QueryEscape(version), body, req.Queue, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// remoteError is the validators' own error, as they sent it.
type remoteError struct {
	status  int
	message string
}

func (e *remoteError) Error() string { return e.message }

func (e *remoteError) Is(target error) bool {
	return target == ErrNoValidator && e.status == http.StatusNotFound
}

func (r *Remote) call(ctx context.Context, method, path string, body []byte, queue string, out any) error {
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://validators"+path, reader)
	if err != nil {
		return err
	}
	if queue != "" {
		req.Header.Set(queueHeader, queue)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return fmt.Errorf("asking the validators on %s (their container in the webhook's pod): %w", r.socket, err)
	}
	defer func() { _ = resp.Body.Close() }()
	limited := io.LimitReader(resp.Body, maxResultBytes+1)
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(limited, 64<<10))
		return &remoteError{status: resp.StatusCode, message: strings.TrimSpace(string(msg))}
	}
	data, err := io.ReadAll(limited)
	if err != nil {
		return fmt.Errorf("reading the validators' answer: %w", err)
	}
	if len(data) > maxResultBytes {
		return fmt.Errorf("the validators' answer is over %d bytes: refused", maxResultBytes)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("reading the validators' answer: %w", err)
	}
	return nil
}
