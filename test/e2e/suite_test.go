//go:build e2e

// Package e2e holds the end-to-end tests: they start a real one-node cluster
// (test/localcluster) and check that what runs in its pods really works.
// Run them with `make test-e2e`; they need root.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/apiserver-operator/apiserver-operator/test/localcluster"
)

// cluster is the local cluster shared by the tests of this package.
var cluster *localcluster.Cluster

// TestMain starts the local cluster (or reuses the running one, Up is
// idempotent), runs the tests and stops it unless LOCALCLUSTER_KEEP=1.
func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	// controller-runtime's client logs nothing the tests need.
	ctrllog.SetLogger(logr.Discard())
	dir := envOr("LOCALCLUSTER_DIR", localcluster.DefaultDir)
	binDir := envOr("LOCALCLUSTER_BIN_DIR", "../../bin")
	images, err := filepath.Glob(filepath.Join(imagesDir(), "*.tar"))
	if err != nil || len(images) == 0 {
		fmt.Fprintf(os.Stderr, "No image tarballs in %s: build them with `make localcluster-binaries`\n", imagesDir())
		return 1
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := localcluster.Up(ctx, localcluster.Options{
		Dir: dir, BinDir: binDir, Images: images,
		Logf: func(format string, args ...any) { fmt.Printf(format+"\n", args...) },
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "Starting the local cluster: %v\n", err)
		stopCluster(dir)
		return 1
	}
	fmt.Printf("Local cluster up in %s\n", time.Since(start).Round(100*time.Millisecond))
	cluster = c

	code := m.Run()

	if mem, err := c.MemoryUsage(); err == nil {
		fmt.Printf("Memory used by the cluster after the tests: %d MiB RSS, %d MiB with page cache\n", mem.RSS>>20, mem.Total>>20)
	}
	if os.Getenv("LOCALCLUSTER_KEEP") == "1" {
		fmt.Printf("Keeping the local cluster: KUBECONFIG=%s; stop it with make cluster-down\n", c.KubeconfigPath())
		return code
	}
	if !stopCluster(dir) {
		return 1
	}
	return code
}

func stopCluster(dir string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	if err := localcluster.Down(ctx, dir); err != nil {
		fmt.Fprintf(os.Stderr, "Stopping the local cluster: %v\n", err)
		return false
	}
	fmt.Printf("Local cluster down in %s\n", time.Since(start).Round(100*time.Millisecond))
	return true
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
