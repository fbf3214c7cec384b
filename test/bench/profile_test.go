package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/apiserver-operator/apiserver-operator/test/envtest"
)

// profiles records CPU profiles of the operator and of kube-apiserver over
// a measured window when BENCH_PROFILE_DIR is set, to find where the time
// goes (`go tool pprof bin/kube-apiserver DIR/NAME-apiserver.pprof`).
type profiles struct {
	wg   sync.WaitGroup
	errs chan error
}

func startProfiles(b testing.TB, name string, env *envtest.Environment, op *operator, window time.Duration) *profiles {
	b.Helper()
	p := &profiles{errs: make(chan error, 2)}
	dir := os.Getenv("BENCH_PROFILE_DIR")
	if dir == "" {
		return p
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	seconds := strconv.Itoa(max(1, int(window.Seconds())))
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	save := func(file string, fetch func(context.Context) ([]byte, error)) {
		p.wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), window+time.Minute)
			defer cancel()
			data, err := fetch(ctx)
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, file), data, 0o644)
			}
			if err != nil {
				p.errs <- fmt.Errorf("profiling for %s: %w", file, err)
			}
		})
	}
	save(name+"-apiserver.pprof", func(ctx context.Context) ([]byte, error) {
		return cs.RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", seconds).DoRaw(ctx)
	})
	save(name+"-operator.pprof", func(ctx context.Context) ([]byte, error) {
		return httpGet(ctx, op.pprofURL+"/profile?seconds="+seconds)
	})
	return p
}

// saveHeap records the operator's heap profile, when BENCH_PROFILE_DIR is
// set: what its peak RSS is made of.
func saveHeap(b testing.TB, name string, op *operator) {
	b.Helper()
	dir := os.Getenv("BENCH_PROFILE_DIR")
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	data, err := httpGet(ctx, op.pprofURL+"/heap")
	if err != nil {
		b.Fatalf("profiling the operator's heap: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+"-operator-heap.pprof"), data, 0o644); err != nil {
		b.Fatal(err)
	}
}

// httpGet returns the body of a 200 answer to GET url.
func httpGet(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// wait waits for the profiles and reports a failure to record one.
func (p *profiles) wait(b testing.TB) {
	b.Helper()
	p.wg.Wait()
	close(p.errs)
	for err := range p.errs {
		b.Error(err)
	}
}
