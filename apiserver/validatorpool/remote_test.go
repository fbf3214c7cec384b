package validatorpool

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The webhook's container asks the validators' container over a Unix
// socket: the answer it gets is the validator's own, files and queue
// included, and what goes wrong on the way is an error, never an
// acceptance.
func TestRemote_AsksTheValidatorsOverTheSocket(t *testing.T) {
	dir := t.TempDir()
	// The validator refuses with the content of the file it was sent, so
	// the answer proves the request crossed whole.
	fakeValidator(t, dir, `sed -n 's/.*"\/etc\/x":"\([^"]*\)".*/{"version":"v1.37.1","problems":[{"message":"\1"}]}/p'`)
	pool := NewPool(dir)
	defer pool.Close()
	socket := filepath.Join(t.TempDir(), "validators.sock")
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, socket, pool) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	remote := NewRemote(socket)
	waitFor(t, func() bool { return remote.Ready(context.Background()) == nil })

	info, err := os.Stat(socket)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o666 {
		t.Errorf("the socket's mode is %v: the webhook's user, another than the validators', could not connect", info.Mode().Perm())
	}
	if !remote.Has("v1.37.1") || remote.Has("v1.36.4") {
		t.Errorf("Has: v1.37.1 %v, v1.36.4 %v; want true, false", remote.Has("v1.37.1"), remote.Has("v1.36.4"))
	}
	res, err := remote.Validate(context.Background(), "v1.37.1", Request{Args: []string{"--x=1"}, Files: map[string][]byte{"/etc/x": []byte("hello")}, Queue: "tenant-a"})
	if err != nil {
		t.Fatal(err)
	}
	// Files travel base64-encoded: "hello" is aGVsbG8=.
	if len(res.Problems) != 1 || res.Problems[0].Message != "aGVsbG8=" {
		t.Errorf("the validator's answer did not come back whole: %+v", res)
	}
	if _, err := remote.Validate(context.Background(), "v1.36.4", Request{}); !errors.Is(err, ErrNoValidator) {
		t.Errorf("a version without a validator gave %v, want ErrNoValidator", err)
	}
}

func TestRemote_NoValidatorsIsAnError(t *testing.T) {
	remote := NewRemote(filepath.Join(t.TempDir(), "nobody.sock"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := remote.Ready(ctx); err == nil {
		t.Fatal("Ready with no validators serving")
	}
	// Has does not pretend the binary is missing: Validate says why.
	if !remote.Has("v1.37.1") {
		t.Error("Has is false while the validators do not answer: admission would blame a missing validator")
	}
	res, err := remote.Validate(ctx, "v1.37.1", Request{})
	if err == nil {
		t.Fatalf("no error, result %+v", res)
	}
	if !strings.Contains(err.Error(), "nobody.sock") {
		t.Errorf("the error does not name the socket: %v", err)
	}
}
