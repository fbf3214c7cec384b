package etcddialer

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersionFollowsTheCode fails when the dialer's code changed but its
// image tag did not: the same tag would then name two images.
func TestVersionFollowsTheCode(t *testing.T) {
	h := sha256.New()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || path == "version.go" {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// Writes to a hash.Hash never fail.
		_, _ = fmt.Fprintf(h, "%s %d\n", filepath.ToSlash(path), len(data))
		_, _ = h.Write(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != CodeHash {
		t.Errorf("the etcd dialer's code changed since its image was tagged %s: bump Version in version.go and set CodeHash = %q", Version, got)
	}
}
