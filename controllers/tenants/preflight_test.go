package tenants

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// callingTenant is a tenant whose clients call an API that release
// ("1.37") removed while calling is true: each read of its metrics counts
// more requests.
type callingTenant struct {
	release  string
	calling  atomic.Bool
	requests atomic.Int64
	reads    atomic.Int64
}

func (f *callingTenant) Resources(context.Context) (map[schema.GroupResource]tenantio.Resource, error) {
	return map[schema.GroupResource]tenantio.Resource{}, nil
}

func (f *callingTenant) Rewrite(context.Context, tenantio.Resource, string, string) error { return nil }

func (f *callingTenant) Metrics(_ context.Context, _ string, families ...string) ([]byte, error) {
	if !slices.Equal(families, apiserver.RemovedAPIMetrics) {
		return nil, fmt.Errorf("asked for the metrics %v, want %v", families, apiserver.RemovedAPIMetrics)
	}
	f.reads.Add(1)
	if f.calling.Load() {
		f.requests.Add(3)
	}
	return fmt.Appendf(nil, `# TYPE apiserver_requested_deprecated_apis gauge
apiserver_requested_deprecated_apis{group="example.k8s.io",removed_release=%q,resource="widgets",subresource="",version="v1beta1"} 1
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="example.k8s.io",resource="widgets",scope="cluster",subresource="",verb="LIST",version="v1beta1"} %d
`, f.release, f.requests.Load()), nil
}

// TestApiServerConfigReconciler_HoldsAMinorUpgradeWhileClientsCallRemovedAPIs:
// before a minor upgrade the operator reads the running apiservers'
// metrics; while clients call an API the target removed, the Deployment
// keeps the old version and status names the API and the count. The
// upgrade goes ahead once the calls stopped for the quiet period (3 s in
// this suite), or at once when the user acknowledges.
func TestApiServerConfigReconciler_HoldsAMinorUpgradeWhileClientsCallRemovedAPIs(t *testing.T) {
	if len(v1alpha1.BundledVersions) < 2 {
		t.Skip("one bundled version")
	}
	from, to := v1alpha1.BundledVersions[len(v1alpha1.BundledVersions)-2], v1alpha1.BundledVersion
	toV := utilversion.MustParseSemantic(to)
	release := fmt.Sprintf("%d.%d", toV.Major(), toV.Minor())
	ctx := context.Background()
	ns := namespace(t, nil)
	held := func(name string) (*v1alpha1.ApiServerConfig, *callingTenant, *appsv1.Deployment) {
		cfg := tenant(ns, name, func(s *v1alpha1.ApiServerConfigSpec) { s.Version = from })
		fake := &callingTenant{release: release}
		fake.calling.Store(true)
		testTenants.Store(client.ObjectKeyFromObject(cfg), fake)
		t.Cleanup(func() { testTenants.Delete(client.ObjectKeyFromObject(cfg)) })
		createReady(t, cfg)
		pod := createAPIServerPod(t, cfg, name+"-apiserver-x")
		pod.Annotations = map[string]string{apiserver.VersionAnnotation: from}
		if err := env.Client.Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
		pod.Status.PodIP = "10.0.0.5"
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if err := env.Client.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
		updateTenant(t, cfg, func(s *v1alpha1.ApiServerConfigSpec) { s.Version = to })
		d := waitForDeployment(t, cfg)
		eventually(t, 20*time.Second, "the upgrade is held, naming the API and the count", func() error {
			got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
			deg, prog := conditionOf(got, v1alpha1.ConditionDegraded), conditionOf(got, v1alpha1.ConditionProgressing)
			if got.Status.ObservedGeneration != got.Generation || deg == nil || deg.Reason != v1alpha1.ReasonRemovedAPIsInUse ||
				!strings.Contains(deg.Message, "upgrade "+from+" → "+to+" held: clients called APIs that "+to+" no longer serves: example.k8s.io/v1beta1/widgets (removed in "+release+", ") {
				return fmt.Errorf("Degraded is %v", deg)
			}
			if prog == nil || prog.Status != metav1.ConditionFalse || prog.Reason != v1alpha1.ReasonRemovedAPIsInUse {
				return fmt.Errorf("Progressing is %v", prog)
			}
			return nil
		})
		// The pass that said so left the Deployment on the old version.
		if v := get(t, &appsv1.Deployment{ObjectMeta: d.ObjectMeta}).Spec.Template.Annotations[apiserver.VersionAnnotation]; v != from {
			t.Fatalf("%s: the held upgrade's Deployment runs %s, want %s", name, v, from)
		}
		return cfg, fake, d
	}
	waitUpgraded := func(d *appsv1.Deployment, within time.Duration, what string) {
		eventually(t, within, what, func() error {
			if v := get(t, &appsv1.Deployment{ObjectMeta: d.ObjectMeta}).Spec.Template.Annotations[apiserver.VersionAnnotation]; v != to {
				return fmt.Errorf("the Deployment runs %s", v)
			}
			return nil
		})
	}

	// Acknowledged: the upgrade goes at once, calls or not.
	acked, _, ackedDeploy := held("acked")
	// As kubectl annotate does: again on a conflict with a status write.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: acked.ObjectMeta})
		got.Annotations = map[string]string{apiserver.AllowRemovedAPICallsAnnotation: to}
		return env.Client.Update(ctx, got)
	})
	if err != nil {
		t.Fatal(err)
	}
	waitUpgraded(ackedDeploy, 15*time.Second, "the acknowledged upgrade goes ahead")

	// The calls stop: the upgrade goes ahead after the quiet period, and
	// not while they go on.
	_, fake, quietDeploy := held("quiet")
	readsBefore := fake.reads.Load()
	eventually(t, 20*time.Second, "the pre-flight looks again", func() error {
		if fake.reads.Load() < readsBefore+3 {
			return fmt.Errorf("%d reads of the metrics", fake.reads.Load()-readsBefore)
		}
		return nil
	})
	if v := get(t, &appsv1.Deployment{ObjectMeta: quietDeploy.ObjectMeta}).Spec.Template.Annotations[apiserver.VersionAnnotation]; v != from {
		t.Fatalf("the upgrade went ahead while clients still called the removed API (Deployment on %s)", v)
	}
	fake.calling.Store(false)
	waitUpgraded(quietDeploy, 30*time.Second, "the upgrade goes ahead once the calls stopped")
}

// TestRemovedAPIWatch: the quiet period counts from the last growth of
// any apiserver's count; a restarted apiserver counting anew, or one
// missing from a look, is no new call; a new pod with calls is; a new
// target starts over.
func TestRemovedAPIWatch(t *testing.T) {
	w := &Reconciler{}
	key := types.NamespacedName{Namespace: "n", Name: "t"}
	t0 := time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC)
	steps := []struct {
		name     string
		target   string
		requests map[types.UID]int64
		at       time.Duration
		want     time.Duration // grewAt - t0
	}{
		{"first look", "v1.37.1", map[types.UID]int64{"a": 10, "b": 5}, 0, 0},
		{"no new call", "v1.37.1", map[types.UID]int64{"a": 10, "b": 5}, time.Minute, 0},
		{"a calls again", "v1.37.1", map[types.UID]int64{"a": 12, "b": 5}, 2 * time.Minute, 2 * time.Minute},
		{"b restarted while a got a call: the sum falls, a grew", "v1.37.1", map[types.UID]int64{"a": 13, "b": 0}, 3 * time.Minute, 3 * time.Minute},
		{"a not ready for a moment", "v1.37.1", map[types.UID]int64{"b": 0}, 4 * time.Minute, 3 * time.Minute},
		{"a back with its old count", "v1.37.1", map[types.UID]int64{"a": 13, "b": 0}, 5 * time.Minute, 3 * time.Minute},
		{"a new pod with calls", "v1.37.1", map[types.UID]int64{"a": 13, "b": 0, "c": 1}, 6 * time.Minute, 6 * time.Minute},
		{"another target", "v1.38.0", map[types.UID]int64{"a": 13, "b": 0, "c": 1}, 7 * time.Minute, 7 * time.Minute},
	}
	for _, s := range steps {
		if got := w.observeRemovedAPIs(key, s.target, s.requests, t0.Add(s.at)); !got.Equal(t0.Add(s.want)) {
			t.Errorf("%s: the requests last grew at +%s, want +%s", s.name, got.Sub(t0), s.want)
		}
	}
	w.memory.removedAPIs.Forget(key)
	if got := w.observeRemovedAPIs(key, "v1.38.0", map[types.UID]int64{"a": 13}, t0.Add(time.Hour)); !got.Equal(t0.Add(time.Hour)) {
		t.Errorf("after forget, the count starts over: +%s", got.Sub(t0))
	}
}

// TestApiServerConfigReconciler_RecordsTheUpgradeOfAHibernatedTenant: the
// upgrade of a tenant with no apiserver running is recorded (the
// Deployment's template moves, with no pod), status keeps the version that
// ran last and says the upgrade happens when the tenant wakes; woken, its
// apiservers start on the new version and status.version follows.
func TestApiServerConfigReconciler_RecordsTheUpgradeOfAHibernatedTenant(t *testing.T) {
	if len(v1alpha1.BundledVersions) < 2 {
		t.Skip("one bundled version")
	}
	from, to := v1alpha1.BundledVersions[len(v1alpha1.BundledVersions)-2], v1alpha1.BundledVersion
	ns := namespace(t, nil)
	cfg := tenant(ns, "sleeper", func(s *v1alpha1.ApiServerConfigSpec) { s.Version = from })
	testTenants.Store(client.ObjectKeyFromObject(cfg), &callingTenant{})
	t.Cleanup(func() { testTenants.Delete(client.ObjectKeyFromObject(cfg)) })
	createReady(t, cfg)
	if got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta}); got.Status.Version != from {
		t.Fatalf("status.version is %q, want %s", got.Status.Version, from)
	}
	updateTenant(t, cfg, func(s *v1alpha1.ApiServerConfigSpec) { s.MasterCount = ptr.To[int32](0) })
	d := waitForDeployment(t, cfg)
	actAsDeploymentController(t, d)
	updateTenant(t, cfg, func(s *v1alpha1.ApiServerConfigSpec) { s.Version = to })
	eventually(t, 20*time.Second, "the hibernated tenant records the upgrade", func() error {
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		r := conditionOf(got, v1alpha1.ConditionReady)
		if got.Status.ObservedGeneration != got.Generation || r == nil || r.Status != metav1.ConditionTrue || r.Reason != v1alpha1.ReasonHibernated ||
			!strings.Contains(r.Message, "the upgrade "+from+" → "+to+" happens when it wakes") {
			return fmt.Errorf("Ready is %v", r)
		}
		if got.Status.Version != from || len(got.Status.Versions) != 0 {
			return fmt.Errorf("status.version %q, versions %v; want %s and none", got.Status.Version, got.Status.Versions, from)
		}
		if v := get(t, &appsv1.Deployment{ObjectMeta: d.ObjectMeta}).Spec.Template.Annotations[apiserver.VersionAnnotation]; v != to {
			return fmt.Errorf("the Deployment's template is on %s", v)
		}
		return nil
	})
	// Woken: the apiserver starts on the new version.
	updateTenant(t, cfg, func(s *v1alpha1.ApiServerConfigSpec) { s.MasterCount = ptr.To[int32](1) })
	eventually(t, 20*time.Second, "the Deployment wants one apiserver again", func() error {
		if n := *get(t, &appsv1.Deployment{ObjectMeta: d.ObjectMeta}).Spec.Replicas; n != 1 {
			return fmt.Errorf("%d replicas", n)
		}
		return nil
	})
	actAsDeploymentController(t, d)
	pod := createAPIServerPod(t, cfg, "sleeper-apiserver-x")
	pod.Annotations = map[string]string{apiserver.VersionAnnotation: to}
	if err := env.Client.Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if err := env.Client.Status().Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "status.version follows the woken apiserver", func() error {
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		if got.Status.Version != to || len(got.Status.Versions) != 1 || got.Status.Versions[0] != (v1alpha1.VersionStatus{Version: to, Replicas: 1, ReadyReplicas: 1}) {
			return fmt.Errorf("status.version %q, versions %+v", got.Status.Version, got.Status.Versions)
		}
		if r := conditionOf(got, v1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionTrue || r.Reason != v1alpha1.ReasonReconciled {
			return fmt.Errorf("Ready is %v", r)
		}
		return nil
	})
}
