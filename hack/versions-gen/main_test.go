package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadVersions(t *testing.T) {
	for _, tc := range []struct {
		name, content, want, err string
	}{
		{"the project's list", "", "", ""},
		{"comments and blanks", "# a comment\n\nv1.36.4 2026-08-20T11:51:43Z\nv1.37.1\n", "v1.36.4 v1.37.1", ""},
		{"newest first", "v1.37.1\nv1.36.4\n", "", "does not come after"},
		{"two releases of a minor", "v1.37.0\nv1.37.1\n", "", "a second patch release of v1.37"},
		{"no v", "1.37.1\n", "", "is not a version"},
		{"empty", "# nothing\n", "", "lists no version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join("..", "..", "apiserver", "bundled", "versions")
			if tc.content != "" {
				path = filepath.Join(t.TempDir(), "versions")
				if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := readVersions(path)
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, %v; want an error saying %q", got, err, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case tc.want != "" && strings.Join(got, " ") != tc.want:
				t.Fatalf("got %v, want %s", got, tc.want)
			case len(got) == 0:
				t.Fatal("no version read")
			}
		})
	}
}

// TestUpdateMarkers: the API types' markers that name versions are found
// once each and rewritten from the list; a marker renamed is an error, not
// a stale CRD.
func TestUpdateMarkers(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "api", "v1alpha1", "apiserverconfig_types.go"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := updateMarkers(src, []string{"v1.37.1", "v1.38.0"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`// +kubebuilder:default="v1.38.0"`,
		`self.version in ['v1.37.1', 'v1.38.0']`,
		`is not a bundled version (v1.37.1, v1.38.0)`,
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("the rewritten types lack %s", want)
		}
	}
	if _, err := updateMarkers([]byte("package v1alpha1\n"), []string{"v1.37.1"}); err == nil {
		t.Error("types without the markers were accepted")
	}
}
