//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

const (
	operatorNamespace = "apiserver-operator-system"
	leaseName         = "apiserver-operator.controlplane.apiserver-operator.dev"
)

// leaderPod is the pod that holds the operator's leader election lease.
func leaderPod(t testing.TB, c client.Client) string {
	t.Helper()
	for range 60 {
		lease := &coordinationv1.Lease{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: operatorNamespace, Name: leaseName}, lease); err == nil && lease.Spec.HolderIdentity != nil {
			// controller-runtime's identity is <pod name>_<uuid>.
			if pod, _, ok := strings.Cut(*lease.Spec.HolderIdentity, "_"); ok && pod != "" {
				return pod
			}
		}
		time.Sleep(time.Second)
	}
	t.Fatal("no operator pod holds the leader election lease")
	return ""
}

// killControllers sends SIGKILL to the reconciling manager process (the
// one that runs --leader-elect) of pod, found by its host name.
func killControllers(t testing.TB, pod string) {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.HasPrefix(string(cmdline), "/manager\x00") || !strings.Contains(string(cmdline), "--leader-elect") {
			continue
		}
		environ, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !strings.Contains("\x00"+string(environ)+"\x00", "\x00HOSTNAME="+pod+"\x00") {
			continue
		}
		pid, _ := strconv.Atoi(e.Name())
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("killing the manager of %s (PID %d): %v", pod, pid, err)
		}
		return
	}
	t.Fatalf("no manager process of pod %s found", pod)
}

// waitOperatorReady waits until both operator pods are Ready again.
func waitOperatorReady(t testing.TB) {
	t.Helper()
	if out, err := run(t, nil, "kubectl", "-n", operatorNamespace, "rollout", "status", "deployment/apiserver-operator-controller-manager", "--timeout=180s"); err != nil {
		t.Fatalf("the operator did not come back: %v\n%s", err, out)
	}
	cs := clientset(t)
	for range 180 {
		pods, err := cs.CoreV1().Pods(operatorNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: "control-plane=controller-manager"})
		ready := 0
		if err == nil {
			for _, p := range pods.Items {
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
						ready++
					}
				}
			}
		}
		if ready >= 2 {
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatal("the operator's two pods were not Ready again within 3 minutes")
}

// Scenario 10: the operator's leader dies during a burst of ApiServerConfig
// updates, by SIGKILL and then by a forced deletion of its pod. Every
// update goes through the validating webhook, which both replicas serve:
// how many fail is the failover window a GitOps tool would hit. Another
// replica takes over the reconciling.
func TestOperator_LeaderLossFailsNoWrite(t *testing.T) {
	installOperator(t)
	c := ctrlClient(t)
	ns := tenantNamespace(t)
	// A hibernated tenant: its updates cost the webhook and the operator,
	// not the node.
	cfg := localTenant(t, ns, "failover")
	cfg.Spec.MasterCount = ptr.To[int32](0)
	// The writers' tenant: sixty writes a second on one object would
	// starve any other change of it (a patch whose admission takes longer
	// than the gap between two writes conflicts, and kube-apiserver runs
	// admission again, until the request times out), so the spec changes
	// the new leader must reconcile go to the other tenant.
	burst := localTenant(t, ns, "burst")
	burst.Spec.MasterCount = ptr.To[int32](0)
	for _, tenant := range []*v1alpha1.ApiServerConfig{cfg, burst} {
		if err := c.Create(context.Background(), tenant); err != nil {
			t.Fatal(err)
		}
	}
	waitReady(t, c, cfg, 2*time.Minute)

	// Several writers at once: kube-apiserver then keeps several
	// connections to the webhook Service, spread over both pods, as a busy
	// GitOps tool would (one writer reuses one connection, to one pod).
	var writers []*callLog
	for w := range 6 {
		n := 0
		writers = append(writers, startCallLog(func(ctx context.Context) error {
			n++
			patch := fmt.Appendf(nil, `{"metadata":{"labels":{"e2e-burst-%d":"%d"}}}`, w, n)
			return c.Patch(ctx, &v1alpha1.ApiServerConfig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: burst.Name}}, client.RawPatch("application/merge-patch+json", patch))
		}, 100*time.Millisecond, 10*time.Second))
	}
	finish := func() []call {
		var all []call
		for _, w := range writers {
			all = append(all, w.finish()...)
		}
		slices.SortFunc(all, func(a, b call) int { return a.at.Compare(b.at) })
		return all
	}
	finished := false
	defer func() {
		if !finished {
			finish()
		}
	}()

	time.Sleep(3 * time.Second)
	leader := leaderPod(t, c)
	killed := time.Now()
	killControllers(t, leader)
	t.Logf("SIGKILLed the manager of the leader %s", leader)
	waitOperatorReady(t)
	// A new leader reconciles: a change of the spec is observed.
	patchSpec(t, c, cfg, `{"spec":{"cacheSizing":{"targetRAMMB":150}}}`)
	waitReady(t, c, cfg, 2*time.Minute)

	time.Sleep(2 * time.Second)
	leader = leaderPod(t, c)
	deleted := time.Now()
	if out, err := run(t, nil, "kubectl", "-n", operatorNamespace, "delete", "pod", leader, "--grace-period=0", "--force"); err != nil {
		t.Fatalf("force-deleting %s: %v\n%s", leader, err, out)
	}
	t.Logf("Force-deleted the leader's pod %s", leader)
	waitOperatorReady(t)
	patchSpec(t, c, cfg, `{"spec":{"cacheSizing":{"targetRAMMB":200}}}`)
	waitReady(t, c, cfg, 2*time.Minute)
	time.Sleep(2 * time.Second)
	finished = true
	calls := finish()

	for _, phase := range []struct {
		what     string
		from, to time.Time
	}{
		{"after the leader's manager was SIGKILLed", killed, deleted},
		{"after the leader's pod was force-deleted", deleted, time.Now()},
	} {
		total, failed, lastErr := tally(calls, phase.from, phase.to)
		first, last := failureWindow(calls, phase.from, phase.to)
		t.Logf("%s: %d ApiServerConfig writes, %d failed (window %s)", phase.what, total, failed, last.Sub(first).Round(100*time.Millisecond))
		if total == 0 {
			t.Errorf("%s: no write was attempted", phase.what)
		}
		if failed > 0 {
			t.Errorf("%s: %d of %d ApiServerConfig writes failed (last: %v)", phase.what, failed, total, lastErr)
		}
	}
}

// patchSpec changes the spec with a merge patch: it needs no
// resourceVersion, so it does not conflict with a writer of labels.
func patchSpec(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, patch string) {
	t.Helper()
	obj := &v1alpha1.ApiServerConfig{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name}}
	if err := c.Patch(context.Background(), obj, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		t.Fatalf("patching the spec of %s/%s: %v", cfg.Namespace, cfg.Name, err)
	}
}

// failureWindow is when the first and the last failed call of [from, to)
// ended.
func failureWindow(calls []call, from, to time.Time) (first, last time.Time) {
	for _, c := range calls {
		if c.err == nil || c.at.Before(from) || !c.at.Before(to) {
			continue
		}
		if first.IsZero() {
			first = c.at
		}
		last = c.at
	}
	return first, last
}
