package tenants

import (
	"os"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/admincredentials"
	"github.com/apiserver-operator/apiserver-operator/controllers/controllertest"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// env is the bundled kube-apiserver and etcd with the CRD and the webhook
// configuration installed, and a manager serving the webhook and running
// the reconcilers.
var (
	env        *controllertest.Env
	reconciler *Reconciler
	// ownershipKey is the key every reconciler of the tests proves with.
	ownershipKey *apiserver.Ownership
)

func TestMain(m *testing.M) {
	os.Exit(controllertest.Run(m, "tenant reconciler", func(e *controllertest.Env, mgr manager.Manager) error {
		env, ownershipKey = e, e.Ownership
		return setup(mgr)
	}))
}

// setup adds the reconcilers to mgr as the operator does, with the
// intervals of a test's patience.
func setup(mgr manager.Manager) error {
	reconciler = &Reconciler{
		Ownership:                 ownershipKey,
		Client:                    mgr.GetClient(),
		APIReader:                 mgr.GetAPIReader(),
		Scheme:                    mgr.GetScheme(),
		Recorder:                  mgr.GetEventRecorder("apiserver-operator"),
		Reach:                     testReach{tenantio.Real{EtcdV3: tenantio.EtcdV3{Timeout: 2 * time.Second}}},
		TenantIndex:               env.TenantIndex,
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
	if err := reconciler.SetupWithManager(mgr); err != nil {
		return err
	}
	// Credentials, whose revocation is the CA's.
	credentials := &admincredentials.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(),
		Recorder: mgr.GetEventRecorder("apiserver-operator"), Ownership: ownershipKey}
	return credentials.SetupWithManager(mgr)
}
