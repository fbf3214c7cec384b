package image

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Push uploads the image of a tarball written by WriteTarball to ref (such
// as registry.example.com/apiserver-operator/manager:v0.1.0), with the
// credentials of the Docker config file when the registry asks for them,
// and returns its digest. insecure allows a plain-HTTP registry.
func Push(ctx context.Context, tarballPath, ref string, insecure bool) (v1.Hash, error) {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	tag, err := name.NewTag(ref, opts...)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("parsing image reference %q: %w", ref, err)
	}
	img, err := tarball.ImageFromPath(tarballPath, nil)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("reading image tarball %s (build it with make images): %w", tarballPath, err)
	}
	if err := remote.Write(tag, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return v1.Hash{}, fmt.Errorf("pushing %s to %s: %w", tarballPath, ref, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("computing the digest of %s: %w", tarballPath, err)
	}
	return digest, nil
}
