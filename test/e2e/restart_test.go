//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// killOperator sends SIGKILL to every manager process of the operator's
// pods (they run on this host, in their own PID namespaces) and returns how
// many it killed.
func killOperator(t testing.TB) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	killed := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if args[0] == "/manager" && strings.Contains(string(cmdline), "--leader-elect") {
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
				killed++
			}
		}
	}
	return killed
}

// Scenario 6: the operator is SIGKILLed again and again while it
// reconciles a new object; it converges, the CA it first wrote is kept,
// and nothing is orphaned.
func TestOperator_ConvergesThroughRepeatedSIGKILL(t *testing.T) {
	installOperator(t)
	c := ctrlClient(t)
	ns := tenantNamespace(t)
	cfg := localTenant(t, ns, "killed")
	if err := c.Create(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	var firstCA []byte
	kills := 0
	for round := range 6 {
		if n := killOperator(t); n > 0 {
			kills += n
		}
		time.Sleep(time.Duration(1500+round*500) * time.Millisecond)
		s := &corev1.Secret{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: apiserver.CASecretName("killed")}, s); err == nil && firstCA == nil {
			firstCA = s.Data[corev1.TLSCertKey]
		}
	}
	if kills == 0 {
		t.Fatal("no operator process was found to kill")
	}
	t.Logf("Sent SIGKILL to %d operator processes", kills)
	took := waitReady(t, c, cfg, 5*time.Minute)
	t.Logf("Ready %s after the last kill", took.Round(100*time.Millisecond))

	s := &corev1.Secret{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: apiserver.CASecretName("killed")}, s); err != nil {
		t.Fatal(err)
	}
	if firstCA != nil && !bytes.Equal(s.Data[corev1.TLSCertKey], firstCA) {
		t.Fatal("the CA changed across operator restarts")
	}
	// Everything labelled for the tenant is owned by it, once.
	owner := cfg.GetUID()
	for _, list := range []client.ObjectList{&corev1.SecretList{}, &corev1.ConfigMapList{}, &corev1.ServiceList{}, &appsv1.DeploymentList{}, &policyv1.PodDisruptionBudgetList{}} {
		if err := c.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{apiserver.NameLabel: "killed"}); err != nil {
			t.Fatal(err)
		}
		items, _ := meta.ExtractList(list)
		for _, item := range items {
			obj := item.(client.Object)
			owned := false
			for _, ref := range obj.GetOwnerReferences() {
				if ref.UID == owner && ref.Controller != nil && *ref.Controller {
					owned = true
				}
			}
			if !owned {
				t.Errorf("%T %s is not owned by the ApiServerConfig: orphaned", obj, obj.GetName())
			}
		}
	}
}
