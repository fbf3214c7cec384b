package tenantio

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// hostileAPIServer serves /metrics as handler writes it, over TLS, and
// returns how to reach it as an apiserver pod.
func hostileAPIServer(t *testing.T, handler http.HandlerFunc) (API, string) {
	t.Helper()
	srv := httptest.NewTLSServer(handler)
	t.Cleanup(srv.Close)
	host, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.ParseInt(port, 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["tenant"] = &clientcmdapi.Cluster{Server: srv.URL,
		CertificateAuthorityData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: "t"}
	cfg.Contexts["tenant"] = &clientcmdapi.Context{Cluster: "tenant", AuthInfo: "admin"}
	cfg.CurrentContext = "tenant"
	kubeconfig, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	api, err := Connect(kubeconfig, host, int32(p), "example.com", int32(p))
	if err != nil {
		t.Fatal(err)
	}
	return api, host
}

// writeLines writes n lines of an unwanted family, streamed (the server
// never holds them).
func writeLines(w io.Writer, n int) {
	line := []byte(`some_other_metric{label="` + strings.Repeat("x", 100) + `"} 1` + "\n")
	for range n {
		if _, err := w.Write(line); err != nil {
			return
		}
	}
}

func TestAPI_MetricsKeepsOnlyTheFamiliesAskedFor(t *testing.T) {
	api, ip := hostileAPIServer(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintln(w, "# HELP wanted_total Requests.\n# TYPE wanted_total counter")
		writeLines(w, 500_000) // 60 MiB of other families
		_, _ = fmt.Fprintln(w, `wanted_total{code="200"} 3`)
		_, _ = fmt.Fprintln(w, `wanted_totally_else 9`)
		_, _ = fmt.Fprintln(w, "# TYPE wanted_seconds histogram\nwanted_seconds_bucket{le=\"1\"} 2\nwanted_seconds_sum 0.5\nwanted_seconds_count 2")
	})
	data, err := api.Metrics(context.Background(), ip, "wanted_total", "wanted_seconds")
	if err != nil {
		t.Fatal(err)
	}
	want := "# HELP wanted_total Requests.\n# TYPE wanted_total counter\nwanted_total{code=\"200\"} 3\n" +
		"# TYPE wanted_seconds histogram\nwanted_seconds_bucket{le=\"1\"} 2\nwanted_seconds_sum 0.5\nwanted_seconds_count 2\n"
	if string(data) != want {
		t.Fatalf("kept %d bytes:\n%.400s\nwant:\n%s", len(data), data, want)
	}
}

func TestAPI_AnswersLargerThanTheOperatorReadsAreRefused(t *testing.T) {
	// An apiserver pod whose /metrics never ends (300 MiB here), and one
	// that sends 20 MiB of the family asked for.
	endless, ip := hostileAPIServer(t, func(w http.ResponseWriter, _ *http.Request) {
		writeLines(w, 300<<20/120)
	})
	before := heapInUse()
	_, err := endless.Metrics(context.Background(), ip, "wanted_total")
	if err == nil || !strings.Contains(err.Error(), "longer than the 256 MiB") {
		t.Fatalf("want the endless /metrics refused, got %v", err)
	}
	if grown := int64(heapInUse()) - int64(before); grown > 20<<20 {
		t.Errorf("the heap grew by %d MiB reading /metrics", grown>>20)
	}
	flood, ip := hostileAPIServer(t, func(w http.ResponseWriter, _ *http.Request) {
		line := []byte(`wanted_total{x="` + strings.Repeat("y", 100) + `"} 1` + "\n")
		for range 20 << 20 / len(line) {
			if _, err := w.Write(line); err != nil {
				return
			}
		}
	})
	if _, err := flood.Metrics(context.Background(), ip, "wanted_total"); err == nil || !strings.Contains(err.Error(), "longer than 16 MiB") {
		t.Fatalf("want 20 MiB of the family refused, got %v", err)
	}
	// Discovery too: one answer of 40 MiB.
	big, _ := hostileAPIServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprint(w, `{"kind":"APIVersions","versions":["v1"],"padding":"`)
		_, _ = w.Write([]byte(strings.Repeat("z", 40<<20)))
		_, _ = fmt.Fprint(w, `"}`)
	})
	if _, err := big.Resources(context.Background()); err == nil || !strings.Contains(err.Error(), "8 MiB the operator reads") {
		t.Fatalf("want a 40 MiB discovery answer refused, got %v", err)
	}
}

// peakHeapGrowth runs fn and returns by how much the heap in use grew at
// its highest, sampled every 2 ms.
func peakHeapGrowth(fn func()) uint64 {
	before := heapInUse()
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	fn()
	close(stop)
	<-sampled
	if peak.Load() < before {
		return 0
	}
	return peak.Load() - before
}

// A tenant whose discovery has many groups, each document under the cap,
// and one whose /metrics answers an error with a long body: what the
// operator holds at its highest stays bounded.
func TestAPI_ManyAnswersAndErrorBodiesAreBoundedToo(t *testing.T) {
	pad := strings.Repeat("z", 64<<10)
	groups, ip := hostileAPIServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/api":
			_, _ = fmt.Fprint(w, `{"kind":"APIVersions","versions":["v1"]}`)
		case r.URL.Path == "/api/v1":
			_, _ = fmt.Fprint(w, `{"kind":"APIResourceList","groupVersion":"v1","resources":[]}`)
		case r.URL.Path == "/apis":
			var gs []string
			for i := range 20 {
				gs = append(gs, fmt.Sprintf(`{"name":"g%d.example.com","versions":[{"groupVersion":"g%d.example.com/v1","version":"v1"}],"preferredVersion":{"groupVersion":"g%d.example.com/v1","version":"v1"}}`, i, i, i))
			}
			_, _ = fmt.Fprintf(w, `{"kind":"APIGroupList","groups":[%s]}`, strings.Join(gs, ","))
		case strings.HasPrefix(r.URL.Path, "/apis/"):
			// 6 MiB each, under the 8 MiB of one document: 120 MiB in all.
			_, _ = fmt.Fprint(w, `{"kind":"APIResourceList","resources":[],"padding":"`)
			for range 6 << 20 / len(pad) {
				if _, err := fmt.Fprint(w, pad); err != nil {
					return
				}
			}
			_, _ = fmt.Fprint(w, `"}`)
		default:
			http.NotFound(w, r)
		}
	})
	var err error
	grown := peakHeapGrowth(func() { _, err = groups.Resources(context.Background()) })
	if err == nil || !strings.Contains(err.Error(), "longer than the operator reads from it at once") {
		t.Fatalf("want 120 MiB of discovery refused, got %v", err)
	}
	if grown > 96<<20 {
		t.Errorf("reading 20 discovery documents of 6 MiB, the heap grew by %d MiB at its highest", grown>>20)
	}

	// What the tenant answers reaches status through the errors: cut.
	garbled, _ := hostileAPIServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api":
			_, _ = fmt.Fprint(w, `{"kind":"APIVersions","versions":["v1"]}`)
		case "/api/v1":
			_, _ = fmt.Fprint(w, `{"kind":"APIResourceList","groupVersion":"v1","resources":[]}`)
		case "/apis":
			_, _ = fmt.Fprint(w, `{"kind":"APIGroupList","groups":[]}`)
		default: // the CRD list: no apiVersion, a long body the decoder quotes
			_, _ = fmt.Fprint(w, `{"kind":"List","padding":"`+strings.Repeat("q", 1<<20)+`"}`)
		}
	})
	if _, err := garbled.Resources(context.Background()); err == nil || len(err.Error()) > 1100 {
		t.Fatalf("an answer that does not decode: want an error of at most about 1 KiB, got %d bytes", len(fmt.Sprint(err)))
	}

	failing, _ := hostileAPIServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		writeLines(w, 200<<20/120)
	})
	grown = peakHeapGrowth(func() { _, err = failing.Metrics(context.Background(), ip, "wanted_total") })
	if err == nil {
		t.Fatal("an error answer was taken")
	}
	if grown > 32<<20 {
		t.Errorf("reading an error answer of 200 MiB, the heap grew by %d MiB at its highest", grown>>20)
	}
}
