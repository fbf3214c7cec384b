package tenants

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
	"github.com/apiserver-operator/apiserver-operator/controllers/controllertest"
)

// The helpers every suite shares (controllertest), on this suite's env.
var (
	eventually  = controllertest.Eventually
	conditionOf = controllertest.ConditionOf
	seal        = controllertest.Seal
)

func namespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	return env.Namespace(t, labels)
}

// tenant is an ApiServerConfig whose etcd is the test's own.
func tenant(ns, name string, mutate func(*v1alpha1.ApiServerConfigSpec)) *v1alpha1.ApiServerConfig {
	return env.Tenant(ns, name, mutate)
}

func get[T client.Object](t *testing.T, obj T) T {
	t.Helper()
	return controllertest.Get(t, env.Client, obj)
}

func waitForDeployment(t *testing.T, cfg *v1alpha1.ApiServerConfig) *appsv1.Deployment {
	t.Helper()
	return env.WaitForDeployment(t, cfg)
}

func actAsDeploymentController(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	env.ActAsDeploymentController(t, d)
}

func createReady(t *testing.T, cfg *v1alpha1.ApiServerConfig) {
	t.Helper()
	env.CreateReady(t, cfg)
}

func putKeys(t *testing.T, prefix string, n int) {
	t.Helper()
	env.PutKeys(t, prefix, n)
}

func keysUnder(t *testing.T, prefix string) int64 {
	t.Helper()
	return env.KeysUnder(t, prefix)
}

func deleteKeys(t *testing.T, prefix string) {
	t.Helper()
	env.DeleteKeys(t, prefix)
}

func putEncryptedWith(t *testing.T, k apiserver.EncryptionKey, key, plain string) {
	t.Helper()
	env.PutEncryptedWith(t, k, key, plain)
}

func waitGone(t *testing.T, cfg *v1alpha1.ApiServerConfig) {
	t.Helper()
	env.WaitGone(t, cfg)
}

func waitHeld(t *testing.T, cfg *v1alpha1.ApiServerConfig, reason string, says ...string) {
	t.Helper()
	env.WaitHeld(t, cfg, reason, says...)
}

func argValues(d *appsv1.Deployment, name string) []string {
	var out []string
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			out = append(out, v)
		}
	}
	return out
}

func TestApiServerConfigReconciler_CreatesEveryObjectAndReportsStatus(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "alpha", func(s *v1alpha1.ApiServerConfigSpec) {
		s.Etcd.Overrides = []v1alpha1.EtcdOverride{{Resource: "events", Servers: []string{env.ControlPlane.Etcd.URL.String()}}}
	})
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	d := waitForDeployment(t, cfg)

	// The Deployment runs the command line the rendering gives for the spec.
	if got := argValues(d, "etcd-servers"); !slices.Equal(got, cfg.Spec.Etcd.Servers) {
		t.Errorf("--etcd-servers is %v", got)
	}
	if got := argValues(d, "etcd-servers-overrides"); !slices.Equal(got, []string{"/events#" + env.ControlPlane.Etcd.URL.String()}) {
		t.Errorf("--etcd-servers-overrides is %v", got)
	}
	if *d.Spec.Replicas != 1 || !metav1.IsControlledBy(d, get(t, cfg)) {
		t.Errorf("the Deployment has %d replicas and owner %v", *d.Spec.Replicas, d.OwnerReferences)
	}

	// Every Secret it mounts exists, and the serving certificate covers the
	// Service's ClusterIP.
	svc := get(t, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.ServiceName("alpha")}})
	for _, name := range []string{apiserver.CASecretName("alpha"), apiserver.ServingSecretName("alpha"), apiserver.KubeletClientSecretName("alpha"),
		apiserver.FrontProxyCASecretName("alpha"), apiserver.FrontProxyClientSecretName("alpha"), apiserver.ServiceAccountSecretName("alpha"),
		apiserver.AdminKubeconfigSecretName("alpha")} {
		get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	}
	eventually(t, 20*time.Second, "the serving certificate covers the Service ClusterIP", func() error {
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: apiserver.ServingSecretName("alpha")}, s); err != nil {
			return err
		}
		kp, err := pki.ParseKeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
		if err != nil {
			return err
		}
		if err := kp.Cert().VerifyHostname(svc.Spec.ClusterIP); err != nil {
			return err
		}
		return kp.Cert().VerifyHostname("kubernetes.default.svc.cluster.local")
	})

	// Status: reachable etcd, certificates, not yet Ready and no version
	// (no pod runs).
	eventually(t, 20*time.Second, "status reports certificates, etcd and the endpoint", func() error {
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		for typ, want := range map[string]metav1.ConditionStatus{
			v1alpha1.ConditionCertificatesReady: metav1.ConditionTrue, v1alpha1.ConditionEtcdAvailable: metav1.ConditionTrue,
			v1alpha1.ConditionReady: metav1.ConditionFalse, v1alpha1.ConditionReconciling: metav1.ConditionTrue,
			v1alpha1.ConditionStalled: metav1.ConditionFalse,
		} {
			if c := conditionOf(got, typ); c == nil || c.Status != want {
				return fmt.Errorf("condition %s is %v, want %s", typ, c, want)
			}
		}
		if got.Status.Endpoint != "https://alpha-apiserver."+ns+".svc:443" || got.Status.Selector == "" || got.Status.Version != "" ||
			got.Status.AdminKubeconfigSecretName != apiserver.AdminKubeconfigSecretName("alpha") || len(got.Status.Certificates) == 0 ||
			got.Status.ObservedGeneration != got.Generation || !slices.Contains(got.Finalizers, Finalizer) {
			return fmt.Errorf("status is incomplete: %+v", got.Status)
		}
		return nil
	})

	// Once the apiservers are ready, so is the ApiServerConfig.
	actAsDeploymentController(t, d)
	eventually(t, 20*time.Second, "Ready turns True", func() error {
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		if c := conditionOf(got, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Ready is %v", c)
		}
		if c := conditionOf(got, v1alpha1.ConditionReconciling); c == nil || c.Status != metav1.ConditionFalse {
			return fmt.Errorf("Reconciling is %v", c)
		}
		if got.Status.ReadyReplicas != 1 || got.Status.Replicas != 1 {
			return fmt.Errorf("replicas %d, ready %d", got.Status.Replicas, got.Status.ReadyReplicas)
		}
		if got.Status.Version != v1alpha1.BundledVersion {
			return fmt.Errorf("status.version is %q, want %s", got.Status.Version, v1alpha1.BundledVersion)
		}
		return nil
	})
}

func TestApiServerConfigReconciler_ReportsTheUnreachableEtcdEndpoint(t *testing.T) {
	ns := namespace(t, nil)
	cfg := tenant(ns, "noetcd", func(s *v1alpha1.ApiServerConfigSpec) {
		s.Etcd.Overrides = []v1alpha1.EtcdOverride{{Resource: "events", Servers: []string{"http://127.0.0.1:1"}}}
	})
	if err := env.Client.Create(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "EtcdAvailable turns False naming the endpoint", func() error {
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		c := conditionOf(got, v1alpha1.ConditionEtcdAvailable)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonEtcdUnreachable || !strings.Contains(c.Message, "http://127.0.0.1:1") {
			return fmt.Errorf("EtcdAvailable is %v", c)
		}
		if r := conditionOf(got, v1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionFalse || r.Reason != v1alpha1.ReasonEtcdUnreachable {
			return fmt.Errorf("Ready is %v", r)
		}
		// Why is the operator's log's: status would tell whoever writes
		// a spec which addresses the operator reaches.
		for _, c := range got.Status.Conditions {
			for _, cause := range []string{"connection refused", "dial tcp"} {
				if strings.Contains(c.Message, cause) {
					t.Fatalf("%s says %q: %q", c.Type, cause, c.Message)
				}
			}
		}
		return nil
	})
}

func TestApiServerConfigReconciler_CASurvivesEditsAndRestarts(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "stable", nil)
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	waitForDeployment(t, cfg)
	caKey := client.ObjectKey{Namespace: ns, Name: apiserver.CASecretName("stable")}
	ca := &corev1.Secret{}
	if err := env.Client.Get(ctx, caKey, ca); err != nil {
		t.Fatal(err)
	}
	servingBefore := get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.ServingSecretName("stable")}})

	// A new SAN renews the serving certificate, signed by the same CA.
	patch := client.MergeFrom(get(t, cfg).DeepCopy())
	cfg.Spec.Serving.ExtraSANs = []string{"api.stable.example.com"}
	if err := env.Client.Patch(ctx, cfg, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the serving certificate gets the new SAN", func() error {
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(servingBefore), s); err != nil {
			return err
		}
		kp, err := pki.ParseKeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
		if err != nil {
			return err
		}
		return kp.Cert().VerifyHostname("api.stable.example.com")
	})

	// An operator restart (a reconciler with no memory) keeps the CA.
	fresh := &Reconciler{Ownership: ownershipKey, Client: env.Client, APIReader: env.Client, Scheme: env.Scheme, Clock: reconciler.Clock,
		ResizePolicy: reconciler.ResizePolicy, AutoSizingInterval: time.Second}
	if _, err := fresh.Reconcile(ctx, reconcileRequest(cfg)); err != nil {
		t.Fatalf("reconciling after a restart: %v", err)
	}
	after := &corev1.Secret{}
	if err := env.Client.Get(ctx, caKey, after); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(after.Data[corev1.TLSCertKey], ca.Data[corev1.TLSCertKey]) || !bytes.Equal(after.Data[corev1.TLSPrivateKeyKey], ca.Data[corev1.TLSPrivateKeyKey]) {
		t.Fatal("the CA changed after a spec edit and an operator restart")
	}
}

func TestApiServerConfigReconciler_ServingRenewalRollsNothingButANewServiceAccountKeyRolls(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "rolls", nil)
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	d := waitForDeployment(t, cfg)
	hash := func() string {
		return get(t, &appsv1.Deployment{ObjectMeta: d.ObjectMeta}).Spec.Template.Annotations[apiserver.ConfigHashAnnotation]
	}
	before := hash()
	serving := get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.ServingSecretName("rolls")}})
	patch := client.MergeFrom(get(t, cfg).DeepCopy())
	cfg.Spec.Serving.ExtraSANs = []string{"renewed.example.com"}
	if err := env.Client.Patch(ctx, cfg, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the serving certificate is renewed", func() error {
		s := get(t, &corev1.Secret{ObjectMeta: serving.ObjectMeta})
		if bytes.Equal(s.Data[corev1.TLSCertKey], serving.Data[corev1.TLSCertKey]) {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	// The pass that renewed it applied the Deployment, then wrote status.
	waitForPass(t, cfg)
	if got := hash(); got != before {
		t.Fatalf("renewing the serving certificate (re-read by kube-apiserver) rolled the pods: hash %s -> %s", before, got)
	}

	// kube-apiserver reads its service-account keys only at start.
	if err := env.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.ServiceAccountSecretName("rolls")}}); err != nil {
		t.Fatal(err)
	}
	// Within a minute: the suite's other packages share the CPU with it.
	eventually(t, time.Minute, "a new service-account key rolls the pods", func() error {
		if hash() == before {
			return fmt.Errorf("the config hash did not change")
		}
		return nil
	})
}

func TestApiServerConfigReconciler_ScalesWithKubectlScale(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "scaled", func(s *v1alpha1.ApiServerConfigSpec) {
		s.EndpointReconcilerType = v1alpha1.EndpointReconcilerMasterCount
	})
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	d := waitForDeployment(t, cfg)
	pdbKey := client.ObjectKey{Namespace: ns, Name: apiserver.DeploymentName("scaled")}
	for _, replicas := range []int32{3, 1, 0} {
		out, err := exec.Command(filepath.Join(env.BinDir, "kubectl"), "--kubeconfig", env.KubeconfigPath, "-n", ns,
			"scale", "asc/scaled", fmt.Sprintf("--replicas=%d", replicas)).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl scale --replicas=%d: %v\n%s", replicas, err, out)
		}
		eventually(t, 20*time.Second, fmt.Sprintf("the Deployment, --apiserver-count and the budget follow masterCount %d", replicas), func() error {
			got := get(t, &appsv1.Deployment{ObjectMeta: d.ObjectMeta})
			if *got.Spec.Replicas != replicas {
				return fmt.Errorf("replicas %d", *got.Spec.Replicas)
			}
			if a := argValues(got, "apiserver-count"); !slices.Equal(a, []string{fmt.Sprint(max(replicas, 1))}) {
				return fmt.Errorf("--apiserver-count is %v", a)
			}
			err := env.Client.Get(ctx, pdbKey, &policyv1.PodDisruptionBudget{})
			switch {
			case replicas > 1 && err != nil:
				return fmt.Errorf("no disruption budget with %d apiservers: %w", replicas, err)
			case replicas <= 1 && err == nil:
				return fmt.Errorf("a disruption budget remains with %d apiserver(s)", replicas)
			case replicas <= 1 && !apierrors.IsNotFound(err):
				return fmt.Errorf("reading the disruption budget with %d apiserver(s): %w", replicas, err)
			}
			return nil
		})
	}
	eventually(t, 20*time.Second, "masterCount 0 is reported as hibernated", func() error {
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		if c := conditionOf(got, v1alpha1.ConditionAvailable); c == nil || c.Reason != v1alpha1.ReasonHibernated {
			return fmt.Errorf("Available is %v", c)
		}
		if c := conditionOf(got, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonHibernated {
			return fmt.Errorf("Ready is %v", c)
		}
		return nil
	})
	// Certificates are kept while hibernated.
	get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.CASecretName("scaled")}})
}

func TestApiServerConfigReconciler_DeletionCleansUpAndRetainKeepsTheCA(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	for _, retention := range []v1alpha1.PKIRetention{"Delete", "Retain"} {
		name := "gone-" + strings.ToLower(string(retention))
		cfg := tenant(ns, name, func(s *v1alpha1.ApiServerConfigSpec) {
			s.Certificates.PKIRetention = retention
			s.MasterCount = ptr.To[int32](2)
		})
		if err := env.Client.Create(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		waitForDeployment(t, cfg)
		eventually(t, 20*time.Second, "the budget exists", func() error {
			return env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: apiserver.DeploymentName(name)}, &policyv1.PodDisruptionBudget{})
		})
		if err := env.Client.Delete(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		eventually(t, 20*time.Second, "the ApiServerConfig is gone", func() error {
			err := env.Client.Get(ctx, client.ObjectKeyFromObject(cfg), &v1alpha1.ApiServerConfig{})
			switch {
			case apierrors.IsNotFound(err):
				return nil
			case err != nil:
				return fmt.Errorf("reading it: %w", err)
			}
			return errors.New("still there")
		})
		left := map[string]bool{}
		for _, list := range []client.ObjectList{&corev1.SecretList{}, &corev1.ConfigMapList{}, &corev1.ServiceList{}, &appsv1.DeploymentList{}, &policyv1.PodDisruptionBudgetList{}, &networkingv1.NetworkPolicyList{}} {
			if err := env.Client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{apiserver.NameLabel: name}); err != nil {
				t.Fatal(err)
			}
			items, _ := meta.ExtractList(list)
			for _, item := range items {
				obj := item.(client.Object)
				if obj.GetDeletionTimestamp() == nil {
					left[obj.GetName()] = len(obj.GetOwnerReferences()) == 0
				}
			}
		}
		want := map[string]bool{}
		if retention == "Retain" {
			// The encryption key too: what it encrypted in etcd outlives
			// the ApiServerConfig.
			for _, s := range []string{apiserver.CASecretName(name), apiserver.FrontProxyCASecretName(name), apiserver.ServiceAccountSecretName(name), apiserver.EncryptionSecretName(name)} {
				want[s] = true // kept, and no longer owned
			}
		}
		if fmt.Sprint(left) != fmt.Sprint(want) {
			t.Errorf("pkiRetention %s: left behind %v (name: unowned), want %v", retention, left, want)
		}
	}
}

func TestApiServerConfigReconciler_PodsPassRestrictedPodSecurityAdmission(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"})
	cfg := tenant(ns, "restricted", nil)
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	d := waitForDeployment(t, cfg)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "apiserver-dry-run", Labels: d.Spec.Template.Labels, Annotations: d.Spec.Template.Annotations},
		Spec:       d.Spec.Template.Spec,
	}
	if err := env.Client.Create(ctx, pod, client.DryRunAll); err != nil {
		t.Fatalf("a pod of the apiserver Deployment is refused in a restricted namespace: %v", err)
	}
	// The check is real: a privileged variant is refused there.
	pod.Spec.Containers[0].SecurityContext.Privileged = ptr.To(true)
	if err := env.Client.Create(ctx, pod, client.DryRunAll); err == nil {
		t.Fatal("Pod Security admission accepted a privileged pod in a restricted namespace: the check above proves nothing")
	}
}

func reconcileRequest(cfg *v1alpha1.ApiServerConfig) ctrl.Request {
	return ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cfg)}
}

// A new tenant's events say what happened once each: the certificates were
// issued once (its Service, and so the ClusterIP the serving certificate
// names, comes first), and Ready became True; the Progressing it started in
// is no event.
func TestApiServerConfigReconciler_NewTenantEventsSayEachThingOnce(t *testing.T) {
	ns := namespace(t, nil)
	cfg := tenant(ns, "told", nil)
	createReady(t, cfg)
	var reasons []string
	eventually(t, 20*time.Second, "the Ready event is recorded", func() error {
		list := &eventsv1.EventList{}
		if err := env.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return err
		}
		reasons = reasons[:0]
		for _, e := range list.Items {
			if e.Regarding.Name == cfg.Name {
				for range max(1, e.DeprecatedCount, seriesCount(e.Series)) {
					reasons = append(reasons, e.Reason+": "+e.Note)
				}
			}
		}
		if !slices.ContainsFunc(reasons, func(r string) bool { return strings.HasPrefix(r, v1alpha1.ReasonReconciled+": Ready is True") }) {
			return fmt.Errorf("no Ready event yet: %q", reasons)
		}
		return nil
	})
	issued := 0
	for _, r := range reasons {
		if strings.HasPrefix(r, v1alpha1.ReasonCertificatesIssued+":") {
			issued++
		}
		if strings.HasPrefix(r, v1alpha1.ReasonProgressing+":") {
			t.Errorf("an event for the Progressing a new object starts in: %q", r)
		}
	}
	if issued != 1 {
		t.Errorf("%d CertificatesIssued events, want 1: %q", issued, reasons)
	}
}

func seriesCount(s *eventsv1.EventSeries) int32 {
	if s == nil {
		return 0
	}
	return s.Count
}

// waitForPass waits until a pass of the operator completed for cfg's
// current generation: the conditions it writes last, after every object was
// applied, describe that generation (the early Reconciling mark writes only
// Ready, Reconciling and Stalled).
func waitForPass(t *testing.T, cfg *v1alpha1.ApiServerConfig) {
	t.Helper()
	eventually(t, 20*time.Second, "a pass completes for the current generation", func() error {
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		if c := conditionOf(got, v1alpha1.ConditionCertificatesReady); c == nil || c.ObservedGeneration != got.Generation {
			return fmt.Errorf("CertificatesReady is %v at generation %d", c, got.Generation)
		}
		return nil
	})
}
