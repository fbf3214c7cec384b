package controllers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/admission"
	"github.com/apiserver-operator/apiserver-operator/apiserver/validatorpool"
	"github.com/apiserver-operator/apiserver-operator/test/envtest"
)

// env is the bundled kube-apiserver and etcd with the CRD and the webhook
// configuration installed, and a manager serving the webhook and running
// the reconciler.
var (
	env        *envtest.Environment
	reconciler *ApiServerConfigReconciler
)

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintf(os.Stderr, "Setting up the controllers' test environment: %v\n", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	// The reconciler's logs, for a failing test; TEST_LOGS=1 shows them.
	if os.Getenv("TEST_LOGS") != "" {
		ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	} else {
		ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	}
	var err error
	env, err = envtest.Start(envtest.WithWebhooks())
	if err != nil {
		return 0, err
	}
	defer func() { _ = env.Stop() }()

	wh := env.WebhookInstallOptions
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  env.Scheme,
		Cache:   CacheOptions(""),
		Metrics: metricsserver.Options{BindAddress: "0"},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wh.LocalServingHost, Port: wh.LocalServingPort, CertDir: wh.LocalServingCertDir,
		}),
	})
	if err != nil {
		return 0, fmt.Errorf("creating the manager: %w", err)
	}
	validators := validatorpool.NewPool(envtest.BinDir())
	defer validators.Close()
	if err := SetupWebhookWithManager(mgr, admission.Admission{Validator: validators}, ""); err != nil {
		return 0, err
	}
	reconciler = &ApiServerConfigReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Scheme:    mgr.GetScheme(),
		Recorder:  mgr.GetEventRecorder("apiserver-operator"),
		Etcd:      EtcdV3{Timeout: 2 * time.Second},
		Tenants:   connectTestTenant,
		// Short intervals, so that Auto sizing is observable in a test.
		AutoSizingInterval: time.Second,
		CATrustPropagation: time.Second,
		// Environment failures stall within a test's patience.
		StallAfter:        3 * time.Second,
		EtcdWatchInterval: time.Second,
		// A held upgrade goes ahead within a test's patience.
		RemovedAPIQuietPeriod: 3 * time.Second,
		ResizePolicy:          apiserver.ResizePolicy{Threshold: 0.2, MinInterval: 2 * time.Second},
	}
	if err := reconciler.SetupWithManager(mgr); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()

	// Wait, bounded, for the webhook server to accept TLS connections with
	// the certificate envtest issued for it.
	addr := net.JoinHostPort(wh.LocalServingHost, strconv.Itoa(wh.LocalServingPort))
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(wh.LocalServingCAData) {
		return 0, errors.New("envtest gave no CA for the webhook server")
	}
	probe := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	var dialErr error
	for range 100 {
		var conn *tls.Conn
		conn, dialErr = tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, probe)
		if dialErr == nil {
			_ = conn.Close() // a probe: the handshake was the point
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if dialErr != nil {
		return 0, fmt.Errorf("the webhook server did not start on %s: %w", addr, dialErr)
	}

	code := m.Run()
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		return code, fmt.Errorf("running the manager: %w", err)
	}
	return code, nil
}
