// Package controllertest is what the reconcilers' tests run against: the
// bundled kube-apiserver and etcd with the operator's CRDs and its
// admission webhook (the validators of each bundled version), a manager
// whose cache is the operator's (managercache), and the helpers that
// create tenants and wait for what a user would see. Each reconciler
// package's TestMain calls Run with the reconcilers it runs; the tenant
// reconciler runs in every suite, since every other reconciler works on a
// tenant.
package controllertest

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/admission"
	"github.com/apiserver-operator/apiserver-operator/apiserver/validatorpool"
	"github.com/apiserver-operator/apiserver-operator/controllers/managercache"
	"github.com/apiserver-operator/apiserver-operator/controllers/ownership"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantindex"
	"github.com/apiserver-operator/apiserver-operator/controllers/webhooks"
	"github.com/apiserver-operator/apiserver-operator/test/envtest"
)

// Env is the running environment of a package's tests.
type Env struct {
	*envtest.Environment
	// Ownership is the key every reconciler of the tests proves with.
	Ownership *apiserver.Ownership
	// TenantIndex is admission's index of every ApiServerConfig.
	TenantIndex *tenantindex.Tenants
}

// Run runs the package's tests in an Env: setup adds the reconcilers under
// test to mgr. It returns the code to exit with (1 when the environment
// did not start, which it prints).
func Run(m *testing.M, what string, setup func(e *Env, mgr manager.Manager) error) int {
	code, err := run(m, setup)
	if err != nil {
		fmt.Fprintf(os.Stderr, "Setting up the test environment of the %s: %v\n", what, err)
		return 1
	}
	return code
}

func run(m *testing.M, setup func(*Env, manager.Manager) error) (int, error) {
	// The reconcilers' logs, for a failing test; TEST_LOGS=1 shows them.
	if os.Getenv("TEST_LOGS") != "" {
		ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	} else {
		ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	}
	started, err := envtest.Start(envtest.WithWebhooks())
	if err != nil {
		return 0, err
	}
	defer func() { _ = started.Stop() }()
	e := &Env{Environment: started}
	// The ownership key, as the manager makes it at its first start (in
	// kube-system: the tests' namespaces come and go).
	if e.Ownership, err = ownership.Load(context.Background(), e.Client, types.NamespacedName{Namespace: "kube-system", Name: ownership.DefaultSecretName}); err != nil {
		return 0, err
	}
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
		Scheme:        e.Scheme,
		Cache:         managercache.CacheOptions("", e.Ownership),
		Metrics:       metricsserver.Options{BindAddress: "0"},
		WebhookServer: e.WebhookServer(),
	})
	if err != nil {
		return 0, fmt.Errorf("creating the manager: %w", err)
	}
	validators := validatorpool.NewPool(envtest.BinDir())
	defer validators.Close()
	if e.TenantIndex, err = tenantindex.New(e.Config, e.Scheme, tenantindex.WithMarkProofs(e.Ownership)); err != nil {
		return 0, err
	}
	if err := mgr.Add(e.TenantIndex); err != nil {
		return 0, err
	}
	judge := admission.Admission{Validator: validators, Gates: &admission.Gates{ImageRepositories: admission.DefaultImageRepositories(apiserver.DefaultImageRepository)}}
	if err := webhooks.SetupWithManager(mgr, judge, "", e.TenantIndex); err != nil {
		return 0, err
	}
	if err := setup(e, mgr); err != nil {
		return 0, err
	}
	return e.RunManager(m, mgr, e.TenantIndex.WaitForCacheSync)
}

// Eventually polls check every 100ms for up to timeout; the last error
// fails the test.
func Eventually(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Namespace creates a namespace of its own for a test.
func (e *Env) Namespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "reconcile-", Labels: labels}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// Tenant is an ApiServerConfig whose etcd is the environment's own, under
// a prefix of its namespace and name.
func (e *Env) Tenant(ns, name string, mutate func(*v1alpha1.ApiServerConfigSpec)) *v1alpha1.ApiServerConfig {
	cfg := &v1alpha1.ApiServerConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ApiServerConfigSpec{
			Etcd: v1alpha1.EtcdSpec{Servers: []string{e.ControlPlane.Etcd.URL.String()}, Prefix: "/tenants/" + ns + "/" + name},
		},
	}
	if mutate != nil {
		mutate(&cfg.Spec)
	}
	return cfg
}

// Get reads obj as the cluster holds it; a failure fails the test.
func Get[T client.Object](t *testing.T, c client.Reader, obj T) T {
	t.Helper()
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatalf("reading %T %s: %v", obj, obj.GetName(), err)
	}
	return obj
}

// ConditionOf is the condition t of cfg, or nil.
func ConditionOf(cfg *v1alpha1.ApiServerConfig, t string) *metav1.Condition {
	return meta.FindStatusCondition(cfg.Status.Conditions, t)
}

// PrintedRow is the row `kubectl get <resource> -o wide` prints for obj, by
// column name: what the CRD's printer columns show.
func (e *Env) PrintedRow(t *testing.T, resource string, obj client.Object) map[string]string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	err = cs.CoreV1().RESTClient().Get().AbsPath("/apis", v1alpha1.GroupVersion.Group, v1alpha1.GroupVersion.Version, "namespaces", obj.GetNamespace(), resource, obj.GetName()).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Do(context.Background()).Into(&table)
	if err != nil {
		t.Fatalf("reading the printed columns of %s %s: %v", resource, obj.GetName(), err)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("%d rows printed for %s %s", len(table.Rows), resource, obj.GetName())
	}
	row := map[string]string{}
	for i, c := range table.ColumnDefinitions {
		if i < len(table.Rows[0].Cells) && table.Rows[0].Cells[i] != nil {
			row[c.Name] = fmt.Sprint(table.Rows[0].Cells[i])
		}
	}
	return row
}

// WaitForDeployment waits for the apiserver Deployment of cfg.
func (e *Env) WaitForDeployment(t *testing.T, cfg *v1alpha1.ApiServerConfig) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: apiserver.DeploymentName(cfg.Name)}}
	Eventually(t, 30*time.Second, "the Deployment appears", func() error {
		return e.Client.Get(context.Background(), client.ObjectKeyFromObject(d), d)
	})
	return d
}

// ActAsDeploymentController sets the Deployment's status as if all its
// replicas were up to date and ready (envtest runs no controller-manager).
func (e *Env) ActAsDeploymentController(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	Eventually(t, 10*time.Second, "the Deployment status is set", func() error {
		current := &appsv1.Deployment{}
		if err := e.Client.Get(context.Background(), client.ObjectKeyFromObject(d), current); err != nil {
			return err
		}
		n := *current.Spec.Replicas
		current.Status = appsv1.DeploymentStatus{ObservedGeneration: current.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
		return e.Client.Status().Update(context.Background(), current)
	})
}

// CreateReady creates cfg, acts as the Deployment controller for its
// apiservers and waits until cfg is Ready.
func (e *Env) CreateReady(t *testing.T, cfg *v1alpha1.ApiServerConfig) {
	t.Helper()
	if err := e.Client.Create(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	e.ActAsDeploymentController(t, e.WaitForDeployment(t, cfg))
	Eventually(t, 20*time.Second, "the object converges to Ready", func() error {
		got := Get(t, e.Client, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		if c := ConditionOf(got, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("the tenant is not Ready: %v", c)
		}
		return nil
	})
}

// CredentialRequest is an AdminCredentialRequest of tenantName for user in
// groups, for seconds.
func CredentialRequest(ns, name, tenantName, user string, seconds int32, groups ...string) *v1alpha1.AdminCredentialRequest {
	return &v1alpha1.AdminCredentialRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.AdminCredentialRequestSpec{ApiServerConfigName: tenantName, User: user, Groups: groups, ExpirationSeconds: seconds},
	}
}

// RequestReady is the Ready condition of acr, or nil.
func RequestReady(acr *v1alpha1.AdminCredentialRequest) *metav1.Condition {
	return meta.FindStatusCondition(acr.Status.Conditions, v1alpha1.ConditionReady)
}

// CounterValue is what counter counts.
func CounterValue(t *testing.T, counter prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := counter.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
