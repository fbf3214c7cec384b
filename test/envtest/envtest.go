// Package envtest starts the real kube-apiserver and etcd bundled with the
// operator (bin/kube-apiserver, bin/etcd, built by `make bundled`) with the
// operator's CRDs installed, for tests that must run against the genuine
// API machinery rather than a fake.
package envtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	controlplanev1alpha1 "github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// Environment is a running kube-apiserver and etcd with the operator's CRDs.
type Environment struct {
	*crenvtest.Environment
	// Client talks to the apiserver as an administrator.
	Client client.Client
	// Scheme knows the built-in types and the operator's API.
	Scheme *k8sruntime.Scheme
	// KubeconfigPath is a kubeconfig file for bin/kubectl.
	KubeconfigPath string
	// BinDir holds kube-apiserver, etcd and kubectl.
	BinDir string
}

// RepoRoot is the root of the repository, found from this file's location.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// BinDir is KUBEBUILDER_ASSETS, or bin/ at the root of the repository.
func BinDir() string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	return filepath.Join(RepoRoot(), "bin")
}

// Option changes how Start sets up the environment.
type Option func(*crenvtest.Environment)

// WithWebhooks installs the webhook configurations of config/webhook,
// pointed at a local webhook server whose address and certificates are in
// WebhookInstallOptions (LocalServingHost, LocalServingPort,
// LocalServingCertDir): the test must serve them.
func WithWebhooks() Option {
	return func(e *crenvtest.Environment) {
		e.WebhookInstallOptions = crenvtest.WebhookInstallOptions{
			Paths: []string{filepath.Join(RepoRoot(), "config", "webhook", "manifests.yaml")},
		}
	}
}

// WithAPIServerFlag sets a flag of the test kube-apiserver, such as a
// service-cluster-ip-range wide enough for a thousand Services.
func WithAPIServerFlag(name, value string) Option {
	return func(e *crenvtest.Environment) {
		e.ControlPlane.GetAPIServer().Configure().Set(name, value)
	}
}

// Start starts kube-apiserver and etcd from bin/ and installs the CRDs of
// config/crd/bases. The caller must Stop the returned environment.
func Start(opts ...Option) (*Environment, error) {
	dir := BinDir()
	var missing []error
	for _, name := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			missing = append(missing, fmt.Errorf("%s: %w", name, err))
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("finding the bundled binaries in %s (run `make bundled` to build them): %w", dir, errors.Join(missing...))
	}

	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("registering the built-in types: %w", err)
	}
	if err := controlplanev1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("registering the operator's API: %w", err)
	}

	env := &crenvtest.Environment{
		BinaryAssetsDirectory: dir,
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	for _, opt := range opts {
		opt(env)
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", dir, err)
	}
	e := &Environment{Environment: env, Scheme: scheme, BinDir: dir}
	e.Client, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("creating a client for the test apiserver: %w", err)
	}
	kubeconfig, err := os.CreateTemp("", "envtest-kubeconfig-*")
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("writing the test kubeconfig: %w", err)
	}
	_, err = kubeconfig.Write(env.KubeConfig)
	if closeErr := kubeconfig.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("writing the test kubeconfig: %w", err)
	}
	e.KubeconfigPath = kubeconfig.Name()
	return e, nil
}

// Stop stops kube-apiserver and etcd and removes the kubeconfig file.
func (e *Environment) Stop() error {
	_ = os.Remove(e.KubeconfigPath)
	return e.Environment.Stop()
}

// WebhookServer serves webhooks where the environment's webhook
// configuration (WithWebhooks) sends kube-apiserver.
func (e *Environment) WebhookServer() webhook.Server {
	wh := e.WebhookInstallOptions
	return webhook.NewServer(webhook.Options{Host: wh.LocalServingHost, Port: wh.LocalServingPort, CertDir: wh.LocalServingCertDir})
}

// WaitForWebhookServer waits, bounded, until the webhook server accepts
// TLS connections with the certificate the environment issued for it.
func (e *Environment) WaitForWebhookServer() error {
	wh := e.WebhookInstallOptions
	addr := net.JoinHostPort(wh.LocalServingHost, strconv.Itoa(wh.LocalServingPort))
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(wh.LocalServingCAData) {
		return errors.New("envtest gave no CA for the webhook server")
	}
	probe := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	var dialErr error
	for range 100 {
		var conn *tls.Conn
		conn, dialErr = tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, probe)
		if dialErr == nil {
			_ = conn.Close() // a probe: the handshake was the point
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("the webhook server did not start on %s: %w", addr, dialErr)
}

// RunManager starts mgr, waits until it serves the environment's webhooks
// and each of synced says its cache is filled (a loaded machine starts
// informers late), runs the tests and stops mgr: a package's TestMain in
// one call.
func (e *Environment) RunManager(m *testing.M, mgr manager.Manager, synced ...func(context.Context) bool) (int, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	if err := e.WaitForWebhookServer(); err != nil {
		return 0, err
	}
	waitCtx, waitCancel := context.WithTimeout(ctx, time.Minute)
	defer waitCancel()
	for _, s := range append([]func(context.Context) bool{mgr.GetCache().WaitForCacheSync}, synced...) {
		if !s(waitCtx) {
			return 0, fmt.Errorf("a cache of the manager did not fill within a minute")
		}
	}
	code := m.Run()
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		return code, fmt.Errorf("running the manager: %w", err)
	}
	return code, nil
}
