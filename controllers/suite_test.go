package controllers

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/admission"
	"github.com/apiserver-operator/apiserver-operator/apiserver/validatorpool"
	"github.com/apiserver-operator/apiserver-operator/controllers/ownership"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantindex"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
	"github.com/apiserver-operator/apiserver-operator/controllers/webhooks"
	"github.com/apiserver-operator/apiserver-operator/test/envtest"
)

// env is the bundled kube-apiserver and etcd with the CRD and the webhook
// configuration installed, and a manager serving the webhook and running
// the reconciler.
var (
	env        *envtest.Environment
	reconciler *ApiServerConfigReconciler
	// backupDir is the backup volume of the tests' operator.
	backupDir string
	// ownershipKey is the key every reconciler of the tests proves with.
	ownershipKey *apiserver.Ownership
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

	// The ownership key, as the manager makes it at its first start (in
	// kube-system: the tests' namespaces come and go).
	if ownershipKey, err = ownership.Load(context.Background(), env.Client, types.NamespacedName{Namespace: "kube-system", Name: ownership.DefaultSecretName}); err != nil {
		return 0, err
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:        env.Scheme,
		Cache:         CacheOptions("", ownershipKey),
		Metrics:       metricsserver.Options{BindAddress: "0"},
		WebhookServer: env.WebhookServer(),
	})
	if err != nil {
		return 0, fmt.Errorf("creating the manager: %w", err)
	}
	validators := validatorpool.NewPool(envtest.BinDir())
	defer validators.Close()
	tenantIndex, err := tenantindex.New(env.Config, env.Scheme, tenantindex.WithMarkProofs(ownershipKey))
	if err != nil {
		return 0, err
	}
	if err := mgr.Add(tenantIndex); err != nil {
		return 0, err
	}
	if err := webhooks.SetupWithManager(mgr, admission.Admission{Validator: validators, Gates: &admission.Gates{ImageRepositories: admission.DefaultImageRepositories(apiserver.DefaultImageRepository)}}, "", tenantIndex); err != nil {
		return 0, err
	}
	reconciler = &ApiServerConfigReconciler{
		Ownership:   ownershipKey,
		Client:      mgr.GetClient(),
		APIReader:   mgr.GetAPIReader(),
		Scheme:      mgr.GetScheme(),
		Recorder:    mgr.GetEventRecorder("apiserver-operator"),
		Etcd:        tenantio.EtcdV3{Timeout: 2 * time.Second},
		Tenants:     connectTestTenant,
		TenantIndex: tenantIndex,
		// The konnectivity servers of the tests' pods (envtest runs none).
		KonnectivityProbe:         probeTestKonnectivity,
		KonnectivityWatchInterval: time.Second,
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
	if backupDir, err = os.MkdirTemp("", "backups-"); err != nil {
		return 0, err
	}
	defer func() { _ = os.RemoveAll(backupDir) }()
	reconciler.BackupDir = backupDir
	if err := reconciler.SetupWithManager(mgr); err != nil {
		return 0, err
	}
	backups := &ApiServerBackupReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(),
		Recorder: mgr.GetEventRecorder("apiserver-operator"), Etcd: tenantio.EtcdV3{Timeout: 2 * time.Second}, Dir: backupDir, Ownership: ownershipKey}
	if err := backups.SetupWithManager(mgr); err != nil {
		return 0, err
	}
	// Schedules of seconds, so that retention is seen within a test.
	schedules := &ApiServerBackupScheduleReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Recorder: mgr.GetEventRecorder("apiserver-operator"),
		MinInterval: 2 * time.Second}
	if err := schedules.SetupWithManager(mgr); err != nil {
		return 0, err
	}
	credentials := &AdminCredentialRequestReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(), Recorder: mgr.GetEventRecorder("apiserver-operator"),
		Ownership: ownershipKey}
	if err := credentials.SetupWithManager(mgr); err != nil {
		return 0, err
	}
	return env.RunManager(m, mgr, tenantIndex.WaitForCacheSync)
}
