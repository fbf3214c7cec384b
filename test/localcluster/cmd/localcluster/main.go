// Command localcluster starts and stops the local one-node test cluster of
// package test/localcluster, and writes container images of static binaries.
//
//	localcluster up --dir DIR --bin-dir bin --images-dir bin/images
//	localcluster down --dir DIR
//	localcluster image --tag TAG --file SRC:/PATH... --entrypoint /PATH --output FILE
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/apiserver-operator/apiserver-operator/test/localcluster"
	"github.com/apiserver-operator/apiserver-operator/test/localcluster/image"
)

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("missing command: up, down or image")
	}
	switch args[0] {
	case "up":
		return up(ctx, args[1:])
	case "down":
		return down(ctx, args[1:])
	case "image":
		return writeImage(args[1:])
	default:
		return fmt.Errorf("unknown command %q: use up, down or image", args[0])
	}
}

func up(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	dir := fs.String("dir", localcluster.DefaultDir, "directory of the cluster's state")
	binDir := fs.String("bin-dir", "bin", "directory of the cluster's binaries")
	imagesDir := fs.String("images-dir", "bin/images", "directory of image tarballs (*.tar) to import")
	if err := fs.Parse(args); err != nil {
		return err
	}
	images, err := filepath.Glob(filepath.Join(*imagesDir, "*.tar"))
	if err != nil {
		return fmt.Errorf("listing images in %s: %w", *imagesDir, err)
	}
	c, err := localcluster.Up(ctx, localcluster.Options{
		Dir: *dir, BinDir: *binDir, Images: images,
		Logf: func(format string, args ...any) { fmt.Printf(format+"\n", args...) },
	})
	if err != nil {
		return fmt.Errorf("%w\nThe cluster may be partly up: read the logs in %s/logs, then run `make cluster-down`", err, *dir)
	}
	te := c.TenantEtcd()
	fmt.Printf("\nexport KUBECONFIG=%s\n", c.KubeconfigPath())
	fmt.Printf("Node address: %s (reach NodePorts there). Tenant etcd: %s and %s, client Secret %s/%s\n",
		c.NodeIP(), te.MainURL, te.EventsURL, te.SecretNamespace, te.SecretName)
	if m, err := c.MemoryUsage(); err == nil {
		fmt.Printf("Memory used by the cluster: %d MiB RSS, %d MiB with page cache\n", m.RSS>>20, m.Total>>20)
	}
	fmt.Println("Stop it with: make cluster-down")
	return nil
}

func down(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("down", flag.ContinueOnError)
	dir := fs.String("dir", localcluster.DefaultDir, "directory of the cluster's state")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := localcluster.Down(ctx, *dir); err != nil {
		return err
	}
	fmt.Println("Local cluster stopped and removed")
	return nil
}

// fileFlags collects repeated --file SRC:/PATH flags.
type fileFlags []image.File

func (f *fileFlags) String() string { return fmt.Sprint(*f) }

func (f *fileFlags) Set(v string) error {
	src, dst, ok := strings.Cut(v, ":")
	if !ok || src == "" || dst == "" {
		return fmt.Errorf("--file %q: want SOURCE:/PATH/IN/IMAGE", v)
	}
	*f = append(*f, image.File{Source: src, Path: dst})
	return nil
}

func writeImage(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	var files fileFlags
	tag := fs.String("tag", "", "image tag, such as localhost/example/app:dev")
	entrypoint := fs.String("entrypoint", "", "path of the entrypoint in the image")
	user := fs.String("user", "", "user that runs the entrypoint, such as 65532")
	output := fs.String("output", "", "tarball to write")
	fs.Var(&files, "file", "SOURCE:/PATH, a host file copied into the image (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tag == "" || *output == "" {
		return errors.New("image: --tag and --output are required")
	}
	spec := image.Spec{Tag: *tag, Files: files, User: *user}
	if *entrypoint != "" {
		spec.Entrypoint = []string{*entrypoint}
	}
	if err := image.WriteTarball(spec, *output); err != nil {
		return err
	}
	fmt.Printf("Wrote image %s to %s\n", *tag, *output)
	return nil
}
