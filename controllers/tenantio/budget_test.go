package tenantio

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingWriter counts what is written to it.
type countingWriter struct{ n atomic.Int64 }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	return len(p), nil
}

// What the operator reads from every tenant at once is bounded: while one
// tenant's answer holds most of the budget, another's waits for room (and
// gives up at its deadline, saying why), and is read once the first is
// done.
func TestReadBudget_AnswersWaitForRoom(t *testing.T) {
	if err := SetReadBudget(MaxAPIResponseBytes); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = SetReadBudget(DefaultReadBudgetBytes) })
	if err := SetReadBudget(MaxAPIResponseBytes - 1); err == nil {
		t.Error("a budget smaller than one answer was taken")
	}

	chunk := []byte(strings.Repeat("x", 1<<20))
	release := make(chan struct{})
	// A tenant that sends 30 MiB, then holds its answer open.
	holding := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for range 30 {
			_, _ = w.Write(chunk)
		}
		w.(http.Flusher).Flush()
		<-release
	}))
	t.Cleanup(holding.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	// A tenant that sends 10 MiB at once.
	quick := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for range 10 {
			_, _ = w.Write(chunk)
		}
	}))
	t.Cleanup(quick.Close)
	c := &http.Client{Transport: capResponses(MaxAPIResponseBytes, nil, true)(&http.Transport{DisableKeepAlives: true})}

	read := &countingWriter{}
	held := make(chan error, 1)
	go func() {
		resp, err := c.Get(holding.URL)
		if err != nil {
			held <- err
			return
		}
		_, err = io.Copy(read, resp.Body)
		_ = resp.Body.Close()
		held <- err
	}()
	for i := 0; read.n.Load() < 30<<20; i++ {
		if i == 1000 {
			t.Fatalf("read %d bytes of the holding tenant's answer, want 30 MiB", read.n.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}

	get := func(timeout time.Duration) (int64, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, quick.URL, http.NoBody)
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		defer func() { _ = resp.Body.Close() }()
		return io.Copy(io.Discard, resp.Body)
	}
	if _, err := get(2 * time.Second); err == nil || !strings.Contains(err.Error(), "waiting for room in the operator's budget for what it reads from tenants at once (32 MiB, --tenant-read-budget)") {
		t.Fatalf("the second tenant's answer while the first holds 30 of 32 MiB: %v, want a wait for room that gives up at its deadline", err)
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("the holding tenant's answer: %v", err)
	}
	if n, err := get(10 * time.Second); err != nil || n != 10<<20 {
		t.Fatalf("the second tenant's answer once the first is done: %d bytes, %v; want 10 MiB", n, err)
	}
}
