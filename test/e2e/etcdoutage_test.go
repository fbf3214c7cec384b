//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/test/localcluster"
)

// callLog calls a tenant every interval and records when each call ended
// and how, so that failures can be placed in the phases of an outage.
type callLog struct {
	mu    sync.Mutex
	calls []call
	stop  chan struct{}
	done  chan struct{}
}

type call struct {
	at  time.Time
	err error
}

func startCallLog(do func(context.Context) error, interval, timeout time.Duration) *callLog {
	l := &callLog{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for range 100000 { // bounded: stop ends it long before
			select {
			case <-l.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			err := do(ctx)
			cancel()
			l.mu.Lock()
			l.calls = append(l.calls, call{at: time.Now(), err: err})
			l.mu.Unlock()
			time.Sleep(interval)
		}
	}()
	return l
}

// snapshot is the calls so far.
func (l *callLog) snapshot() []call {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

func (l *callLog) finish() []call {
	close(l.stop)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls
}

// tally counts the calls that ended in [from, to) and the failed ones.
func tally(calls []call, from, to time.Time) (total, failed int, lastErr error) {
	for _, c := range calls {
		if c.at.Before(from) || !c.at.Before(to) {
			continue
		}
		total++
		if c.err != nil {
			failed++
			lastErr = c.err
		}
	}
	return total, failed, lastErr
}

// firstSuccess is when the first call after from succeeded.
func firstSuccess(calls []call, from time.Time) (time.Time, bool) {
	for _, c := range calls {
		if !c.at.Before(from) && c.err == nil {
			return c.at, true
		}
	}
	return time.Time{}, false
}

// waitServed waits, bounded, until a call of l made after since succeeds.
func waitServed(t testing.TB, l *callLog, since time.Time, within time.Duration, what string) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(time.Second) {
		if _, ok := firstSuccess(l.snapshot(), since); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s were not served within %s of their etcd's return", what, within)
		}
	}
}

// restarts sums the apiserver containers' restarts and lists their pods: a
// restart, or a pod replaced, shows in one or the other.
func restarts(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig) (int32, []string) {
	t.Helper()
	pods := podUIDs(t, c, cfg)
	var n int32
	for _, r := range pods {
		n += r
	}
	return n, sortedKeys(pods)
}

func sortedKeys(m map[string]int32) []string { return slices.Sorted(maps.Keys(m)) }

// podsReady reports whether every apiserver pod is Ready: in the Service.
func podsReady(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig) bool {
	t.Helper()
	pods := apiserverPods(t, c, cfg)
	for _, p := range pods {
		ready := false
		for _, cond := range p.Status.Conditions {
			ready = ready || (cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue)
		}
		if !ready {
			return false
		}
	}
	return len(pods) > 0
}

// waitConditions waits until the tenant's conditions hold what want says
// (type -> status, and a substring of the message when given after "|").
func waitConditions(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, want map[string]string, timeout time.Duration) {
	t.Helper()
	var last []string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		got := &v1alpha1.ApiServerConfig{}
		if err := c.Get(context.Background(), clientKey(cfg), got); err != nil {
			continue
		}
		last = last[:0]
		ok := true
		for typ, w := range want {
			status, contains, _ := strings.Cut(w, "|")
			cond := meta.FindStatusCondition(got.Status.Conditions, typ)
			if cond == nil || string(cond.Status) != status || !strings.Contains(cond.Message, contains) {
				ok = false
			}
			if cond != nil {
				last = append(last, fmt.Sprintf("%s=%s (%s)", typ, cond.Status, cond.Message))
			}
		}
		if ok {
			return
		}
	}
	t.Fatalf("the conditions of %s/%s did not become %v within %s; last: %v", cfg.Namespace, cfg.Name, want, timeout, last)
}

// livezFails reports whether kube-apiserver's own, unfiltered /livez
// fails: what a liveness probe without exclusions would see.
func livezFails(ctx context.Context, cs *kubernetes.Clientset) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return cs.Discovery().RESTClient().Get().AbsPath("/livez").Do(ctx).Error() != nil
}

// maxReconnect bounds how soon after an etcd outage kube-apiserver serves
// again (the figure): the etcd dialer holds kube-apiserver's
// connection attempts while etcd is down and connects them within 200 ms
// of its return, then readiness (probed every second) and the endpoints'
// update follow. Without the dialer, gRPC's grown reconnect backoff made
// it 10 to 16 s after a 30 s outage, and up to 46 s after an 80 s one.
const maxReconnect = 15 * time.Second

// livenessWindow is how long kubelet takes to restart an apiserver whose
// liveness probe fails: 6 probes, 10 s apart.
const livenessWindow = 60 * time.Second

// Scenario 9: etcd outages restart no apiserver. With the events etcd (an
// etcd override) down, everything stored in the main etcd keeps being
// served and only events fail; with the main etcd down, nothing is
// restarted, an apiserver started during the outage (a scale-up) waits for
// etcd without a restart and is Ready soon after it returns, clients are
// served again soon after it returns and nothing acknowledged is lost.
// Status says what happens meanwhile.
func TestOperator_EtcdOutagesRestartNoApiserver(t *testing.T) {
	c, cfg, _ := startTenant(t, "outage", nil)
	etcd := cluster.TenantEtcd()
	_, rc := tenantClient(t, c, cfg)
	// Short timeouts: a call that hangs on a stopped etcd is a failure,
	// and the moment clients are served again is measured to a second.
	rc = rest.CopyConfig(rc)
	rc.Timeout = 5 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	beforeRestarts, beforePods := restarts(t, c, cfg)

	// What clients do throughout: read and write a ConfigMap (main etcd),
	// and create events (the events etcd).
	var mu sync.Mutex
	acknowledged := 0
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "counter"}, Data: map[string]string{"n": "0"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	main := startCallLog(func(ctx context.Context) error {
		cm, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "counter", metav1.GetOptions{})
		if err != nil {
			return err
		}
		n, _ := strconv.Atoi(cm.Data["n"])
		cm.Data["n"] = strconv.Itoa(n + 1)
		if _, err := cs.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			return err
		}
		mu.Lock()
		acknowledged = max(acknowledged, n+1)
		mu.Unlock()
		return nil
	}, 200*time.Millisecond, 5*time.Second)
	eventN := 0
	events := startCallLog(func(ctx context.Context) error {
		eventN++
		_, err := cs.CoreV1().Events("default").Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("outage-%d", eventN)},
			InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Namespace: "default", Name: "counter", APIVersion: "v1"},
			Reason:         "Counted", Message: "a write during an etcd outage", Type: corev1.EventTypeNormal,
		}, metav1.CreateOptions{})
		return err
	}, 500*time.Millisecond, 5*time.Second)
	finished := false
	defer func() {
		if !finished {
			main.finish()
			events.finish()
		}
	}()
	time.Sleep(3 * time.Second) // calls before any outage, to compare with

	// The events etcd goes away for longer than the liveness window.
	stopped := time.Now()
	if err := cluster.StopTenantEtcd(ctx, localcluster.TenantEtcdEvents); err != nil {
		t.Fatal(err)
	}
	restartEvents := func() {
		if err := cluster.StartTenantEtcd(ctx, localcluster.TenantEtcdEvents); err != nil {
			t.Fatal(err)
		}
	}
	eventsUp := false
	defer func() {
		if !eventsUp {
			restartEvents()
		}
	}()
	// The outage is real for kube-apiserver: its own /livez fails (a probe
	// of it would restart the pod), and status names the server.
	for deadline := time.Now().Add(30 * time.Second); !livezFails(ctx, cs); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatal("kube-apiserver's /livez kept passing with the events etcd down: the outage is not seen")
		}
	}
	livezFailing := time.Now()
	waitConditions(t, c, cfg, map[string]string{
		v1alpha1.ConditionEtcdAvailable: "False|" + etcd.EventsURL,
		v1alpha1.ConditionDegraded:      "True|" + etcd.EventsURL,
		v1alpha1.ConditionAvailable:     "True",
	}, 30*time.Second)
	// Past the liveness window, counted from when an unfiltered probe
	// started failing.
	time.Sleep(time.Until(livezFailing.Add(livenessWindow + 10*time.Second)))
	duringRestarts, duringPods := restarts(t, c, cfg)
	if !podsReady(t, c, cfg) {
		t.Errorf("events etcd down: an apiserver left the Service, although it serves everything stored in the main etcd")
	}
	restarted := time.Now()
	restartEvents()
	eventsUp = true
	eventsBack := time.Now() // serving again: StartTenantEtcd waited for it
	// Wait for an event to be created again, bounded; how soon is checked
	// below.
	waitServed(t, events, eventsBack, 150*time.Second, "events")
	if duringRestarts != beforeRestarts || strings.Join(duringPods, ",") != strings.Join(beforePods, ",") {
		t.Errorf("events etcd down for %s: the apiservers restarted (%d restarts, pods %v; before %d, %v)",
			restarted.Sub(stopped).Round(time.Second), duringRestarts, duringPods, beforeRestarts, beforePods)
	}
	waitConditions(t, c, cfg, map[string]string{v1alpha1.ConditionEtcdAvailable: "True", v1alpha1.ConditionReady: "True"}, 60*time.Second)

	// Then the main etcd, for 60 s, with a second apiserver started during
	// the outage (a scale-up; a drain or a rollout starts pods the same
	// way): it waits for etcd instead of exiting after its storage's 20 s.
	written := []string{}
	for i := range 20 {
		name := fmt.Sprintf("before-main-outage-%d", i)
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		written = append(written, name)
	}
	mainStopped := time.Now()
	if err := cluster.StopTenantEtcd(ctx, localcluster.TenantEtcdMain); err != nil {
		t.Fatal(err)
	}
	mainUp := false
	defer func() {
		if !mainUp {
			_ = cluster.StartTenantEtcd(ctx, localcluster.TenantEtcdMain)
		}
	}()
	waitConditions(t, c, cfg, map[string]string{
		v1alpha1.ConditionEtcdAvailable: "False|" + etcd.MainURL,
		v1alpha1.ConditionDegraded:      "True|" + etcd.MainURL,
		// Readiness follows the main etcd: the tenant does not serve.
		v1alpha1.ConditionAvailable: "False",
	}, 30*time.Second)
	managementKubectl(t, "-n", cfg.Namespace, "scale", "asc/"+cfg.Name, "--replicas=2")
	var added string
	for deadline := time.Now().Add(30 * time.Second); added == ""; time.Sleep(time.Second) {
		for _, p := range apiserverPods(t, c, cfg) {
			if !slices.Contains(beforePods, string(p.UID)) {
				added = string(p.UID)
			}
		}
		if added == "" && time.Now().After(deadline) {
			t.Fatal("no second apiserver pod within 30 s of the scale-up during the main etcd's outage")
		}
	}
	time.Sleep(time.Until(mainStopped.Add(60 * time.Second)))
	// Until etcd returns, the new pod's kube-apiserver has not run: kubelet
	// waits for the etcd dialer's postStart hook.
	waited := false
	for _, p := range apiserverPods(t, c, cfg) {
		if string(p.UID) != added {
			continue
		}
		for _, st := range p.Status.ContainerStatuses {
			if st.Name == "kube-apiserver" {
				waited = st.State.Waiting != nil && st.RestartCount == 0
				if !waited {
					t.Errorf("the apiserver pod started during the main etcd's outage ran kube-apiserver before etcd returned: %+v", st)
				}
			}
		}
		for _, st := range p.Status.InitContainerStatuses {
			if st.RestartCount > 0 {
				t.Errorf("the etcd dialer of the apiserver pod started during the main etcd's outage restarted: %+v", st)
			}
		}
	}
	if !waited {
		t.Errorf("the apiserver pod started during the main etcd's outage (%s) has no waiting kube-apiserver", added)
	}
	if err := cluster.StartTenantEtcd(ctx, localcluster.TenantEtcdMain); err != nil {
		t.Fatal(err)
	}
	mainUp = true
	mainBack := time.Now() // serving again: StartTenantEtcd waited for it
	waitServed(t, main, mainBack, 90*time.Second, "ConfigMaps")
	for deadline := time.Now().Add(90 * time.Second); !podsReady(t, c, cfg) || len(apiserverPods(t, c, cfg)) != 2; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the apiserver pod started during the main etcd's outage was not Ready within 90 s of etcd's return")
		}
	}
	t.Logf("the apiserver pod started during the main etcd's outage was Ready %s after etcd returned (down %s)",
		time.Since(mainBack).Round(100*time.Millisecond), mainBack.Sub(mainStopped).Round(time.Second))
	waitConditions(t, c, cfg, map[string]string{v1alpha1.ConditionEtcdAvailable: "True", v1alpha1.ConditionReady: "True"}, 90*time.Second)
	time.Sleep(3 * time.Second) // calls after recovery, to compare with
	finished = true
	mainCalls, eventCalls := main.finish(), events.finish()

	// What clients saw.
	total, failed, lastErr := tally(mainCalls, time.Time{}, mainStopped)
	t.Logf("main etcd's resources, until its outage (the events etcd down %s of it): %d calls, %d failed", eventsBack.Sub(stopped).Round(time.Second), total, failed)
	if failed > 0 || total == 0 {
		t.Errorf("with only the events etcd down, %d of %d calls for ConfigMaps (main etcd) failed (last: %v)", failed, total, lastErr)
	}
	total, failed, _ = tally(eventCalls, stopped.Add(10*time.Second), eventsBack)
	t.Logf("events during the events etcd's outage: %d calls, %d failed", total, failed)
	if failed == 0 {
		t.Errorf("events were created while their etcd was down (%d calls): the outage did not happen", total)
	}
	if at, ok := firstSuccess(eventCalls, eventsBack); ok {
		t.Logf("events created again %s after their etcd returned (down %s)", at.Sub(eventsBack).Round(100*time.Millisecond), eventsBack.Sub(stopped).Round(time.Second))
		if at.Sub(eventsBack) > maxReconnect {
			t.Errorf("events were created again %s after their etcd returned, want within %s", at.Sub(eventsBack).Round(100*time.Millisecond), maxReconnect)
		}
	}
	total, failed, _ = tally(mainCalls, mainStopped, mainBack)
	t.Logf("ConfigMaps during the main etcd's outage: %d calls, %d failed", total, failed)
	at, ok := firstSuccess(mainCalls, mainBack)
	if !ok {
		t.Fatal("ConfigMaps were never served again after the main etcd returned")
	}
	recovery := at.Sub(mainBack)
	t.Logf("ConfigMaps served again %s after the main etcd returned (down %s)", recovery.Round(100*time.Millisecond), mainBack.Sub(mainStopped).Round(time.Second))
	if recovery > maxReconnect {
		t.Errorf("clients were served again %s after the main etcd returned, want within %s", recovery.Round(100*time.Millisecond), maxReconnect)
	}
	afterRestarts, afterPods := restarts(t, c, cfg)
	if want := append(slices.Clone(beforePods), added); afterRestarts != beforeRestarts || strings.Join(afterPods, ",") != strings.Join(slices.Sorted(slices.Values(want)), ",") {
		t.Errorf("etcd outages restarted the apiservers: %d restarts, pods %v; before %d, %v, and %s started during the outage", afterRestarts, afterPods, beforeRestarts, beforePods, added)
	}

	// Nothing acknowledged is lost.
	for _, name := range written {
		if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("ConfigMap %s, written before the main etcd's outage: %v", name, err)
		}
	}
	cm, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "counter", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	want := acknowledged
	mu.Unlock()
	if n, _ := strconv.Atoi(cm.Data["n"]); n < want {
		t.Errorf("the counter reads %d, but %d was acknowledged: a write was lost", n, want)
	}
}
