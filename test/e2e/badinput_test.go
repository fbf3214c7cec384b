//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// Scenario 7: bad input through kubectl is refused with a clear message,
// and nothing that existed changes.
func TestOperator_BadInputIsRefusedAndChangesNothing(t *testing.T) {
	installOperator(t)
	c := ctrlClient(t)
	ns := tenantNamespace(t)
	cfg := localTenant(t, ns, "steady")
	if err := c.Create(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, cfg, 3*time.Minute)
	before := &v1alpha1.ApiServerConfig{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(cfg), before); err != nil {
		t.Fatal(err)
	}

	cases := []struct{ patch, want string }{
		{`{"spec":{"extraArgs":[{"name":"enable-admision-plugins","value":"PodNodeSelector"}]}}`, "did you mean --enable-admission-plugins?"},
		{`{"spec":{"serviceClusterIPRange":["10.100.0.0/16"]}}`, "the primary (first) range is immutable"},
		{`{"spec":{"etcd":{"overrides":[{"group":"","resource":"event","servers":["https://10.77.0.2:2579"]}]}}}`, `did you mean "events"?`},
		{`{"spec":{"masterCount":-1}}`, "spec.masterCount"},
		{`{"spec":{"version":"v1.36.0","image":"registry.example.com/kube-apiserver:v1.36.0"}}`, "version may not be downgraded"},
	}
	for _, tc := range cases {
		out, err := run(t, nil, "kubectl", "-n", ns, "patch", "asc/steady", "--type=merge", "-p", tc.patch)
		if err == nil {
			t.Errorf("kubectl patch %s was accepted", tc.patch)
			continue
		}
		if !strings.Contains(out, tc.want) {
			t.Errorf("kubectl patch %s printed\n%s\nwant it to say %q", tc.patch, out, tc.want)
		}
	}
	after := &v1alpha1.ApiServerConfig{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(cfg), after); err != nil {
		t.Fatal(err)
	}
	if after.Generation != before.Generation {
		t.Fatalf("refused patches changed the spec (generation %d -> %d)", before.Generation, after.Generation)
	}
}
