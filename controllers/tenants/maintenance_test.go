package tenants

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/rotation"
)

// TestApiServerConfigReconciler_WorkTheOperatorStartsWaitsForAMaintenanceWindow:
// with a test clock, outside the tenant's window a rotation due by age, the
// renewal of the certificates kube-apiserver reads only at start, an
// automatic resize and a pod template that only the operator's settings
// changed all wait, and status says so and when the window opens; in the
// window all are done; a requested rotation does not wait.
func TestApiServerConfigReconciler_WorkTheOperatorStartsWaitsForAMaintenanceWindow(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	prefix := "/tenants/" + ns + "/windowed"
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{env.ControlPlane.Etcd.URL.String()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	nodes := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if _, err := cli.Put(ctx, fmt.Sprintf("%s/minions/n%05d", prefix, i), "x"); err != nil {
				t.Fatal(err)
			}
		}
	}
	nodes(0, 1000)

	// Thursday 10:00 UTC; the window opens every day at 02:00 for an hour.
	clock := clocktesting.NewFakeClock(time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC))
	cfg := tenant(ns, "windowed", func(s *v1alpha1.ApiServerConfigSpec) {
		s.CacheSizing.Policy = v1alpha1.CacheSizingAuto
		s.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Gi")}
		s.Certificates.ServiceAccountKeyRotationPeriod = &metav1.Duration{Duration: 24 * time.Hour}
		s.Certificates.RotationOverlap = &metav1.Duration{Duration: time.Second}
		s.Maintenance = &v1alpha1.MaintenanceSpec{Windows: []v1alpha1.MaintenanceWindow{{Start: "02:00", Duration: metav1.Duration{Duration: time.Hour}}}}
	})
	// Only this test's reconciler, with its clock, takes it.
	cfg.Labels = map[string]string{apiserver.WatchFilterLabel: "maintenance"}
	cfg.Annotations = map[string]string{v1alpha1.AdoptDataAnnotation: prefix}
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Ownership: ownershipKey, Client: env.Client, APIReader: env.Client, Scheme: env.Scheme, Clock: clock, Reach: reconciler.Reach,
		ResizePolicy: reconciler.ResizePolicy, AutoSizingInterval: reconciler.AutoSizingInterval}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.DeploymentName(cfg.Name)}}
	// pass runs one pass a few seconds of the test clock after the last
	// (the sizing counts again after a second), then acts as the
	// Deployment controller.
	pass := func() ctrl.Result {
		t.Helper()
		clock.Step(3 * time.Second)
		res, err := r.Reconcile(ctx, reconcileRequest(cfg))
		if err != nil {
			t.Fatal(err)
		}
		if env.Client.Get(ctx, client.ObjectKeyFromObject(d), &appsv1.Deployment{}) == nil {
			actAsDeploymentController(t, d)
		}
		return res
	}
	current := func() (*v1alpha1.ApiServerConfig, *appsv1.Deployment) {
		return get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta}), get(t, &appsv1.Deployment{ObjectMeta: d.ObjectMeta})
	}
	dialerImage := func(d *appsv1.Deployment) string { return d.Spec.Template.Spec.InitContainers[0].Image }
	inflight := func(d *appsv1.Deployment) string { return strings.Join(argValues(d, "max-requests-inflight"), ",") }

	// A new tenant's first sizing and first rotation state do not wait.
	for i := 0; ; i++ {
		pass()
		c, dep := current()
		if inflight(dep) == "690" && rotationPhase(t, c, rotation.ServiceAccountKey.Name) == "Stable" && rotationPhase(t, c, rotation.EncryptionKey.Name) == "Stable" && rolloutDone(dep) {
			break
		}
		if i == 20 {
			t.Fatalf("the tenant did not settle in 20 passes: --max-requests-inflight %s, rotations %v", inflight(dep), c.Status.Rotations)
		}
	}
	pass()
	c, before := current()
	if m := c.Status.Maintenance; m == nil || m.Open || !m.NextWindow.Equal(&metav1.Time{Time: time.Date(2026, 11, 27, 2, 0, 0, 0, time.UTC)}) || len(m.Pending) != 0 {
		t.Fatalf("status.maintenance of a settled tenant outside its window is %+v, want the window of tomorrow 02:00 UTC and nothing pending", m)
	}

	kubeletClient := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.KubeletClientSecretName(cfg.Name)}}
	kubeletCert := string(get(t, kubeletClient).Data[corev1.TLSCertKey])

	// 300 days later: the service-account key is due, so is the renewal of
	// the year-long client certificates kube-apiserver reads only at start
	// (at 80%), the cluster grew by 55%, and the operator runs with a
	// mirror of the dialer.
	clock.Step(300 * 24 * time.Hour)
	nodes(1000, 1550)
	r.EtcdDialerImage = "registry.example.com/mirror/etcd-dialer:" + apiserver.EtcdDialerVersion
	res := pass()
	pass()
	c, after := current()
	if got := storedPhase(t, cfg, rotation.ServiceAccountKey.Name); got != "Stable" {
		t.Errorf("the key due by age started rotating outside the window: phase %s", got)
	}
	if inflight(after) != inflight(before) || dialerImage(after) != dialerImage(before) || after.Generation != before.Generation {
		t.Errorf("the Deployment changed outside the window: inflight %s, dialer %s (was %s, %s)", inflight(after), dialerImage(after), inflight(before), dialerImage(before))
	}
	if got := string(get(t, kubeletClient).Data[corev1.TLSCertKey]); got != kubeletCert {
		t.Error("the kubelet client certificate was renewed outside the window")
	}
	now := clock.Now()
	window := time.Date(now.Year(), now.Month(), now.Day()+1, 2, 0, 0, 0, time.UTC)
	m := c.Status.Maintenance
	if m == nil || m.Open || !m.NextWindow.Equal(&metav1.Time{Time: window}) {
		t.Fatalf("status.maintenance is %+v, want the window of %s", m, window)
	}
	for _, want := range []string{"the service-account-key rotation, due since", "a cache resize for 1550 nodes", "the pod template of the operator's current release and settings",
		"the renewal of the kubelet-client certificate", "the renewal of the front-proxy-client certificate"} {
		if !slices.ContainsFunc(m.Pending, func(p string) bool { return strings.HasPrefix(p, want) }) {
			t.Errorf("status.maintenance.pending lacks %q: %q", want, m.Pending)
		}
	}
	if until := window.Sub(clock.Now()); res.RequeueAfter <= 0 || res.RequeueAfter > until {
		t.Errorf("the pass comes back in %s, want by the window's opening in %s", res.RequeueAfter, until)
	}

	// In the window, all three are done.
	clock.SetTime(window.Add(30 * time.Second))
	for i := 0; ; i++ {
		pass()
		c, dep := current()
		m := c.Status.Maintenance
		renewed := string(get(t, kubeletClient).Data[corev1.TLSCertKey]) != kubeletCert
		if inflight(dep) == "1010" && dialerImage(dep) == r.EtcdDialerImage && storedPhase(t, cfg, rotation.ServiceAccountKey.Name) != "Stable" && renewed && m != nil && m.Open && len(m.Pending) == 0 {
			break
		}
		if i == 10 {
			t.Fatalf("in the window: --max-requests-inflight %s, dialer %s, key rotation %s, status.maintenance %+v", inflight(dep), dialerImage(dep), storedPhase(t, cfg, rotation.ServiceAccountKey.Name), m)
		}
	}

	// Outside it, a rotation asked for by its annotation starts at once,
	// and takes along the operator's new template rather than wait behind
	// it: one roll, not two.
	clock.SetTime(window.Add(3 * time.Hour))
	for i := 0; rotationPhase(t, get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta}), rotation.ServiceAccountKey.Name) != "Stable"; i++ {
		if i == 10 {
			t.Fatal("the service-account key's rotation did not end in 10 passes")
		}
		pass()
	}
	r.EtcdDialerImage = "registry.example.com/another-mirror/etcd-dialer:" + apiserver.EtcdDialerVersion
	pass()
	if _, dep := current(); dialerImage(dep) == r.EtcdDialerImage {
		t.Fatal("the operator's new template was applied outside the window")
	}
	annotate(t, cfg, v1alpha1.RotateCAAnnotation, "now")
	pass()
	pass()
	if got := storedPhase(t, cfg, rotation.CA.Name); got != "TrustNew" {
		t.Errorf("a requested CA rotation outside the window is in phase %q, want TrustNew", got)
	}
	if _, dep := current(); dialerImage(dep) != r.EtcdDialerImage {
		t.Errorf("the requested rotation's roll did not take the operator's template along: dialer %s", dialerImage(dep))
	}
}
