//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// kstatusTrack polls an ApiServerConfig, as a GitOps tool does, and
// records what kstatus (sigs.k8s.io/cli-utils, which Flux and Argo CD
// follow) computes for it, from before its creation on.
type kstatusTrack struct {
	mu   sync.Mutex
	seen []kstatusSeen
}

type kstatusSeen struct {
	status  kstatus.Status
	message string
	// stalled is the Stalled condition's reason when it is True.
	stalled string
}

func trackKstatus(t *testing.T, c client.Client, key client.ObjectKey) *kstatusTrack {
	t.Helper()
	tr := &kstatusTrack{}
	t.Cleanup(startPolling(200*time.Millisecond, func(ctx context.Context) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("ApiServerConfig"))
		if err := c.Get(ctx, key, u); err != nil {
			return
		}
		res, err := kstatus.Compute(u)
		if err != nil {
			return
		}
		s := kstatusSeen{status: res.Status, message: res.Message}
		for _, cond := range res.Conditions {
			if cond.Type == kstatus.ConditionStalled && cond.Status == corev1.ConditionTrue {
				s.stalled = cond.Reason
			}
		}
		tr.mu.Lock()
		tr.seen = append(tr.seen, s)
		tr.mu.Unlock()
	}))
	return tr
}

func (tr *kstatusTrack) last() (kstatusSeen, bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.seen) == 0 {
		return kstatusSeen{}, false
	}
	return tr.seen[len(tr.seen)-1], true
}

// count is how many computations were recorded so far.
func (tr *kstatusTrack) count() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.seen)
}

// path is the sequence of statuses computed, each once in a row.
func (tr *kstatusTrack) path() []string { return tr.pathFrom(0) }

// pathFrom is path from the from-th computation on.
func (tr *kstatusTrack) pathFrom(from int) []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []string
	for _, s := range tr.seen[from:] {
		if len(out) == 0 || out[len(out)-1] != s.status.String() {
			out = append(out, s.status.String())
		}
	}
	return out
}

// waitFor waits until kstatus computes want, and returns what it saw then.
func (tr *kstatusTrack) waitFor(t *testing.T, name string, want kstatus.Status, timeout time.Duration) kstatusSeen {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if s, ok := tr.last(); ok && s.status == want {
			return s
		}
		time.Sleep(250 * time.Millisecond)
	}
	s, _ := tr.last()
	t.Fatalf("%s: kstatus did not compute %s within %s: path %v, last %s: %s", name, want, timeout, tr.path(), s.status, s.message)
	return s
}

// TestOperator_GitOpsHealthFollowsTheTenant computes, as Flux and Argo CD
// do, the health of tenants through good and bad situations on the real
// cluster: InProgress from creation, Current only once the tenant serves,
// Failed for each environment failure once it lasted the grace period
// (--stall-after, 20 s in this suite), naming its cause, and Current again
// once the cause is fixed. The failures run side by side.
func TestOperator_GitOpsHealthFollowsTheTenant(t *testing.T) {
	// Mostly waiting for --stall-after: it runs beside the other such
	// tests (upgrade_test.go, sizing_test.go) once the sequential ones,
	// which count failed requests, are done.
	t.Parallel()
	installOperator(t)
	c := ctrlClient(t)
	ctx := context.Background()

	operator := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "apiserver-operator-system", Name: "apiserver-operator-controller-manager"}, operator); err != nil {
		t.Fatal(err)
	}
	// An image that exists on the node but has no kube-apiserver in it.
	notAnAPIServer := operator.Spec.Template.Spec.Containers[0].Image
	const nowhere = "e2e.apiserver-operator.dev/kstatus"

	cases := []struct {
		name string
		// breaks makes the spec meet the failure.
		breaks func(cfg *v1alpha1.ApiServerConfig)
		reason string
		says   string
		// fix removes the cause: in the environment where it lies there,
		// in the spec otherwise.
		fix func(t *testing.T, cfg *v1alpha1.ApiServerConfig)
	}{{
		name:   "etcd unreachable",
		breaks: func(cfg *v1alpha1.ApiServerConfig) { cfg.Spec.Etcd.Servers = []string{"https://10.77.0.2:1"} },
		reason: v1alpha1.ReasonEtcdUnreachable, says: "https://10.77.0.2:1",
		fix: func(t *testing.T, cfg *v1alpha1.ApiServerConfig) {
			updateSpec(t, c, cfg, func(s *v1alpha1.ApiServerConfigSpec) { s.Etcd.Servers = localTenant(t, "x", "x").Spec.Etcd.Servers })
		},
	}, {
		name:   "etcd client Secret missing",
		breaks: func(cfg *v1alpha1.ApiServerConfig) { cfg.Spec.Etcd.TLS.SecretName = "etcd-client-late" },
		reason: v1alpha1.ReasonReferenceMissing, says: "etcd-client-late named by spec.etcd.tls.secretName does not exist",
		fix: func(t *testing.T, cfg *v1alpha1.ApiServerConfig) {
			s := &corev1.Secret{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: cluster.TenantEtcd().SecretName}, s); err != nil {
				t.Fatal(err)
			}
			late := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: "etcd-client-late"}, Type: s.Type, Data: s.Data}
			if err := c.Create(ctx, late); err != nil {
				t.Fatal(err)
			}
		},
	}, {
		name:   "apiserver pod unschedulable",
		breaks: func(cfg *v1alpha1.ApiServerConfig) { cfg.Spec.NodeSelector = map[string]string{nowhere: "yes"} },
		reason: v1alpha1.ReasonPodUnschedulable, says: "cannot be scheduled: 0/1 nodes are available",
		fix: func(t *testing.T, _ *v1alpha1.ApiServerConfig) {
			// The node gets the label the spec asks for.
			managementKubectl(t, "label", "nodes", "--all", nowhere+"=yes", "--overwrite")
			t.Cleanup(func() { managementKubectl(t, "label", "nodes", "--all", nowhere+"-") })
		},
	}, {
		name: "image not pullable",
		breaks: func(cfg *v1alpha1.ApiServerConfig) {
			cfg.Spec.Image = "localhost/apiserver-operator/no-such-image:v1.37.1"
		},
		reason: v1alpha1.ReasonImagePullFailed, says: "cannot pull image localhost/apiserver-operator/no-such-image:v1.37.1",
		fix: func(t *testing.T, cfg *v1alpha1.ApiServerConfig) {
			updateSpec(t, c, cfg, func(s *v1alpha1.ApiServerConfigSpec) { s.Image = "" })
		},
	}, {
		name:   "apiserver container cannot stay up",
		breaks: func(cfg *v1alpha1.ApiServerConfig) { cfg.Spec.Image = notAnAPIServer },
		reason: v1alpha1.ReasonCrashLoop, says: "container kube-apiserver is in",
		fix: func(t *testing.T, cfg *v1alpha1.ApiServerConfig) {
			updateSpec(t, c, cfg, func(s *v1alpha1.ApiServerConfigSpec) { s.Image = "" })
		},
	}}

	start := time.Now()
	t.Run("group", func(t *testing.T) {
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				cfg := localTenant(t, tenantNamespace(t), fmt.Sprintf("health-%d", i))
				tc.breaks(cfg)
				tr := trackKstatus(t, c, client.ObjectKeyFromObject(cfg))
				if err := c.Create(ctx, cfg); err != nil {
					t.Fatal(err)
				}
				failed := tr.waitFor(t, "after creation", kstatus.FailedStatus, 3*time.Minute)
				if failed.stalled != tc.reason || !strings.Contains(failed.message, tc.says) {
					t.Fatalf("Failed with Stalled %s: %q; want %s saying %q", failed.stalled, failed.message, tc.reason, tc.says)
				}
				if p := tr.path(); p[0] != kstatus.InProgressStatus.String() || strings.Contains(strings.Join(p, " "), kstatus.CurrentStatus.String()) {
					t.Fatalf("kstatus went %v before the fix: want InProgress first and never Current", p)
				}
				t.Logf("Failed after %s: %s", time.Since(start).Round(time.Second), failed.message)

				fixedAt := tr.count()
				tc.fix(t, cfg)
				tr.waitFor(t, "after the fix", kstatus.CurrentStatus, 4*time.Minute)
				// Once the fix is seen, health only improves: a pod of the
				// broken template that the rollout is replacing is no
				// failure.
				if p := tr.pathFrom(fixedAt); strings.Contains(strings.Join(p[slices.Index(p, kstatus.InProgressStatus.String())+1:], " "), kstatus.FailedStatus.String()) {
					t.Fatalf("kstatus went %v after the fix: Failed again after InProgress", p)
				}
				// Current means serving: the tenant answers.
				tenant, _ := tenantClient(t, c, cfg)
				waitReachable(t, tenant)
				t.Logf("Current after the fix; kstatus went %v", tr.path())
			})
		}
		t.Run("healthy", func(t *testing.T) {
			t.Parallel()
			cfg := localTenant(t, tenantNamespace(t), "health-ok")
			tr := trackKstatus(t, c, client.ObjectKeyFromObject(cfg))
			if err := c.Create(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			tr.waitFor(t, "after creation", kstatus.CurrentStatus, 4*time.Minute)
			tenant, _ := tenantClient(t, c, cfg)
			waitReachable(t, tenant)
			if p := tr.path(); p[0] != kstatus.InProgressStatus.String() {
				t.Fatalf("kstatus went %v: want InProgress first", p)
			}
			// Hibernation is Current only once no apiserver pod is left.
			updateSpec(t, c, cfg, func(s *v1alpha1.ApiServerConfigSpec) { s.MasterCount = ptrTo[int32](0) })
			tr.waitFor(t, "hibernating", kstatus.InProgressStatus, time.Minute)
			tr.waitFor(t, "hibernated", kstatus.CurrentStatus, 2*time.Minute)
			pods := &corev1.PodList{}
			if err := c.List(ctx, pods, client.InNamespace(cfg.Namespace)); err != nil {
				t.Fatal(err)
			}
			if len(pods.Items) != 0 {
				t.Fatalf("Current while hibernating, but %d apiserver pods are left", len(pods.Items))
			}
			got := &v1alpha1.ApiServerConfig{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(cfg), got); err != nil {
				t.Fatal(err)
			}
			if r := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); r == nil || r.Reason != v1alpha1.ReasonHibernated {
				t.Fatalf("Ready is %v, want Hibernated", r)
			}
		})
	})
}

// updateSpec changes cfg's spec, retrying on conflicts.
func updateSpec(t *testing.T, c client.Client, cfg *v1alpha1.ApiServerConfig, change func(*v1alpha1.ApiServerConfigSpec)) {
	t.Helper()
	var err error
	for range 10 {
		got := &v1alpha1.ApiServerConfig{}
		if err = c.Get(context.Background(), client.ObjectKeyFromObject(cfg), got); err != nil {
			break
		}
		change(&got.Spec)
		if err = c.Update(context.Background(), got); !apierrors.IsConflict(err) {
			break
		}
	}
	if err != nil {
		t.Fatalf("changing the spec of %s/%s: %v", cfg.Namespace, cfg.Name, err)
	}
}
