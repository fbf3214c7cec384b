//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// upgradeVersions are the two newest bundled versions: the upgrade the
// scenario and the benchmark run.
func upgradeVersions(t testing.TB) (from, to string) {
	t.Helper()
	n := len(v1alpha1.BundledVersions)
	if n < 2 {
		t.Skip("the operator bundles one kube-apiserver version: no upgrade to run")
	}
	return v1alpha1.BundledVersions[n-2], v1alpha1.BundledVersions[n-1]
}

// statusSeen is one reading of what status says of versions.
type statusSeen struct {
	version     string
	versions    []v1alpha1.VersionStatus
	progressing metav1.Condition
}

// statusTrail reads status every 200 ms until stopped.
type statusTrail struct {
	mu   sync.Mutex
	seen []statusSeen
	stop func()
}

func trackStatus(c client.Client, key client.ObjectKey) *statusTrail {
	tr := &statusTrail{}
	tr.stop = startPolling(200*time.Millisecond, func(ctx context.Context) {
		got := &v1alpha1.ApiServerConfig{}
		if err := c.Get(ctx, key, got); err != nil {
			return
		}
		s := statusSeen{version: got.Status.Version, versions: got.Status.Versions}
		if p := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionProgressing); p != nil {
			s.progressing = *p
		}
		tr.mu.Lock()
		tr.seen = append(tr.seen, s)
		tr.mu.Unlock()
	})
	return tr
}

func (tr *statusTrail) finish() []statusSeen {
	tr.stop()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.seen
}

// mixed reports whether the last reading shows pods of two versions.
func (tr *statusTrail) mixed() bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.seen) > 0 && len(tr.seen[len(tr.seen)-1].versions) > 1
}

// endpointVersions asks every apiserver pod of cfg for /version, each at
// its own address (from inside the node: the Service would pick one).
func endpointVersions(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, rc *rest.Config) map[string]string {
	t.Helper()
	pods := apiserverPods(t, c, cfg)
	out := map[string]string{}
	for _, p := range pods {
		if p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		pc := rest.CopyConfig(rc)
		pc.Host = fmt.Sprintf("https://%s:%d", p.Status.PodIP, p.Spec.Containers[0].Ports[0].ContainerPort)
		pc.Dial = cluster.DialFromNode
		cs, err := kubernetes.NewForConfig(pc)
		if err != nil {
			t.Fatal(err)
		}
		info, err := cs.Discovery().ServerVersion()
		if err != nil {
			t.Fatalf("GET /version of pod %s at %s: %v", p.Name, pc.Host, err)
		}
		out[p.Name] = info.GitVersion
	}
	return out
}

// upgradeRun is what a client saw during an upgrade.
type upgradeRun struct {
	took          time.Duration
	reads, writes *clientLoop
	trail         []statusSeen
	written       int
}

// runUpgrade patches spec.version of a Ready tenant to `to` with kubectl,
// as a user does, while a reader and a writer call the tenant, and waits
// until every apiserver runs it and the tenant is Ready. midway, if set,
// runs once status shows apiservers of both versions.
func runUpgrade(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, tenant *kubernetes.Clientset, to string, midway func()) upgradeRun {
	t.Helper()
	var mu sync.Mutex
	written := 0
	reads := startClientLoop(func(ctx context.Context) error {
		_, err := tenant.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{Limit: 50})
		return err
	}, 100*time.Millisecond)
	writes := startClientLoop(func(ctx context.Context) error {
		mu.Lock()
		n := written
		mu.Unlock()
		_, err := tenant.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("during-%d", n)}, Data: map[string]string{"n": fmt.Sprint(n)}}, metav1.CreateOptions{})
		if err == nil {
			mu.Lock()
			written++
			mu.Unlock()
		}
		return err
	}, 200*time.Millisecond)
	trail := trackStatus(c, client.ObjectKeyFromObject(cfg))
	time.Sleep(2 * time.Second) // the loops run before the upgrade too

	start := time.Now()
	managementKubectl(t, "-n", cfg.Namespace, "patch", "asc/"+cfg.Name, "--type=merge", "-p", fmt.Sprintf(`{"spec":{"version":%q}}`, to))
	if midway != nil {
		deadline := time.Now().Add(5 * time.Minute)
		for !trail.mixed() && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if !trail.mixed() {
			t.Fatalf("status never showed apiservers of two versions within 5 minutes: %+v", trail.finish())
		}
		midway()
	}
	deadline := time.Now().Add(8 * time.Minute)
	for {
		got := &v1alpha1.ApiServerConfig{}
		err := c.Get(context.Background(), client.ObjectKeyFromObject(cfg), got)
		r := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
		if err == nil && got.Status.Version == to && r != nil && r.Status == metav1.ConditionTrue && r.ObservedGeneration == got.Generation {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upgrade to %s did not finish within 8 minutes: status.version %q, versions %+v, Ready %v", to, got.Status.Version, got.Status.Versions, r)
		}
		time.Sleep(250 * time.Millisecond)
	}
	run := upgradeRun{took: time.Since(start), reads: reads, writes: writes}
	time.Sleep(2 * time.Second) // and after it
	reads.stopped()
	writes.stopped()
	run.trail = trail.finish()
	mu.Lock()
	run.written = written
	mu.Unlock()
	return run
}

// TestOperator_MinorUpgradeFailsNoRequest upgrades a tenant of two
// apiservers from the older bundled minor to the newer one with `kubectl
// patch`, as a user does, with a reader and a writer calling it and the
// operator SIGKILLed once midway. No request fails, every apiserver answers
// the new version at the end, what was written before and during is all
// there, status went through the upgrade's states (status.version moving
// only when no old apiserver was left), and GitOps tools saw InProgress
// until it was done. Wrong version changes are refused first, naming the
// field.
func TestOperator_MinorUpgradeFailsNoRequest(t *testing.T) {
	from, to := upgradeVersions(t)
	c, cfg, tenant := startTenant(t, "upgraded", func(cfg *v1alpha1.ApiServerConfig) {
		cfg.Spec.Version = from
		cfg.Spec.MasterCount = ptrTo[int32](2)
	})
	ctx := context.Background()
	ns := cfg.Namespace
	_, rc := tenantClient(t, c, cfg)
	for pod, v := range endpointVersions(t, c, cfg, rc) {
		if v != from {
			t.Fatalf("before the upgrade, pod %s answers /version %s, want %s", pod, v, from)
		}
	}

	// Wrong version changes, refused with the field; the tenant unchanged.
	before := &v1alpha1.ApiServerConfig{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cfg), before); err != nil {
		t.Fatal(err)
	}
	fromV := utilversion.MustParseSemantic(from)
	skipped := fmt.Sprintf("v%d.%d.0", fromV.Major(), fromV.Minor()+2)
	older := fmt.Sprintf("v%d.%d.%d", fromV.Major(), fromV.Minor()-1, 0)
	wrong := []struct{ name, patch, field, want string }{
		{"skip", fmt.Sprintf(`{"spec":{"version":%q,"image":"registry.example.com/kube-apiserver:%s"}}`, skipped, skipped), "spec.version", "skips a minor version"},
		{"downgrade", fmt.Sprintf(`{"spec":{"version":%q,"image":"registry.example.com/kube-apiserver:%s"}}`, older, older), "spec.version", "downgrade"},
		{"unknown", `{"spec":{"version":"v1.99.0"}}`, "spec.version", "is not a bundled version (" + strings.Join(v1alpha1.BundledVersions, ", ") + ")"},
	}
	if gate, value := removedGate(t, from, to); gate != "" {
		wrong = append(wrong, struct{ name, patch, field, want string }{"removed-gate",
			fmt.Sprintf(`{"spec":{"version":%q,"featureGates":{%q:%t}}}`, to, gate, value),
			"spec.featureGates[" + gate + "]", "was removed in kube-apiserver " + to})
	} else {
		t.Logf("no feature gate of %s is gone in %s: the removed-gate refusal is left to the unit tests", from, to)
	}
	for _, tc := range wrong {
		out, err := run(t, nil, "kubectl", "-n", ns, "patch", "asc/"+cfg.Name, "--type=merge", "-p", tc.patch)
		if err == nil || !strings.Contains(out, tc.field) || !strings.Contains(out, tc.want) {
			t.Fatalf("%s: kubectl patch %s: err %v, printed\n%s\nwant a refusal naming %s and saying %q", tc.name, tc.patch, err, out, tc.field, tc.want)
		}
		t.Logf("%s refused: %s", tc.name, strings.TrimSpace(out))
	}
	after := &v1alpha1.ApiServerConfig{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cfg), after); err != nil {
		t.Fatal(err)
	}
	if after.Generation != before.Generation {
		t.Fatalf("refused patches changed the spec (generation %d -> %d)", before.Generation, after.Generation)
	}

	// Data written before the upgrade.
	const kept = 20
	for i := range kept {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("before-%d", i)}, Data: map[string]string{"n": fmt.Sprint(i), "version": from}}
		if _, err := tenant.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	health := trackKstatus(t, c, client.ObjectKeyFromObject(cfg))
	counted := health.count()
	killed := 0
	up := runUpgrade(t, c, cfg, tenant, to, func() { killed = killOperator(t) })
	t.Logf("upgrade %s → %s of 2 apiservers in %s, operator SIGKILLed midway (%d processes)", from, to, up.took.Round(time.Second), killed)
	if killed == 0 {
		t.Fatal("no operator process was killed midway")
	}
	up.reads.finish(t, "reads during the upgrade")
	up.writes.finish(t, "writes during the upgrade")

	// Every apiserver answers the new version.
	versions := endpointVersions(t, c, cfg, rc)
	if len(versions) != 2 {
		t.Errorf("after the upgrade %d apiserver pods answer, want 2: %v", len(versions), versions)
	}
	for pod, v := range versions {
		if v != to {
			t.Errorf("after the upgrade, pod %s answers /version %s, want %s", pod, v, to)
		}
	}

	// Nothing lost: what was written before, and every write acknowledged
	// during it.
	for i := range kept {
		cm, err := tenant.CoreV1().ConfigMaps("default").Get(ctx, fmt.Sprintf("before-%d", i), metav1.GetOptions{})
		if err != nil || cm.Data["n"] != fmt.Sprint(i) || cm.Data["version"] != from {
			t.Errorf("ConfigMap before-%d after the upgrade: %v, %v", i, cm.Data, err)
		}
	}
	for i := range up.written {
		if _, err := tenant.CoreV1().ConfigMaps("default").Get(ctx, fmt.Sprintf("during-%d", i), metav1.GetOptions{}); err != nil {
			t.Errorf("ConfigMap during-%d, written during the upgrade: %v", i, err)
		}
	}

	// Status went through the upgrade's states.
	checkUpgradeTrail(t, up.trail, from, to)
	if path := health.pathFrom(counted); !slices.Contains(path, kstatus.InProgressStatus.String()) || path[len(path)-1] != kstatus.CurrentStatus.String() ||
		slices.Contains(path, kstatus.FailedStatus.String()) {
		t.Errorf("GitOps health during the upgrade went %v, want InProgress until Current, never Failed", path)
	}
}

// checkUpgradeTrail checks what status said during an upgrade: while any
// apiserver of the old version was left (shutting down included),
// status.version was the old version; it moved once, to the new one; and
// Progressing said how far the upgrade was.
func checkUpgradeTrail(t testing.TB, trail []statusSeen, from, to string) {
	t.Helper()
	sawHalfway, moved := false, false
	want := fmt.Sprintf("Upgrading %s → %s: ", from, to)
	for _, s := range trail {
		hasOld := false
		for _, v := range s.versions {
			hasOld = hasOld || v.Version == from
		}
		if hasOld && s.version != from {
			t.Errorf("status.version said %s while %+v still ran", s.version, s.versions)
		}
		switch {
		case s.version == to:
			moved = true
		case moved:
			t.Errorf("status.version went back to %s after %s", s.version, to)
		}
		if len(s.versions) == 2 && s.progressing.Reason == v1alpha1.ReasonUpgrading && strings.HasPrefix(s.progressing.Message, want) {
			sawHalfway = true
		}
	}
	if !sawHalfway {
		t.Errorf("Progressing never said %q with pods of both versions", want+"N of 2 apiservers upgraded")
	}
	if !moved {
		t.Errorf("status.version never said %s", to)
	}
	last := trail[len(trail)-1]
	if last.version != to || len(last.versions) != 1 || last.versions[0] != (v1alpha1.VersionStatus{Version: to, Replicas: 2, ReadyReplicas: 2}) {
		t.Errorf("after the upgrade status says version %s, versions %+v; want %s, 2 of 2 ready", last.version, last.versions, to)
	}
}

// removedGate is a feature gate from's catalog has and to's has not, with
// a value from accepts, or "".
func removedGate(t testing.TB, from, to string) (string, bool) {
	t.Helper()
	a, err1 := apiserver.CatalogFor(utilversion.MustParseSemantic(from))
	b, err2 := apiserver.CatalogFor(utilversion.MustParseSemantic(to))
	if err1 != nil || err2 != nil || a == nil || b == nil {
		t.Fatalf("the catalogs of %s and %s: %v %v", from, to, err1, err2)
	}
	var gone []string
	for name := range a.FeatureGates {
		if _, ok := b.FeatureGates[name]; !ok {
			gone = append(gone, name)
		}
	}
	if len(gone) == 0 {
		return "", false
	}
	sort.Strings(gone)
	return gone[0], a.FeatureGates[gone[0]].Default
}

// removedBetaAPI is a beta group/version (and one of its resources) that
// from serves and to does not, or "".
func removedBetaAPI(t testing.TB, from, to string) (gv, resource string) {
	t.Helper()
	a, err1 := apiserver.CatalogFor(utilversion.MustParseSemantic(from))
	b, err2 := apiserver.CatalogFor(utilversion.MustParseSemantic(to))
	if err1 != nil || err2 != nil || a == nil || b == nil {
		t.Fatalf("the catalogs of %s and %s: %v %v", from, to, err1, err2)
	}
	served := b.GroupVersions()
	var candidates []string
	for gr, versions := range a.Resources {
		for _, v := range versions {
			gv := gr.Group + "/" + v
			if gr.Group != "" && strings.Contains(v, "beta") && !served[gv] {
				candidates = append(candidates, gv+" "+gr.Resource)
			}
		}
	}
	if len(candidates) == 0 {
		return "", ""
	}
	sort.Strings(candidates)
	gv, resource, _ = strings.Cut(candidates[0], " ")
	return gv, resource
}

// TestOperator_UpgradeWaitsForClientsOfRemovedAPIs: a client keeps calling
// a beta API that the target minor no longer serves. The upgrade is held:
// status names the API and the count (as the running apiserver counted
// it), the apiserver keeps running the old version; once the client stops,
// the upgrade goes ahead after the quiet period (30 s in this suite), and
// not before.
func TestOperator_UpgradeWaitsForClientsOfRemovedAPIs(t *testing.T) {
	// Mostly waiting for the quiet period: it runs beside the other such
	// tests (kstatus_test.go, sizing_test.go) once the sequential ones,
	// which count failed requests, are done.
	t.Parallel()
	from, to := upgradeVersions(t)
	gv, resource := removedBetaAPI(t, from, to)
	if gv == "" {
		t.Skipf("no beta API of %s is gone in %s: the pre-flight's decision is unit-tested (apiserver.RemovedBy)", from, to)
	}
	c, cfg, tenant := startTenant(t, "preflight", func(cfg *v1alpha1.ApiServerConfig) {
		cfg.Spec.Version = from
		cfg.Spec.RuntimeConfig = map[string]string{gv: "true"}
	})
	ctx := context.Background()
	path := "/apis/" + gv + "/" + resource
	caller := startClientLoop(func(ctx context.Context) error {
		_, err := tenant.Discovery().RESTClient().Get().AbsPath(path).DoRaw(ctx)
		return err
	}, time.Second)
	time.Sleep(3 * time.Second)

	// The upgrade (and the runtime-config the target refuses).
	managementKubectl(t, "-n", cfg.Namespace, "patch", "asc/"+cfg.Name, "--type=merge", "-p",
		fmt.Sprintf(`{"spec":{"version":%q,"runtimeConfig":null}}`, to))
	want := fmt.Sprintf("upgrade %s → %s held: clients called APIs that %s no longer serves: %s/%s (removed in ", from, to, to, gv, resource)
	var held *metav1.Condition
	deadline := time.Now().Add(2 * time.Minute)
	for held == nil && time.Now().Before(deadline) {
		got := &v1alpha1.ApiServerConfig{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(cfg), got); err == nil && got.Status.ObservedGeneration == got.Generation {
			if d := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionDegraded); d != nil && strings.Contains(d.Message, want) {
				held = d
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if held == nil {
		t.Fatalf("the upgrade was not held within 2 minutes with Degraded saying %q", want)
	}
	t.Logf("Held: %s: %s", held.Reason, held.Message)
	for pod, v := range endpointVersions(t, c, cfg, tenantRESTConfig(t, c, cfg)) {
		if v != from {
			t.Fatalf("while the upgrade is held, pod %s answers %s, want %s", pod, v, from)
		}
	}

	// The client stops calling; the upgrade waits the quiet period, then goes.
	caller.finish(t, "calls to "+path+" before the upgrade")
	stopped := time.Now()
	var started time.Time
	deadline = time.Now().Add(4 * time.Minute)
	for time.Now().Before(deadline) {
		d := &appsv1.Deployment{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.DeploymentName(cfg.Name)}, d); err == nil &&
			d.Spec.Template.Annotations[apiserver.VersionAnnotation] == to {
			started = time.Now()
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if started.IsZero() {
		t.Fatal("the upgrade did not start within 4 minutes of the last call")
	}
	if waited := started.Sub(stopped); waited < 25*time.Second {
		t.Errorf("the upgrade started %s after the last call, within the 30 s quiet period", waited.Round(time.Second))
	}
	t.Logf("the upgrade started %s after the last call", started.Sub(stopped).Round(time.Second))
	waitReady(t, c, cfg, 3*time.Minute)
	got := &v1alpha1.ApiServerConfig{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cfg), got); err != nil || got.Status.Version != to {
		t.Fatalf("after the held upgrade: status.version %q (%v), want %s", got.Status.Version, err, to)
	}
}

// tenantRESTConfig is the admin configuration of tenantClient.
func tenantRESTConfig(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig) *rest.Config {
	t.Helper()
	_, rc := tenantClient(t, c, cfg)
	return rc
}
