package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/apiserver-operator/apiserver-operator/apiserver/validatorpool"
)

// startValidators starts the pool of the validators in dir, working in its
// own directory under /tmp (an emptyDir with a size limit), emptied at
// start of what a killed process left, with one process per version
// started and waiting for the first request.
func startValidators(dir string, log logr.Logger) *validatorpool.Pool {
	pool := validatorpool.NewPool(dir, validatorpool.WorkDir(filepath.Join(os.TempDir(), "validators")))
	if len(pool.Versions()) == 0 {
		log.Info("No kube-apiserver validator found: admission will refuse every ApiServerConfig of a bundled version", "validatorDir", dir)
	}
	pool.Warm()
	return pool
}

// runValidators is "manager validators": it serves the validators on a
// Unix socket for the webhook's --validator-socket, from a container of
// their own (config/webhook), until ctx ends; with --probe it asks that
// socket once and exits, the container's liveness probe.
func runValidators(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("validators", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", "", "Unix socket to serve the validators on (the webhook's --validator-socket).")
	dir := fs.String("validator-dir", defaultValidatorDir(),
		"Directory with the validators of the bundled kube-apiserver versions ("+validatorpool.BinaryPrefix+"<version>). Default: the manager binary's directory.")
	probe := fs.Bool("probe", false, "Ask the validators served on --socket which versions they have, and exit: 0 when they answer.")
	delay := fs.Duration("shutdown-delay", 10*time.Second,
		"How long the validators keep answering after SIGTERM: the webhook keeps serving for its --webhook-shutdown-delay, and judges what it took then within its budget.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *socket == "" {
		return errors.New("--socket is required: the Unix socket the webhook's --validator-socket names")
	}
	if *probe {
		if err := validatorpool.NewRemote(*socket).Ready(ctx); err != nil {
			return fmt.Errorf("the validators do not answer: %w", err)
		}
		return nil
	}
	log := zap.New(zap.WriteTo(stderr)).WithName("validators")
	pool := startValidators(*dir, log)
	defer pool.Close()
	log.Info("Serving the validators", "socket", *socket, "versions", pool.Versions())
	var stopping atomic.Bool
	return validatorpool.Serve(drain(ctx, *delay, &stopping), *socket, pool)
}
