// Package image writes single-layer container images of static binaries as
// tarballs that `ctr images import` (and `docker load`) accept, without a
// Docker engine or a registry. The local test cluster imports its pause and
// kube-apiserver images this way; the operator's image can be written the same.
package image

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is a file of the host copied into the image.
type File struct {
	// Source is the path of the file on the host.
	Source string
	// Path is the absolute path of the file in the image.
	Path string
}

// Spec describes an image of static binaries.
type Spec struct {
	// Tag names the image, such as localhost/example/pause:local.
	Tag string
	// Files are copied into the image, executable by everyone.
	Files []File
	// Entrypoint and Cmd are the image's defaults.
	Entrypoint []string
	Cmd        []string
	// Env is added to PATH=/usr/local/bin:/usr/bin:/bin.
	Env []string
	// User runs the entrypoint, such as "65532"; empty is root.
	User string
}

// epoch is the time of every file and of the image, so that the same inputs
// give the same image digest.
var epoch = time.Unix(0, 0).UTC()

// WriteTarball writes the image of spec to output, replacing it atomically.
func WriteTarball(spec Spec, output string) error {
	tag, err := name.NewTag(spec.Tag)
	if err != nil {
		return fmt.Errorf("parsing image tag %q: %w", spec.Tag, err)
	}
	if len(spec.Files) == 0 {
		return fmt.Errorf("writing image %s: no files given: pass at least one file", spec.Tag)
	}
	img, err := build(spec)
	if err != nil {
		return fmt.Errorf("building image %s: %w", spec.Tag, err)
	}
	if err := os.MkdirAll(filepath.Dir(output), 0o755); err != nil {
		return fmt.Errorf("creating the directory of %s: %w", output, err)
	}
	tmp := output + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		_ = os.Remove(tmp) // best effort: the error that matters is the write's
		return fmt.Errorf("writing image %s to %s: %w", spec.Tag, tmp, err)
	}
	if err := os.Rename(tmp, output); err != nil {
		return fmt.Errorf("moving image %s into place at %s: %w", spec.Tag, output, err)
	}
	return nil
}

func build(spec Spec) (v1.Image, error) {
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return layerTar(spec.Files)
	}, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return nil, fmt.Errorf("creating the layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, fmt.Errorf("adding the layer: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading the image config: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS = "linux"
	cfg.Architecture = runtime.GOARCH
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config.Entrypoint = spec.Entrypoint
	cfg.Config.Cmd = spec.Cmd
	cfg.Config.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, spec.Env...)
	cfg.Config.User = spec.User
	cfg.Config.WorkingDir = "/"
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("setting the image config: %w", err)
	}
	return img, nil
}

// layerTar streams an uncompressed tar of files, with their parent
// directories and a world-writable /tmp.
func layerTar(files []File) (io.ReadCloser, error) {
	dirs := map[string]bool{"tmp": true}
	for _, f := range files {
		if !path.IsAbs(f.Path) || strings.HasSuffix(f.Path, "/") {
			return nil, fmt.Errorf("image path %q of %s: must be the absolute path of a file", f.Path, f.Source)
		}
		for d := path.Dir(strings.TrimPrefix(f.Path, "/")); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	sortedDirs := make([]string, 0, len(dirs))
	for d := range dirs {
		sortedDirs = append(sortedDirs, d)
	}
	sort.Strings(sortedDirs)

	r, w := io.Pipe()
	go func() {
		w.CloseWithError(writeLayer(w, sortedDirs, files))
	}()
	return r, nil
}

func writeLayer(w io.Writer, dirs []string, files []File) error {
	tw := tar.NewWriter(w)
	for _, d := range dirs {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		hdr := &tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode, ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("writing directory %s: %w", d, err)
		}
	}
	for _, f := range files {
		if err := addFile(tw, f); err != nil {
			return err
		}
	}
	return tw.Close()
}

func addFile(tw *tar.Writer, f File) error {
	src, err := os.Open(f.Source)
	if err != nil {
		return fmt.Errorf("opening %s for the image: %w", f.Source, err)
	}
	defer func() { _ = src.Close() }()
	info, err := src.Stat()
	if err != nil {
		return fmt.Errorf("reading %s: %w", f.Source, err)
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("adding %s to the image: not a regular file", f.Source)
	}
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     strings.TrimPrefix(f.Path, "/"),
		Mode:     0o755,
		Size:     info.Size(),
		ModTime:  epoch,
		Format:   tar.FormatPAX,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("writing the header of %s: %w", f.Path, err)
	}
	if _, err := io.Copy(tw, src); err != nil {
		return fmt.Errorf("copying %s into the image: %w", f.Source, err)
	}
	return nil
}
