package tenants

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio/tenantiofake"
)

// statusWatch records what GitOps tools compute (kstatus) for one
// ApiServerConfig at every change the API server reports, from before its
// creation on.
type statusWatch struct {
	mu   sync.Mutex
	seen []observed
	stop func()
}

type observed struct {
	generation int64
	status     kstatus.Status
	message    string
	ready      *metav1.Condition
}

func watchStatus(t *testing.T, ns, name string) *statusWatch {
	t.Helper()
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("ApiServerConfigList"))
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(context.Background(), list, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	sw := &statusWatch{stop: w.Stop}
	go func() {
		for ev := range w.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok || u.GetName() != name || ev.Type == watch.Deleted {
				continue
			}
			res, err := kstatus.Compute(u)
			if err != nil {
				continue
			}
			cfg := &v1alpha1.ApiServerConfig{}
			_ = runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, cfg)
			sw.mu.Lock()
			sw.seen = append(sw.seen, observed{generation: u.GetGeneration(), status: res.Status, message: res.Message, ready: conditionOf(cfg, v1alpha1.ConditionReady)})
			sw.mu.Unlock()
		}
	}()
	t.Cleanup(w.Stop)
	return sw
}

func (sw *statusWatch) all() []observed {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return append([]observed(nil), sw.seen...)
}

// waitFor waits for kstatus to compute want, and returns its message.
func (sw *statusWatch) waitFor(t *testing.T, timeout time.Duration, want kstatus.Status) string {
	t.Helper()
	var msg string
	eventually(t, timeout, "kstatus computes "+want.String(), func() error {
		all := sw.all()
		if len(all) == 0 {
			return fmt.Errorf("nothing seen yet")
		}
		last := all[len(all)-1]
		if last.status != want {
			return fmt.Errorf("kstatus is %s: %s", last.status, last.message)
		}
		msg = last.message
		return nil
	})
	return msg
}

func kstatusStatuses(seen []observed) []string {
	var out []string
	for _, o := range seen {
		if len(out) == 0 || out[len(out)-1] != o.status.String() {
			out = append(out, o.status.String())
		}
	}
	return out
}

func TestApiServerConfigReconciler_MissingSecretStallsUntilItIsCreated(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "nosecret", func(s *v1alpha1.ApiServerConfigSpec) {
		s.Audit.PolicyConfigMapName = "audit-policy"
	})
	sw := watchStatus(t, ns, cfg.Name)
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	msg := sw.waitFor(t, 30*time.Second, kstatus.FailedStatus)
	if !strings.Contains(msg, "ConfigMap "+ns+"/audit-policy named by spec.audit.policyConfigMapName does not exist") {
		t.Fatalf("Stalled says %q, want it to name the missing ConfigMap and the field", msg)
	}
	got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
	if c := conditionOf(got, v1alpha1.ConditionStalled); c == nil || c.Reason != v1alpha1.ReasonReferenceMissing {
		t.Fatalf("Stalled is %v, want reason %s", c, v1alpha1.ReasonReferenceMissing)
	}
	// Never healthy before it serves: in progress from its creation on.
	if seen := kstatusStatuses(sw.all()); seen[0] != kstatus.InProgressStatus.String() {
		t.Fatalf("kstatus went %v, want InProgress first", seen)
	}

	// A ConfigMap without the key is still missing something, and says so.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "audit-policy"}, Data: map[string]string{"other.yaml": "x"}}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the missing key is named", func() error {
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		if c := conditionOf(got, v1alpha1.ConditionDegraded); c == nil || !strings.Contains(c.Message, "has no key policy.yaml") {
			return fmt.Errorf("Degraded is %v", c)
		}
		return nil
	})

	// Fixing it is noticed at once (the operator watches what specs name),
	// well before any retry would come: the tenant goes on, and its
	// Deployment appears.
	cm.Data = map[string]string{"policy.yaml": "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"}
	if err := env.Client.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	d := waitForDeployment(t, cfg)
	sw.waitFor(t, 20*time.Second, kstatus.InProgressStatus)
	got = get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
	if c := conditionOf(got, v1alpha1.ConditionStalled); c == nil || c.Status != metav1.ConditionFalse {
		t.Fatalf("Stalled is %v once the ConfigMap exists", c)
	}
	actAsDeploymentController(t, d)
	sw.waitFor(t, 20*time.Second, kstatus.CurrentStatus)
	for _, o := range sw.all() {
		if o.status == kstatus.CurrentStatus && (o.ready == nil || o.ready.Status != metav1.ConditionTrue) {
			t.Fatalf("kstatus computed Current while Ready was %v", o.ready)
		}
	}
}

func TestApiServerConfigReconciler_UnreachableEtcdStallsAfterTheGracePeriod(t *testing.T) {
	ns := namespace(t, nil)
	cfg := tenant(ns, "etcddown", func(s *v1alpha1.ApiServerConfigSpec) {
		s.Etcd.Servers = []string{"http://127.0.0.1:1"}
	})
	sw := watchStatus(t, ns, cfg.Name)
	if err := env.Client.Create(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	msg := sw.waitFor(t, 40*time.Second, kstatus.FailedStatus)
	if !strings.Contains(msg, "http://127.0.0.1:1") {
		t.Fatalf("Stalled says %q, want the endpoint", msg)
	}
	seen := kstatusStatuses(sw.all())
	if seen[0] != kstatus.InProgressStatus.String() || strings.Contains(strings.Join(seen, ","), kstatus.CurrentStatus.String()) {
		t.Fatalf("kstatus went %v: want InProgress, then Failed, never Current", seen)
	}
	// Nothing starts before its etcd answers (the operator must see that
	// the tenant's prefix holds nothing foreign first): no Deployment.
	d := &appsv1.Deployment{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: apiserver.DeploymentName(cfg.Name)}, d); !apierrors.IsNotFound(err) {
		t.Fatalf("a tenant whose etcd never answered has a Deployment (%v)", err)
	}

	// A spec that points at a working etcd clears it, and it starts.
	updateTenant(t, cfg, func(s *v1alpha1.ApiServerConfigSpec) { s.Etcd.Servers = []string{env.ControlPlane.Etcd.URL.String()} })
	sw.waitFor(t, 20*time.Second, kstatus.InProgressStatus)
	waitForDeployment(t, cfg)
}

func TestApiServerConfigReconciler_UnschedulablePodStallsAndClears(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "pending", nil)
	createReady(t, cfg)
	sw := watchStatus(t, ns, cfg.Name)

	scaleToTwoWithOneReady(t, cfg)
	pod := createAPIServerPod(t, cfg, "pending-apiserver-x")
	const why = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
	unschedulable(t, pod, why)
	msg := sw.waitFor(t, 30*time.Second, kstatus.FailedStatus)
	if !strings.Contains(msg, "Pod pending-apiserver-x cannot be scheduled: "+why) {
		t.Fatalf("Stalled says %q, want the pod and the scheduler's message", msg)
	}
	got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
	if c := conditionOf(got, v1alpha1.ConditionAvailable); c == nil || c.Status != metav1.ConditionTrue || c.Message != "1 of 2 apiservers ready" {
		t.Fatalf("Available is %v, want True with 1 of 2 ready", c)
	}

	// The pod goes away (the user relaxed the node selector and the
	// Deployment controller replaced it): the stall clears by itself.
	if err := env.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	actAsDeploymentController(t, waitForDeployment(t, cfg))
	sw.waitFor(t, 20*time.Second, kstatus.CurrentStatus)
}

func TestApiServerConfigReconciler_HibernatedOnlyOnceNoPodIsLeft(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "sleepy", nil)
	createReady(t, cfg)
	// The apiserver pod, as the Deployment controller would have made it.
	pod := createAPIServerPod(t, cfg, "sleepy-apiserver-x")
	sw := watchStatus(t, ns, cfg.Name)
	updateTenant(t, cfg, func(s *v1alpha1.ApiServerConfigSpec) { s.MasterCount = ptr.To[int32](0) })
	d := waitForDeployment(t, cfg)
	actAsDeploymentController(t, d)
	// The pass after the Deployment's scale-down has run: it saw the pod.
	eventually(t, 20*time.Second, "hibernation waits for the pod", func() error {
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		r := conditionOf(got, v1alpha1.ConditionReady)
		if got.Status.ObservedGeneration != got.Generation || r == nil || !strings.Contains(r.Message, "hibernating: 1 apiserver pods still running") {
			return fmt.Errorf("Ready is %v", r)
		}
		return nil
	})
	for _, o := range sw.all() {
		if o.ready != nil && o.ready.Reason == v1alpha1.ReasonHibernated {
			t.Fatalf("Ready was %s/Hibernated while an apiserver pod was left", o.ready.Status)
		}
	}
	if err := env.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	sw.waitFor(t, 20*time.Second, kstatus.CurrentStatus)
	got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
	if r := conditionOf(got, v1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionTrue || r.Reason != v1alpha1.ReasonHibernated {
		t.Fatalf("Ready is %v, want True/Hibernated", r)
	}
}

func TestApiServerConfigReconciler_ANewGenerationIsReconcilingBeforeSlowSteps(t *testing.T) {
	ns := namespace(t, nil)
	cfg := tenant(ns, "gen", nil)
	createReady(t, cfg)
	sw := watchStatus(t, ns, cfg.Name)
	// The new generation's pass waits on an etcd that does not answer
	// (about 2 s): Ready must not go on claiming the previous generation
	// meanwhile (kubectl wait --for=condition=Ready reads only Ready).
	updateTenant(t, cfg, func(s *v1alpha1.ApiServerConfigSpec) {
		s.Etcd.Overrides = []v1alpha1.EtcdOverride{{Resource: "events", Servers: []string{"http://127.0.0.1:1"}}}
	})
	eventually(t, 20*time.Second, "Ready says etcd is unreachable", func() error {
		all := sw.all()
		if len(all) == 0 || all[len(all)-1].ready == nil || all[len(all)-1].ready.Reason != v1alpha1.ReasonEtcdUnreachable {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
	marked := false
	for _, o := range sw.all() {
		r := o.ready
		if o.generation != got.Generation || r == nil {
			continue
		}
		if r.Reason == v1alpha1.ReasonEtcdUnreachable {
			break
		}
		if r.Status == metav1.ConditionFalse && r.ObservedGeneration == got.Generation && r.Reason == v1alpha1.ReasonProgressing {
			marked = true
			if o.status != kstatus.InProgressStatus {
				t.Fatalf("kstatus %s while the new generation is reconciled", o.status)
			}
		}
	}
	if !marked {
		t.Fatalf("Ready went from the previous generation's to EtcdUnreachable without saying the new generation was being reconciled: %+v", sw.all())
	}
}

// updateTenant changes cfg's spec.
func updateTenant(t *testing.T, cfg *v1alpha1.ApiServerConfig, change func(*v1alpha1.ApiServerConfigSpec)) {
	t.Helper()
	// As kubectl edit does: again on a conflict with a status write.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		change(&got.Spec)
		return env.Client.Update(context.Background(), got)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// scaleToTwoWithOneReady scales cfg to 2 apiservers, and writes what the
// Deployment controller would: the new generation observed, one of two
// pods ready (the second cannot be scheduled: envtest has no scheduler).
func scaleToTwoWithOneReady(t *testing.T, cfg *v1alpha1.ApiServerConfig) {
	t.Helper()
	updateTenant(t, cfg, func(s *v1alpha1.ApiServerConfigSpec) { s.MasterCount = ptr.To[int32](2) })
	d := waitForDeployment(t, cfg)
	eventually(t, 10*time.Second, "the Deployment status says 1 of 2", func() error {
		current := get(t, &appsv1.Deployment{ObjectMeta: d.ObjectMeta})
		if *current.Spec.Replicas != 2 {
			return fmt.Errorf("%d replicas", *current.Spec.Replicas)
		}
		current.Status = appsv1.DeploymentStatus{ObservedGeneration: current.Generation, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 1, AvailableReplicas: 1}
		return env.Client.Status().Update(context.Background(), current)
	})
}

// unschedulable writes what kube-scheduler would of pod: it cannot be
// scheduled, for why.
func unschedulable(t *testing.T, pod *corev1.Pod, why string) {
	t.Helper()
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: why, LastTransitionTime: metav1.Now()}}
	if err := env.Client.Status().Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
}

// createAPIServerPod creates a pod of cfg's apiservers, as the Deployment
// controller would (envtest runs none).
func createAPIServerPod(t *testing.T, cfg *v1alpha1.ApiServerConfig, name string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: name, Labels: apiserver.SelectorLabels(cfg.Name),
			OwnerReferences: apiserverReplicaSet(t, cfg)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-apiserver", Image: "k"}}},
	}
	if err := env.Client.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

// apiserverReplicaSet is the controller reference of a ReplicaSet of cfg's
// Deployment, which it makes as the Deployment controller would (envtest
// runs none) when there is none yet: the pods the operator reads are those
// of its Deployment's ReplicaSets.
func apiserverReplicaSet(t *testing.T, cfg *v1alpha1.ApiServerConfig) []metav1.OwnerReference {
	t.Helper()
	ctx := context.Background()
	d := waitForDeployment(t, cfg)
	labels := apiserver.SelectorLabels(cfg.Name)
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: d.Name + "-test", Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
		Spec: appsv1.ReplicaSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-apiserver", Image: "k"}}}},
		},
	}
	if err := env.Client.Create(ctx, rs); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	rs = get(t, rs)
	return []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}
}

// heldEtcd is an etcd whose status check answers only when the test says.
type heldEtcd struct {
	entered chan struct{}
	once    sync.Once
	release chan struct{}
}

func (e *heldEtcd) Check(ctx context.Context, _ []string, _ *tls.Config) error {
	e.once.Do(func() { close(e.entered) })
	select {
	case <-e.release:
	case <-ctx.Done():
	}
	return fmt.Errorf("etcd did not answer")
}

func (e *heldEtcd) Count(context.Context, []string, *tls.Config, ...string) ([]int64, error) {
	return nil, fmt.Errorf("etcd did not answer")
}

func (e *heldEtcd) Scan(context.Context, []string, *tls.Config, string, func(key, value []byte)) error {
	return fmt.Errorf("etcd did not answer")
}

func (e *heldEtcd) Delete(context.Context, []string, *tls.Config, string) (int64, error) {
	return 0, fmt.Errorf("etcd did not answer")
}

func TestApiServerConfigReconciler_ANewTenantSaysReconcilingWhileItsEtcdDoesNotAnswer(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "first", nil)
	// Only this test's reconciler takes it: the manager's takes only
	// tenants without a watch filter.
	cfg.Labels = map[string]string{apiserver.WatchFilterLabel: "status-first"}
	etcd := &heldEtcd{entered: make(chan struct{}), release: make(chan struct{})}
	r := &Reconciler{Ownership: ownershipKey, Client: env.Client, APIReader: env.Client, Scheme: env.Scheme, Clock: clock.RealClock{}, Reach: &tenantiofake.Reach{Etcd: etcd}}
	created := time.Now()
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.Reconcile(ctx, reconcileRequest(cfg))
		done <- err
	}()
	select {
	case <-etcd.entered:
	case err := <-done:
		t.Fatalf("the first pass ended without checking etcd: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the first pass never checked etcd")
	}
	// The etcd check is under way, and answers only once the test saw the
	// mark (or gave up).
	var got *v1alpha1.ApiServerConfig
	eventually(t, 10*time.Second, "status says the tenant is reconciled while its etcd does not answer", func() error {
		got = get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		if got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("status.observedGeneration is %d, want %d", got.Status.ObservedGeneration, got.Generation)
		}
		if c := conditionOf(got, v1alpha1.ConditionReconciling); c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != got.Generation {
			return fmt.Errorf("Reconciling is %v, want True for generation %d", c, got.Generation)
		}
		return nil
	})
	waited := time.Since(created)
	close(etcd.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if res := kstatusOf(t, got); res.Status != kstatus.InProgressStatus {
		t.Fatalf("while etcd is checked, kstatus computes %s (%s), want InProgress", res.Status, res.Message)
	}
	// The pass's own status follows the mark.
	final := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
	if r := conditionOf(final, v1alpha1.ConditionReady); r == nil || r.Reason != v1alpha1.ReasonEtcdUnreachable {
		t.Fatalf("after the pass Ready is %v, want EtcdUnreachable", r)
	}
	t.Logf("Status said Reconciling while the first etcd check waited, at most %s after creation", waited.Round(time.Millisecond))
}
