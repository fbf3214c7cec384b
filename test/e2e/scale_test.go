//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// Scenario 3: a HorizontalPodAutoscaler on the tenant (the sample in
// config/samples, on metrics-server's resource metrics) scales it 1 -> 3
// under load and back to 1 once the load stops, while clients call the
// tenant through its Service: no request fails, the masterCount it writes
// goes up once and down once (no flap), the disruption budget and the
// tenant's own endpoints follow, and the status never says Ready for fewer
// ready apiservers than asked. Then a kubectl scale to 2 waits while the
// tenant is paused, and is done once it is resumed.
func TestOperator_AutoscalerAndKubectlScaleFailNoRequest(t *testing.T) {
	c, cfg, tenant := startTenant(t, "scaled", nil)
	ns := cfg.Namespace

	// Each call on a connection of its own, which the Service sends to
	// any ready apiserver: joining and leaving ones too.
	_, rc := tenantClient(t, c, cfg)
	fresh := newConnectionEachCall(t, rc)
	loop := startClientLoop(func(ctx context.Context) error {
		_, err := fresh.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		return err
	}, 100*time.Millisecond)
	honest := watchScaleStatus(t, c, cfg)
	// A scale changes the number of apiservers, never their template (the
	// in-flight limits and cache sizes are each apiserver's own): the pods
	// of before are not rolled.
	template := apiserverPods(t, c, cfg)[0].Labels[appsv1.DefaultDeploymentUniqueLabelKey]
	hpa := tenantAutoscaler(t, cfg)
	if err := c.Create(context.Background(), hpa); err != nil {
		t.Fatalf("creating the autoscaler of config/samples: %v", err)
	}
	waitAutoscaler(t, c, hpa, "finds the apiservers' metrics", 2*time.Minute, func(h *autoscalingv2.HorizontalPodAutoscaler) bool {
		active := autoscalerCondition(h, autoscalingv2.ScalingActive)
		return active != nil && active.Status == corev1.ConditionTrue && len(h.Status.CurrentMetrics) > 0
	})

	// Load: lists of every ClusterRole, back to back, from four clients
	// (kept connections, on the one apiserver there is). Their requests
	// count as the clients' too: none may fail.
	var load []*clientLoop
	for range 4 {
		load = append(load, startClientLoop(func(ctx context.Context) error {
			return tenant.RbacV1().RESTClient().Get().Resource("clusterroles").Do(ctx).Error()
		}, 0))
	}
	start := time.Now()
	waitAutoscaler(t, c, hpa, "scales the loaded tenant to 3", 4*time.Minute, func(h *autoscalingv2.HorizontalPodAutoscaler) bool {
		return h.Status.DesiredReplicas == 3
	})
	waitScaled(t, c, tenant, cfg, 3)
	samePodTemplate(t, c, cfg, template)
	t.Logf("autoscaler under load: 1 -> 3 apiservers, Ready in %s", time.Since(start).Round(100*time.Millisecond))
	for i, l := range load {
		l.finish(t, fmt.Sprintf("load client %d while the autoscaler scaled up", i+1))
	}

	start = time.Now()
	waitAutoscaler(t, c, hpa, "scales the idle tenant back to 1", 4*time.Minute, func(h *autoscalingv2.HorizontalPodAutoscaler) bool {
		return h.Status.DesiredReplicas == 1
	})
	waitScaled(t, c, tenant, cfg, 1)
	samePodTemplate(t, c, cfg, template)
	t.Logf("autoscaler without load: 3 -> 1 apiservers, Ready in %s", time.Since(start).Round(100*time.Millisecond))
	if err := c.Delete(context.Background(), hpa); err != nil {
		t.Fatal(err)
	}
	honest.check(t, []int32{1, 3, 1})

	// Paused, the tenant takes no change: a scale waits, kubectl get says
	// so, and the tenant serves on; resumed, the scale is done.
	managementKubectl(t, "-n", ns, "annotate", "asc/scaled", v1alpha1.PausedAnnotation+"=true")
	waitConditions(t, c, cfg, map[string]string{v1alpha1.ConditionPaused: "True|nothing waits"}, 30*time.Second)
	managementKubectl(t, "-n", ns, "scale", "asc/scaled", "--replicas=2")
	waitConditions(t, c, cfg, map[string]string{v1alpha1.ConditionPaused: "True|generation"}, 30*time.Second)
	lines := strings.Split(strings.TrimSpace(managementKubectl(t, "-n", ns, "get", "asc/scaled")), "\n")
	if header, row := strings.Fields(lines[0]), strings.Fields(lines[len(lines)-1]); len(header) != len(row) || !slices.Contains(header, "PAUSED") || row[slices.Index(header, "PAUSED")] != "True" {
		t.Errorf("kubectl get asc does not print PAUSED True:\n%s", strings.Join(lines, "\n"))
	}
	d := &appsv1.Deployment{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: apiserver.DeploymentName("scaled")}, d); err != nil || *d.Spec.Replicas != 1 {
		t.Errorf("the paused tenant was scaled: %v replicas (%v)", d.Spec.Replicas, err)
	}
	managementKubectl(t, "-n", ns, "annotate", "asc/scaled", v1alpha1.PausedAnnotation+"-")
	start = time.Now()
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: apiserver.DeploymentName("scaled")}, d); err == nil && *d.Spec.Replicas == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the scale asked for during the pause was not done within 3 minutes of the resume")
		}
	}
	waitReady(t, c, cfg, 3*time.Minute)
	t.Logf("resumed: the scale asked for during the pause done, Ready in %s", time.Since(start).Round(100*time.Millisecond))
	loop.finish(t, "client through the Service during autoscaling and a pause")
}

// newConnectionEachCall is a client of rc that opens a connection for each
// call (HTTP/1.1 without keep-alive).
func newConnectionEachCall(t testing.TB, rc *rest.Config) *kubernetes.Clientset {
	t.Helper()
	tlsConfig, err := rest.TLSConfigFor(rc)
	if err != nil {
		t.Fatal(err)
	}
	fresh := rest.CopyConfig(rc)
	fresh.TLSClientConfig = rest.TLSClientConfig{}
	fresh.Transport = &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true}
	cs, err := kubernetes.NewForConfig(fresh)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// tenantAutoscaler is the autoscaler of config/samples for cfg, which
// removes apiservers 15 s after the load is gone (the sample waits 5
// minutes, and then takes one a minute).
func tenantAutoscaler(t testing.TB, cfg *v1alpha1.ApiServerConfig) *autoscalingv2.HorizontalPodAutoscaler {
	t.Helper()
	hpa := &autoscalingv2.HorizontalPodAutoscaler{}
	readSample(t, "autoscaling_v2_horizontalpodautoscaler.yaml", hpa)
	hpa.Namespace, hpa.Name, hpa.Spec.ScaleTargetRef.Name = cfg.Namespace, cfg.Name, cfg.Name
	hpa.Spec.Behavior.ScaleDown = &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To[int32](15)}
	// The sample's 100 % of a 100m request leaves an idle apiserver no
	// room on this machine: with the client loop of the test, each of two
	// measured 40-60m on both cores of CI, above the 50 % that takes two
	// back to one. 200 % keeps the way up (the load takes more than a
	// core, 1 000 %) and gives the way down room (100m each).
	hpa.Spec.Metrics[0].ContainerResource.Target.AverageUtilization = ptr.To[int32](200)
	return hpa
}

func autoscalerCondition(h *autoscalingv2.HorizontalPodAutoscaler, ct autoscalingv2.HorizontalPodAutoscalerConditionType) *autoscalingv2.HorizontalPodAutoscalerCondition {
	for i := range h.Status.Conditions {
		if h.Status.Conditions[i].Type == ct {
			return &h.Status.Conditions[i]
		}
	}
	return nil
}

// waitAutoscaler waits until done holds for the autoscaler.
func waitAutoscaler(t testing.TB, c client.Client, hpa *autoscalingv2.HorizontalPodAutoscaler, what string, timeout time.Duration, done func(*autoscalingv2.HorizontalPodAutoscaler) bool) {
	t.Helper()
	got := &autoscalingv2.HorizontalPodAutoscaler{}
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(time.Second) {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(hpa), got); err == nil && done(got) {
			return
		}
	}
	t.Fatalf("the autoscaler never %s within %s: %+v", what, timeout, got.Status)
}

// waitScaled waits until the tenant runs replicas ready apiservers, and
// checks what follows their number: the disruption budget (only with more
// than one) and the apiservers the tenant itself publishes.
func waitScaled(t testing.TB, c client.Client, tenant *kubernetes.Clientset, cfg *v1alpha1.ApiServerConfig, replicas int32) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		got := &v1alpha1.ApiServerConfig{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(cfg), got); err == nil && got.Spec.MasterCount != nil && *got.Spec.MasterCount == replicas {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("masterCount never became %d", replicas)
		}
	}
	waitReady(t, c, cfg, 3*time.Minute)
	got := &v1alpha1.ApiServerConfig{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(cfg), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Replicas != replicas || got.Status.ReadyReplicas != replicas {
		t.Errorf("Ready with %d replicas, %d ready; want %d", got.Status.Replicas, got.Status.ReadyReplicas, replicas)
	}
	err := c.Get(context.Background(), client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.DeploymentName(cfg.Name)}, &policyv1.PodDisruptionBudget{})
	if replicas > 1 && err != nil {
		t.Errorf("no disruption budget with %d apiservers: %v", replicas, err)
	}
	if replicas == 1 && !apierrors.IsNotFound(err) {
		t.Errorf("a disruption budget remains with one apiserver: %v", err)
	}
	// The lease reconciler publishes every live apiserver in the tenant's
	// kubernetes endpoints.
	var addresses int32
	for range 120 {
		eps, err := tenant.CoreV1().Endpoints("default").Get(context.Background(), "kubernetes", metav1.GetOptions{})
		addresses = 0
		if err == nil {
			for _, s := range eps.Subsets {
				addresses += int32(len(s.Addresses))
			}
		}
		if addresses == replicas {
			break
		}
		time.Sleep(time.Second)
	}
	if addresses != replicas {
		t.Errorf("the tenant's kubernetes endpoints list %d apiservers, want %d", addresses, replicas)
	}
}

// samePodTemplate checks that every apiserver pod runs the template hash.
func samePodTemplate(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, hash string) {
	t.Helper()
	for _, p := range apiserverPods(t, c, cfg) {
		if got := p.Labels[appsv1.DefaultDeploymentUniqueLabelKey]; got != hash {
			t.Errorf("apiserver pod %s runs template %s, not %s: scaling rolled the pods", p.Name, got, hash)
		}
	}
}

// scaleStatus records, from a poll of the tenant every 200 ms, each
// masterCount in turn and every moment the status said Ready for the
// current generation with fewer ready apiservers than asked.
type scaleStatus struct {
	stop   func()
	mu     sync.Mutex
	counts []int32
	lies   []string
}

func watchScaleStatus(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig) *scaleStatus {
	t.Helper()
	s := &scaleStatus{}
	s.stop = startPolling(200*time.Millisecond, func(ctx context.Context) {
		got := &v1alpha1.ApiServerConfig{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(cfg), got); err != nil || got.Spec.MasterCount == nil {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		want := *got.Spec.MasterCount
		if len(s.counts) == 0 || s.counts[len(s.counts)-1] != want {
			s.counts = append(s.counts, want)
		}
		r := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
		if r != nil && r.Status == metav1.ConditionTrue && r.ObservedGeneration == got.Generation && got.Status.ReadyReplicas < want {
			s.lies = append(s.lies, fmt.Sprintf("Ready (generation %d) with %d of %d apiservers ready", got.Generation, got.Status.ReadyReplicas, want))
		}
	})
	t.Cleanup(s.stop)
	return s
}

// check stops the poll: masterCount went through want in order, each
// change once, and the status never said Ready too early.
func (s *scaleStatus) check(t testing.TB, want []int32) {
	t.Helper()
	s.stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	// Between two values the autoscaler may pass through others (1, 2, 3):
	// what must not happen is a turn back and forth (3, 2, 3).
	turns := 0
	for i := 2; i < len(s.counts); i++ {
		if (s.counts[i]-s.counts[i-1] > 0) != (s.counts[i-1]-s.counts[i-2] > 0) {
			turns++
		}
	}
	if len(s.counts) < len(want) || s.counts[0] != want[0] || s.counts[len(s.counts)-1] != want[len(want)-1] || slices.Max(s.counts) != slices.Max(want) || turns != len(want)-2 {
		t.Errorf("masterCount went %v, want %v without turning back in between", s.counts, want)
	}
	t.Logf("masterCount went %v", s.counts)
	if len(s.lies) > 0 {
		t.Errorf("the status said Ready too early %d times, first: %s", len(s.lies), s.lies[0])
	}
}
