package image

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestWriteTarball(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "app")
	if err := os.WriteFile(bin, []byte("#!binary"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := Spec{
		Tag:        "localhost/test/app:dev",
		Files:      []File{{Source: bin, Path: "/usr/local/bin/app"}},
		Entrypoint: []string{"/usr/local/bin/app"},
		User:       "65532",
	}
	out := filepath.Join(dir, "images", "app.tar")
	if err := WriteTarball(spec, out); err != nil {
		t.Fatal(err)
	}

	tag, _ := name.NewTag(spec.Tag)
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatalf("Reading the image back: %v", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Config.User != "65532" || len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/usr/local/bin/app" {
		t.Errorf("image config = %+v, want linux, user 65532, entrypoint /usr/local/bin/app", cfg.Config)
	}

	files := map[string]*tar.Header{}
	tr := tar.NewReader(mutate.Extract(img))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[hdr.Name] = hdr
	}
	if hdr := files["usr/local/bin/app"]; hdr == nil || hdr.Mode&0o111 == 0 {
		t.Errorf("image lacks an executable usr/local/bin/app: %v", files)
	}
	if files["tmp"] == nil || files["usr/local"] == nil {
		t.Errorf("image lacks /tmp or the parents of its files: %v", files)
	}

	// The same inputs give the same image.
	first, _ := img.Digest()
	if err := WriteTarball(spec, out); err != nil {
		t.Fatal(err)
	}
	again, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatal(err)
	}
	if second, _ := again.Digest(); first != second {
		t.Errorf("rewriting the image changed its digest from %s to %s", first, second)
	}
}
