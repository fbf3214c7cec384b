package image

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestPush pushes an image to a registry served on loopback by this test and
// pulls it back by tag.
func TestPush(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	dir := t.TempDir()
	bin := filepath.Join(dir, "hello")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(dir, "hello.tar")
	if err := WriteTarball(Spec{Tag: "localhost/test/hello:v1", Files: []File{{Source: bin, Path: "/hello"}}, Entrypoint: []string{"/hello"}}, tarPath); err != nil {
		t.Fatal(err)
	}
	ref := strings.TrimPrefix(srv.URL, "http://") + "/apiserver-operator/hello:v1"
	digest, err := Push(context.Background(), tarPath, ref, true)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Image(parsed)
	if err != nil {
		t.Fatalf("pulling %s back: %v", ref, err)
	}
	got, err := pulled.Digest()
	if err != nil || got != digest {
		t.Fatalf("the registry serves %v (%v), want the pushed %v", got, err, digest)
	}
	if _, err := Push(context.Background(), filepath.Join(dir, "missing.tar"), ref, true); err == nil || !strings.Contains(err.Error(), "make images") {
		t.Fatalf("pushing a missing tarball: %v", err)
	}
}
