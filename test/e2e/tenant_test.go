//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// Scenario 1: kubectl apply of the sample gives a tenant that serves, is
// reachable with the admin kubeconfig, and issues working tokens.
func TestOperator_SampleBecomesAWorkingTenant(t *testing.T) {
	installOperator(t)
	c := ctrlClient(t)
	ns := tenantNamespace(t)
	cfg := localTenant(t, ns, "tenant")
	manifest, err := yamlOf(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, manifest, "kubectl", "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply of the sample: %v\n%s", err, out)
	}
	took := waitReady(t, c, cfg, 3*time.Minute)
	t.Logf("kubectl apply -> Ready (pods Ready by kubelet's probes) in %s", took.Round(100*time.Millisecond))

	got := &v1alpha1.ApiServerConfig{}
	if err := c.Get(context.Background(), clientKey(cfg), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Endpoint == "" || got.Status.ReadyReplicas != 1 {
		t.Errorf("status has endpoint %q and %d ready replicas", got.Status.Endpoint, got.Status.ReadyReplicas)
	}

	tenant, rc := tenantClient(t, c, cfg)
	waitReachable(t, tenant)
	info, err := tenant.Discovery().ServerVersion()
	if err != nil || info.GitVersion != v1alpha1.BundledVersion {
		t.Fatalf("the tenant's /version: %v, %v", info, err)
	}
	ctx := context.Background()
	svc, err := tenant.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != "10.96.0.1" {
		t.Errorf("the tenant's kubernetes Service has ClusterIP %s, want 10.96.0.1, the first address of 10.96.0.0/12", svc.Spec.ClusterIP)
	}

	// A ServiceAccount token issued by the tenant authenticates to it.
	if _, err := tenant.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := tenant.CoreV1().ServiceAccounts("default").CreateToken(ctx, "probe", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	who := whoAmI(t, rc, tr.Status.Token)
	if who != "system:serviceaccount:default:probe" {
		t.Fatalf("the token authenticates as %q", who)
	}

	// kubectl with the admin kubeconfig reports the bundled version.
	out := tenantKubectl(t, c, cfg, "version")
	if !strings.Contains(out, "Server Version: "+v1alpha1.BundledVersion) {
		t.Fatalf("kubectl version through the tenant's Service:\n%s", out)
	}
}

// whoAmI is the user a bearer token authenticates as (SelfSubjectReview).
func whoAmI(t testing.TB, admin *rest.Config, token string) string {
	t.Helper()
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = token
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a tenant token was refused: %v", err)
	}
	return r.Status.UserInfo.Username
}
