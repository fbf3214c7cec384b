//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

const (
	managerSA = "system:serviceaccount:apiserver-operator-system:apiserver-operator-controller-manager"
	webhookSA = "system:serviceaccount:apiserver-operator-system:apiserver-operator-webhook"
)

// allowed asks the management cluster whether user may verb the resource.
func allowed(t testing.TB, cs *kubernetes.Clientset, user string, attrs authorizationv1.ResourceAttributes) bool {
	t.Helper()
	review, err := cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &attrs},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return review.Status.Allowed
}

// The operator, as config/default installs it, holds what each piece
// needs: the controllers may patch the caBundle of its own webhook
// configurations and of no other (a webhook configuration is how a
// hijacked operator would intercept every write of the cluster); the
// webhook patches none, and reads no Secret but its serving certificate's,
// which it may neither write nor create (a token Secret it created would
// be filled with another ServiceAccount's token).
func TestOperator_PatchesOnlyItsOwnWebhookConfigurations(t *testing.T) {
	installOperator(t)
	cs := clientset(t)
	for _, tc := range []struct {
		user                 string
		verb, resource, name string
		allowed              bool
	}{
		{managerSA, "patch", "validatingwebhookconfigurations", "apiserver-operator-validating-webhook-configuration", true},
		{managerSA, "patch", "mutatingwebhookconfigurations", "apiserver-operator-mutating-webhook-configuration", true},
		{managerSA, "patch", "validatingwebhookconfigurations", "another-operators-webhooks", false},
		{managerSA, "patch", "mutatingwebhookconfigurations", "another-operators-webhooks", false},
		{managerSA, "list", "validatingwebhookconfigurations", "", false},
		{managerSA, "delete", "validatingwebhookconfigurations", "apiserver-operator-validating-webhook-configuration", false},
		{webhookSA, "patch", "validatingwebhookconfigurations", "apiserver-operator-validating-webhook-configuration", false},
		{webhookSA, "patch", "mutatingwebhookconfigurations", "apiserver-operator-mutating-webhook-configuration", false},
		// Its readiness reads the dry-run guard by name; it may change
		// no admission policy.
		{webhookSA, "get", "validatingadmissionpolicies", "apiserver-operator-webhook-dry-run-only", true},
		{webhookSA, "get", "validatingadmissionpolicybindings", "apiserver-operator-webhook-dry-run-only", true},
		{webhookSA, "get", "validatingadmissionpolicies", "another-operators-policy", false},
		{webhookSA, "delete", "validatingadmissionpolicybindings", "apiserver-operator-webhook-dry-run-only", false},
		{webhookSA, "patch", "validatingadmissionpolicies", "apiserver-operator-webhook-dry-run-only", false},
	} {
		if got := allowed(t, cs, tc.user, authorizationv1.ResourceAttributes{
			Group: "admissionregistration.k8s.io", Resource: tc.resource, Verb: tc.verb, Name: tc.name,
		}); got != tc.allowed {
			t.Errorf("%s may %s %s %q: %v, want %v", tc.user, tc.verb, tc.resource, tc.name, got, tc.allowed)
		}
	}
	for _, tc := range []struct {
		verb, namespace, name string
		allowed               bool
	}{
		{"get", "apiserver-operator-system", "apiserver-operator-webhook-cert", true},
		{"update", "apiserver-operator-system", "apiserver-operator-webhook-cert", false},
		{"create", "apiserver-operator-system", "", false},
		{"get", "apiserver-operator-system", "a-datastore", false},
		{"list", "apiserver-operator-system", "", false},
		{"get", "tenant-a", "x-ca", false},
		{"list", "", "", false},
		{"watch", "", "", false},
	} {
		if got := allowed(t, cs, webhookSA, authorizationv1.ResourceAttributes{
			Resource: "secrets", Verb: tc.verb, Namespace: tc.namespace, Name: tc.name,
		}); got != tc.allowed {
			t.Errorf("the webhook may %s Secrets %s/%q: %v, want %v", tc.verb, tc.namespace, tc.name, got, tc.allowed)
		}
	}
}

// The webhook's ServiceAccount may create the tenants' kinds of object for
// its server-side dry runs only: the dry-run guard refuses a real write of
// each kind, created or applied, so a hijacked webhook cannot start a
// workload.
func TestOperator_WebhookWritesOnlyInADryRun(t *testing.T) {
	installOperator(t)
	ns := tenantNamespace(t)
	cfg, err := cluster.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Impersonate.UserName = webhookSA
	cfg.Impersonate.Groups = []string{"system:serviceaccounts", "system:serviceaccounts:apiserver-operator-system", "system:authenticated"}
	webhook, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	admin := clientset(t)
	labels := map[string]string{"app": "hijacked"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hijacked"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "localhost/apiserver-operator/nothing:v1"}}},
			},
		},
	}
	ctx := context.Background()
	if _, err := webhook.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("the webhook's dry run of a Deployment was refused: %v", err)
	}
	// refused fails the test unless err is the guard's refusal of a real
	// write (not RBAC's: the webhook may write each kind in a dry run);
	// undo removes what was written anyway. The policy reaches the API
	// server's admission within moments of the install; the suite
	// installed it minutes ago, so one try tells.
	refused := func(what string, err error, undo func() error) {
		t.Helper()
		if err == nil {
			_ = undo()
			t.Errorf("the webhook's ServiceAccount %s for real", what)
			return
		}
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "dry run") {
			t.Errorf("when the webhook's ServiceAccount %s for real it got %v, want the dry-run guard's refusal", what, err)
			return
		}
		t.Logf("Refused as expected: %v", err)
	}
	_, err = webhook.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
	refused("created a Deployment", err, func() error { return admin.AppsV1().Deployments(ns).Delete(ctx, d.Name, metav1.DeleteOptions{}) })
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hijacked"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 443}}},
	}
	_, err = webhook.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	refused("created a Service", err, func() error { return admin.CoreV1().Services(ns).Delete(ctx, svc.Name, metav1.DeleteOptions{}) })
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hijacked"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(0)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "victim"}}},
	}
	if _, err := webhook.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("the webhook's dry run of a PodDisruptionBudget was refused: %v", err)
	}
	_, err = webhook.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{})
	refused("created a PodDisruptionBudget", err, func() error {
		return admin.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, pdb.Name, metav1.DeleteOptions{})
	})
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hijacked"},
		Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	}
	if _, err := webhook.NetworkingV1().NetworkPolicies(ns).Create(ctx, np, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("the webhook's dry run of a NetworkPolicy was refused: %v", err)
	}
	_, err = webhook.NetworkingV1().NetworkPolicies(ns).Create(ctx, np, metav1.CreateOptions{})
	refused("created a NetworkPolicy", err, func() error {
		return admin.NetworkingV1().NetworkPolicies(ns).Delete(ctx, np.Name, metav1.DeleteOptions{})
	})

	// A Deployment that exists (a tenant's apiservers, say) cannot be
	// taken over by a server-side apply either: it stays as it was.
	existing := d.DeepCopy()
	existing.Name = "existing"
	if existing, err = admin.AppsV1().Deployments(ns).Create(ctx, existing, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the cluster's admin could not create a Deployment: %v", err)
	}
	takeover := appsv1ac.Deployment(existing.Name, ns).WithSpec(appsv1ac.DeploymentSpec().
		WithTemplate(corev1ac.PodTemplateSpec().WithSpec(corev1ac.PodSpec().
			WithContainers(corev1ac.Container().WithName("x").WithImage("localhost/apiserver-operator/hijacked:v1")))))
	if _, err := webhook.AppsV1().Deployments(ns).Apply(ctx, takeover, metav1.ApplyOptions{FieldManager: "hijacker", Force: true, DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("the webhook's dry-run apply of a Deployment was refused: %v", err)
	}
	_, err = webhook.AppsV1().Deployments(ns).Apply(ctx, takeover, metav1.ApplyOptions{FieldManager: "hijacker", Force: true})
	refused("applied a Deployment that exists", err, func() error { return nil })
	after, err := admin.AppsV1().Deployments(ns).Get(ctx, existing.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Its generation, not its resourceVersion: the Deployment controller
	// writes its status meanwhile.
	if after.Generation != existing.Generation || len(after.Spec.Template.Spec.Containers) != 1 || after.Spec.Template.Spec.Containers[0].Image != d.Spec.Template.Spec.Containers[0].Image {
		t.Errorf("the webhook's refused apply changed the Deployment (generation %d to %d, containers %v)", existing.Generation, after.Generation, after.Spec.Template.Spec.Containers)
	}

	// The guard stops no one else.
	if _, err := admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the cluster's admin could not create a Service: %v", err)
	}
}

// The validators, which run kube-apiserver's start-up code on the values
// of any user's spec, run in a container of their own: another user than
// the webhook's, and no ServiceAccount token in their file system, while
// the webhook's process has it.
func TestOperator_ValidatorsRunWithoutTheWebhooksToken(t *testing.T) {
	installOperator(t)
	// A judgement, so that the validators have started processes.
	waitForWebhook(t)
	const token = "var/run/secrets/kubernetes.io/serviceaccount/token"
	procs := operatorProcesses(t)
	var servers, validators, webhooks int
	for _, p := range procs {
		_, err := os.Stat(filepath.Join("/proc", p.pid, "root", token))
		hasToken := err == nil
		switch {
		case strings.HasPrefix(p.cmdline, "/manager validators --socket"):
			servers++
			if p.uid != "65533" || hasToken {
				t.Errorf("the validators' server (PID %s) runs as %s with a token: %v; want 65533 without", p.pid, p.uid, hasToken)
			}
		case strings.Contains(p.cmdline, "kube-apiserver-validator-"):
			validators++
			if p.uid != "65533" || hasToken {
				t.Errorf("a validator (PID %s: %s) runs as %s with a token: %v; want 65533 without", p.pid, p.cmdline, p.uid, hasToken)
			}
		case strings.HasPrefix(p.cmdline, "/manager ") && strings.Contains(p.cmdline, "--validator-socket="):
			webhooks++
			if p.uid != "65532" || !hasToken {
				t.Errorf("the webhook (PID %s) runs as %s with a token: %v; want 65532 with one", p.pid, p.uid, hasToken)
			}
		}
	}
	t.Logf("%d webhook processes, %d validator servers, %d validators waiting or judging", webhooks, servers, validators)
	// Two replicas (three while one is replaced).
	if webhooks < 2 || servers < 2 || validators == 0 {
		t.Errorf("found %d webhook processes, %d validator servers and %d validators; want two of each server and at least one validator", webhooks, servers, validators)
	}
}

type process struct{ pid, cmdline, uid string }

// operatorProcesses are the processes of this machine that run the
// operator's image (the local cluster's containers are this machine's
// processes): their command lines and real user IDs.
func operatorProcesses(t testing.TB) []process {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []process
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		cmdline := strings.TrimSpace(strings.ReplaceAll(string(raw), "\x00", " "))
		if !strings.HasPrefix(cmdline, "/manager") && !strings.Contains(cmdline, "kube-apiserver-validator-") {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		var uid string
		for _, line := range strings.Split(string(status), "\n") {
			if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					uid = f[0]
				}
			}
		}
		out = append(out, process{pid: e.Name(), cmdline: cmdline, uid: uid})
	}
	if len(out) == 0 {
		t.Fatal("no process of the operator's image found under /proc")
	}
	return out
}
