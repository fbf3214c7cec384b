package archives

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// s3Stub answers HEAD and GET of one object as S3 does; body writes the
// object's bytes (it may stall).
func s3Stub(t *testing.T, size int, body func(w http.ResponseWriter, stop <-chan struct{})) string {
	t.Helper()
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Length", strconv.Itoa(size))
		h.Set("ETag", `"0123456789abcdef"`)
		h.Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
		h.Set("Content-Type", "application/octet-stream")
		if r.Method == http.MethodHead {
			return
		}
		w.WriteHeader(http.StatusOK)
		body(w, stop)
	}))
	t.Cleanup(func() { close(stop); srv.Close() })
	return strings.TrimPrefix(srv.URL, "http://")
}

func open(t *testing.T, endpoint string, stall time.Duration) (io.ReadCloser, error) {
	t.Helper()
	store, err := S3(S3Options{Endpoint: endpoint, Bucket: "backups", Object: "ns/x.backup", Region: "us-east-1",
		AccessKeyID: "id", SecretAccessKey: "secret", Insecure: true, StallTimeout: stall})
	if err != nil {
		t.Fatal(err)
	}
	return store.Open(context.Background())
}

// An S3 endpoint that stops sending in the middle of an archive fails the
// read, saying so, instead of holding the reader (a reconcile worker)
// forever; one that sends slowly but steadily is read to the end.
func TestS3_AStalledEndpointFailsTheReadAndASlowOneDoesNot(t *testing.T) {
	stalled := s3Stub(t, 1000, func(w http.ResponseWriter, stop <-chan struct{}) {
		_, _ = w.Write(make([]byte, 100))
		w.(http.Flusher).Flush()
		<-stop
	})
	r, err := open(t, stalled, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(r); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "sent or took nothing for 300ms") {
			t.Fatalf("reading from a stalled endpoint: %v, want the stall named", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the read of a stalled endpoint never ended")
	}
	_ = r.Close()

	slow := s3Stub(t, 40, func(w http.ResponseWriter, stop <-chan struct{}) {
		for range 40 {
			_, _ = w.Write([]byte{'x'})
			w.(http.Flusher).Flush()
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	r, err = open(t, slow, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	if got, err := io.ReadAll(r); err != nil || len(got) != 40 {
		t.Fatalf("reading a slow but live endpoint: %d bytes, %v", len(got), err)
	}
}

// An endpoint that never answers fails the open within the stall timeout
// (and minio's few retries), naming it.
func TestS3_AnEndpointThatNeverAnswersFailsTheOpen(t *testing.T) {
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-stop }))
	t.Cleanup(func() { close(stop); srv.Close() })
	done := make(chan error, 1)
	go func() {
		_, err := open(t, strings.TrimPrefix(srv.URL, "http://"), 200*time.Millisecond)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "sent or took nothing") {
			t.Fatalf("opening an archive on an endpoint that never answers: %v, want the stall named", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the open never ended")
	}
}

// A failure to reach the S3 service reads the same in status whether the
// address refused, did not exist or spoke no TLS: the network's detail
// stays in the error's Detail, for the operator's log.
func TestS3_StatusDoesNotMapTheNetwork(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := lis.Addr().String()
	_ = lis.Close()
	plain := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(plain.Close)
	messages := map[string]string{}
	for name, endpoint := range map[string]string{"refused": refused, "plain http spoken to tls": strings.TrimPrefix(plain.URL, "http://")} {
		store, err := S3(S3Options{Endpoint: endpoint, Bucket: "backups", Object: "ns/x.backup", Region: "us-east-1",
			AccessKeyID: "id", SecretAccessKey: "secret", StallTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		_, err = store.Open(context.Background())
		var se *StoreError
		if !errors.As(err, &se) || se.Detail == nil {
			t.Fatalf("%s: %v, want a StoreError with its detail", name, err)
		}
		messages[name] = strings.ReplaceAll(err.Error(), endpoint, "<endpoint>")
		if strings.Contains(err.Error(), "refused") || strings.Contains(err.Error(), "tls") || strings.Contains(err.Error(), "dial") {
			t.Errorf("%s: status would say %q", name, err)
		}
	}
	if messages["refused"] != messages["plain http spoken to tls"] {
		t.Errorf("the two failures read differently: %q and %q", messages["refused"], messages["plain http spoken to tls"])
	}
}
