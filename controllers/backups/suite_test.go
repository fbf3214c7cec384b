package backups_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/apiserver-operator/apiserver-operator/controllers/backups"
	"github.com/apiserver-operator/apiserver-operator/controllers/controllertest"
	"github.com/apiserver-operator/apiserver-operator/controllers/datastores"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenants"
)

// env runs the tenant reconciler, whose restore step runs the Restorer,
// and the backup and schedule reconcilers.
var env *controllertest.Env

// backupDir is the backup volume of the tests' operator.
var backupDir string

func TestMain(m *testing.M) {
	var err error
	if backupDir, err = os.MkdirTemp("", "backups-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := controllertest.Run(m, "backups", func(e *controllertest.Env, mgr manager.Manager) error {
		env = e
		tenantReconciler := &tenants.Reconciler{Ownership: e.Ownership, Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
			Scheme: mgr.GetScheme(), Recorder: mgr.GetEventRecorder("apiserver-operator"), Reach: tenantio.Real{EtcdV3: tenantio.EtcdV3{Timeout: 2 * time.Second}},
			TenantIndex: e.TenantIndex, BackupDir: backupDir}
		if err := tenantReconciler.SetupWithManager(mgr); err != nil {
			return err
		}
		backupReconciler := &backups.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(),
			Recorder: mgr.GetEventRecorder("apiserver-operator"), Etcd: tenantio.EtcdV3{Timeout: 2 * time.Second}, Dir: backupDir,
			Ownership: e.Ownership, EtcdTLS: datastores.Reach(mgr.GetAPIReader(), nil)}
		if err := backupReconciler.SetupWithManager(mgr); err != nil {
			return err
		}
		// Schedules of seconds, so that retention is seen within a test.
		schedules := &backups.ScheduleReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Recorder: mgr.GetEventRecorder("apiserver-operator"),
			MinInterval: 2 * time.Second}
		return schedules.SetupWithManager(mgr)
	})
	_ = os.RemoveAll(backupDir)
	os.Exit(code)
}
