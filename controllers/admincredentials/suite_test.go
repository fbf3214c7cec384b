package admincredentials

import (
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/apiserver-operator/apiserver-operator/controllers/controllertest"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenants"
)

// env runs the tenant reconciler, whose tenants the requests name, and
// the reconciler under test.
var env *controllertest.Env

func TestMain(m *testing.M) {
	os.Exit(controllertest.Run(m, "admin credential requests", func(e *controllertest.Env, mgr manager.Manager) error {
		env = e
		tenantReconciler := &tenants.Reconciler{Ownership: e.Ownership, Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
			Scheme: mgr.GetScheme(), Recorder: mgr.GetEventRecorder("apiserver-operator"), Reach: tenantio.Real{}, TenantIndex: e.TenantIndex}
		if err := tenantReconciler.SetupWithManager(mgr); err != nil {
			return err
		}
		credentials := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(),
			Recorder: mgr.GetEventRecorder("apiserver-operator"), Ownership: e.Ownership}
		return credentials.SetupWithManager(mgr)
	}))
}
