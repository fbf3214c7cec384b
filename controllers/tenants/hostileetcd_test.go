package tenants

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/test/hostileetcd"
)

// The hostile etcd's process is this test binary: it serves before
// TestMain starts the environment.
func init() { hostileetcd.ServeIfAsked() }

// memStats are the process's memory statistics after a collection.
func memStats() runtime.MemStats {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

// addressPort is an IPv4 address with a port, as gRPC's errors name what
// they dialled.
var addressPort = regexp.MustCompile(`\d{1,3}(\.\d{1,3}){3}:\d+`)

// A tenant's etcd is the tenant's to choose, and may answer anything: one
// that passes the status check, then answers the data check with a value
// of 100 MiB, gets its tenant held with a message that says so and no
// more, costs the operator no more memory than a page it takes, and holds
// up no other tenant.
func TestApiServerConfigReconciler_AHostileEtcdIsRefusedAndTheOthersServed(t *testing.T) {
	ns := namespace(t, nil)
	cfg := tenant(ns, "hostile", nil)
	keys := apiserver.KeysUnder(apiserver.KeyspaceOf(&cfg.Spec.Etcd).Prefix)
	endpoint := hostileetcd.Start(t, hostileetcd.Values{keys + "configmaps/default/giant": 100 << 20})
	cfg.Spec.Etcd.Servers = []string{endpoint}

	before := memStats()
	// Admission answers once the tenant index's cache is up.
	eventually(t, 10*time.Second, "the tenant is admitted", func() error {
		return env.Client.Create(context.Background(), cfg)
	})
	// The data check reads a page of 500 keys, then of 125, 31, 7 and one:
	// five answers of 100 MiB each, before Ready says what it found.
	var ready *metav1.Condition
	var conditions []metav1.Condition
	eventually(t, 30*time.Second, "the data check fails", func() error {
		got := get(t, cfg.DeepCopy())
		ready = conditionOf(got, v1alpha1.ConditionReady)
		if ready == nil || ready.Reason != v1alpha1.ReasonReconcileError && ready.Reason != v1alpha1.ReasonForeignData {
			return fmt.Errorf("Ready is %v", ready)
		}
		conditions = got.Status.Conditions
		return nil
	})
	after := memStats()
	t.Logf("The operator allocated %d MiB; its heap went from %d to %d MiB", (after.TotalAlloc-before.TotalAlloc)>>20, before.HeapInuse>>20, after.HeapInuse>>20)
	if grown := int64(after.TotalAlloc - before.TotalAlloc); grown > 100<<20 {
		t.Errorf("the operator allocated %d MiB while an etcd answered it 100 MiB at a time", grown>>20)
	}
	if grown := int64(after.HeapInuse) - int64(before.HeapInuse); grown > 20<<20 {
		t.Errorf("the operator's heap grew by %d MiB", grown>>20)
	}
	if ready.Status != metav1.ConditionFalse || !strings.Contains(ready.Message, "etcd "+endpoint+" answered a value of more than 8 MiB") {
		t.Errorf("Ready does not say that the etcd answered too much: %v", ready)
	}

	// Status tells the tenant what it could know: its etcd, as its spec
	// names it, answered too much. Not what gRPC said, nor any other
	// address.
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range conditions {
		for _, internal := range []string{"connection refused", "dial tcp", "rpc error", "desc =", "transport:", "grpc", "giant"} {
			if strings.Contains(c.Message, internal) {
				t.Errorf("%s says %q: %q", c.Type, internal, c.Message)
			}
		}
		for _, addr := range addressPort.FindAllString(c.Message, -1) {
			if addr != u.Host {
				t.Errorf("%s names %s, which the spec does not: %q", c.Type, addr, c.Message)
			}
		}
	}

	// Another tenant is served meanwhile, while the hostile one is retried
	// and gets no apiserver.
	createReady(t, tenant(ns, "calm", nil))
	c := conditionOf(get(t, cfg.DeepCopy()), v1alpha1.ConditionReady)
	if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "answered a value of more than 8 MiB") {
		t.Errorf("the hostile tenant's Ready is %v", c)
	}
	err = env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: apiserver.DeploymentName(cfg.Name)}, &appsv1.Deployment{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the hostile tenant got a Deployment (%v)", err)
	}
}
