package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	controlplanev1alpha1 "github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/test/envtest"
	"github.com/apiserver-operator/apiserver-operator/test/testport"
)

// freePort returns a loopback address with a port that stays free for the
// test (testport: no race with other processes).
func freePort(t *testing.T) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(testport.Get(t)))
}

// poll calls check every 200ms until it returns nil or attempts run out.
func poll(attempts int, check func() error) error {
	var err error
	for range attempts {
		if err = check(); err == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return err
}

func get(c *http.Client, url, token string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, http.NoBody)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func TestManager_ServesProbesSecureMetricsAndElectsALeader(t *testing.T) {
	skipControllerNameValidation = true // a second manager of this process
	env, err := envtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	t.Setenv("KUBECONFIG", env.KubeconfigPath)

	probeAddr, metricsAddr := freePort(t), freePort(t)
	const leaseName = "test-operator-lease"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, flag.NewFlagSet("manager", flag.ContinueOnError), []string{
			"--health-probe-bind-address=" + probeAddr,
			"--metrics-bind-address=" + metricsAddr,
			"--leader-elect",
			"--leader-election-namespace=default",
			"--leader-election-id=" + leaseName,
			"--webhooks=false",
			"--ownership-key-secret=default/apiserver-operator-ownership-key",
		})
	}()

	plain := &http.Client{Timeout: 2 * time.Second}
	for _, path := range []string{"/healthz", "/readyz"} {
		if err := poll(150, func() error {
			code, body, err := get(plain, "http://"+probeAddr+path, "")
			if err != nil {
				return err
			}
			if code != http.StatusOK {
				return fmt.Errorf("status %d: %s", code, body)
			}
			return nil
		}); err != nil {
			t.Fatalf("GET %s on the probe port: %v", path, err)
		}
	}

	bg := context.Background()
	if err := poll(150, func() error {
		lease := &coordinationv1.Lease{}
		if err := env.Client.Get(bg, client.ObjectKey{Namespace: "default", Name: leaseName}, lease); err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return errors.New("the lease has no holder")
		}
		return nil
	}); err != nil {
		t.Fatalf("the manager did not acquire its leader election lease: %v", err)
	}

	// Metrics are served over TLS and only to callers the cluster
	// authenticates and authorizes.
	secure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		// Without --metrics-cert-dir, as deployed by default, the manager
		// generates a self-signed certificate in memory: there is no CA to
		// verify it with. What is tested is who may read the metrics.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // G402: the default in-memory self-signed metrics certificate has no CA to trust
	}}
	metricsURL := "https://" + metricsAddr + "/metrics"
	var code int
	if err := poll(150, func() error {
		code, _, err = get(secure, metricsURL, "")
		return err
	}); err != nil {
		t.Fatalf("GET %s: %v", metricsURL, err)
	}
	if code != http.StatusUnauthorized {
		t.Fatalf("an anonymous GET of the metrics got status %d, want 401", code)
	}

	token := metricsReaderToken(t, env)
	code, body, err := get(secure, metricsURL, token)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s as a metrics reader: status %d, error %v: %s", metricsURL, code, err, body)
	}
	if !strings.Contains(body, "controller_runtime_") {
		t.Fatalf("the metrics do not include controller-runtime's:\n%.500s", body)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the manager stopped with an error: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the manager did not stop within 30s of its context being cancelled")
	}
	lease := &coordinationv1.Lease{}
	if err := env.Client.Get(bg, client.ObjectKey{Namespace: "default", Name: leaseName}, lease); err != nil {
		t.Fatalf("reading the lease: %v", err)
	}
	if lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "" {
		t.Fatalf("the manager kept the lease (holder %q) after stopping; a new leader would wait for it to expire", *lease.Spec.HolderIdentity)
	}
}

// metricsReaderToken binds config/rbac/metrics_reader_role.yaml to a new
// ServiceAccount and returns a token of it, as a Prometheus would use.
func metricsReaderToken(t *testing.T, env *envtest.Environment) string {
	t.Helper()
	ctx := context.Background()
	data, err := os.ReadFile(filepath.Join(envtest.RepoRoot(), "config", "rbac", "metrics_reader_role.yaml"))
	if err != nil {
		t.Fatalf("reading the metrics reader role: %v", err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(data, role); err != nil {
		t.Fatalf("decoding the metrics reader role: %v", err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "prometheus"}}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name}},
	}
	for _, obj := range []client.Object{role, sa, binding} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
		}
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatalf("creating a clientset: %v", err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for the metrics reader: %v", err)
	}
	return tr.Status.Token
}

func TestManager_RefusesNoReconcileWorkers(t *testing.T) {
	_, err := parseFlags(flag.NewFlagSet("manager", flag.ContinueOnError), []string{"--max-concurrent-reconciles=0"})
	if err == nil || !strings.Contains(err.Error(), "--max-concurrent-reconciles is 0: it must be at least 1") {
		t.Fatalf("parsing --max-concurrent-reconciles=0 gave %v, want a refusal that names the flag", err)
	}
}

func TestManager_TenantEgressRanges(t *testing.T) {
	o, err := parseFlags(flag.NewFlagSet("manager", flag.ContinueOnError), []string{"--tenant-egress-deny=10.88.0.0/16, 192.168.50.7,fd00::1/64", "--tenant-egress-allow=10.88.7.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(o.tenantEgress.Denied, o.tenantEgress.Allowed); got != "[10.88.0.0/16 192.168.50.7/32 fd00::/64] [10.88.7.0/24]" {
		t.Errorf("the tenants' egress ranges are %s", got)
	}
	_, err = parseFlags(flag.NewFlagSet("manager", flag.ContinueOnError), []string{"--tenant-read-budget=1048576"})
	if err == nil || !strings.Contains(err.Error(), "--tenant-read-budget is 1048576: it must hold at least one whole answer") {
		t.Errorf("a read budget below one answer gave %v, want a refusal that names the flag", err)
	}
	_, err = parseFlags(flag.NewFlagSet("manager", flag.ContinueOnError), []string{"--tenant-egress-deny=10.88.0.0/33"})
	if err == nil || !strings.Contains(err.Error(), `"10.88.0.0/33" is no address range`) {
		t.Errorf("an invalid range gave %v, want a refusal that names it", err)
	}
}

func TestManager_ControllersAndWebhookAsTwoProcesses(t *testing.T) {
	if _, err := parseFlags(flag.NewFlagSet("manager", flag.ContinueOnError), []string{"--controllers=false", "--webhooks=false"}); err == nil {
		t.Error("a manager with neither controllers nor webhooks was accepted")
	}
	// The webhook process never takes the lease: only the controllers need
	// a single leader, and the webhook must serve in every replica.
	o, err := parseFlags(flag.NewFlagSet("manager", flag.ContinueOnError), []string{"--controllers=false", "--leader-elect"})
	if err != nil {
		t.Fatal(err)
	}
	if o.leaderElect {
		t.Error("the webhook-only manager would run a leader election")
	}
}

func TestDrain_ServesOnWithReadinessFailingAfterSIGTERM(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var stopping atomic.Bool
	drained := drain(ctx, time.Hour, &stopping)
	cancel()
	if err := poll(100, func() error {
		if !stopping.Load() {
			return errors.New("not stopping yet")
		}
		return nil
	}); err != nil {
		t.Fatal("readiness does not fail after SIGTERM")
	}
	if drained.Err() != nil {
		t.Fatal("the manager stopped at once: the webhook Service would still send it requests")
	}

	ctx, cancel = context.WithCancel(context.Background())
	drained = drain(ctx, 10*time.Millisecond, &stopping)
	cancel()
	select {
	case <-drained.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the manager never stopped after the delay")
	}
	if drain(ctx, 0, &stopping) != ctx {
		t.Error("without a delay the manager should stop with the signal")
	}
}

// "manager validators" serves the validators on the socket the webhook's
// --validator-socket names, and its --probe (the container's liveness)
// fails until they answer.
func TestValidators_ServeOnTheSocketAndProbe(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(t.TempDir(), "validators.sock")
	probe := func() error {
		return runValidators(context.Background(), []string{"--socket=" + socket, "--probe"}, io.Discard)
	}
	if err := probe(); err == nil {
		t.Fatal("the probe passed with no validators serving")
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- runValidators(ctx, []string{"--socket=" + socket, "--validator-dir=" + dir}, io.Discard)
	}()
	if err := poll(50, probe); err != nil {
		t.Fatalf("the probe fails with the validators serving: %v", err)
	}
	cancel()
	if err := <-served; err != nil {
		t.Errorf("the validators did not stop cleanly: %v", err)
	}
	if err := runValidators(context.Background(), nil, io.Discard); err == nil || !strings.Contains(err.Error(), "--socket") {
		t.Errorf("no --socket gave %v, want a refusal naming it", err)
	}
}

// config/namespaced: the controllers, with --watch-namespace and the
// rights that overlay grants alone (their role in the tenants' namespace
// and their own, every ApiServerConfig read-only), start and reconcile a
// tenant of that namespace: its objects are written (its CA's Secret),
// its status reported.
func TestManager_RunsWithTheNamespacedOverlaysRightsAlone(t *testing.T) {
	skipControllerNameValidation = true // a second manager of this process
	env, err := envtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ctx := context.Background()
	const operatorNS, tenantsNS = "apiserver-operator-system", "tenants"
	for _, ns := range []string{operatorNS, tenantsNS} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	// The overlay's RBAC, as kubectl would apply it.
	out, err := exec.Command(filepath.Join(envtest.BinDir(), "kustomize"), "build", filepath.Join(envtest.RepoRoot(), "config", "namespaced")).Output()
	if err != nil {
		t.Fatalf("kustomize build config/namespaced: %v", err)
	}
	var user string
	for _, doc := range strings.Split(string(out), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		switch u.GetKind() {
		case "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "ServiceAccount":
			if err := env.Client.Create(ctx, u); err != nil {
				t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
			}
		case "Deployment":
			if u.GetName() == "apiserver-operator-controller-manager" {
				user = "system:serviceaccount:" + u.GetNamespace() + ":" + u.GetName()
				if args, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers"); len(args) == 0 ||
					!strings.Contains(fmt.Sprint(args[0]), "--watch-namespace="+tenantsNS) {
					t.Fatalf("the overlay's manager does not watch %s only", tenantsNS)
				}
			}
		}
	}
	if user == "" {
		t.Fatal("config/namespaced has no manager Deployment")
	}
	// The manager's kubeconfig: the test's, as the manager's ServiceAccount.
	kubeconfig, err := clientcmd.Load(env.KubeConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range kubeconfig.AuthInfos {
		a.Impersonate = user
		a.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + operatorNS, "system:authenticated"}
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kubeconfig, path); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", path)
	t.Setenv("POD_NAMESPACE", operatorNS)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(runCtx, flag.NewFlagSet("manager", flag.ContinueOnError), []string{
			"--health-probe-bind-address=" + freePort(t), "--metrics-bind-address=0",
			"--webhooks=false", "--watch-namespace=" + tenantsNS,
		})
	}()

	cfg := &controlplanev1alpha1.ApiServerConfig{}
	data, err := os.ReadFile(filepath.Join(envtest.RepoRoot(), "config", "samples", "controlplane_v1alpha1_apiserverconfig_minimal.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Namespace = tenantsNS
	// On the test's etcd.
	cfg.Spec.Etcd = controlplanev1alpha1.EtcdSpec{Servers: []string{env.ControlPlane.Etcd.URL.String()}, Prefix: "/tenants/tenants/minimal"}
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	var conditions []metav1.Condition
	var stopped error
	if err := poll(150, func() error {
		select {
		case err := <-done:
			stopped = fmt.Errorf("the manager stopped: %w", err)
		default:
		}
		if stopped != nil {
			return stopped
		}
		got := &controlplanev1alpha1.ApiServerConfig{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cfg), got); err != nil {
			return err
		}
		if conditions = got.Status.Conditions; len(conditions) == 0 {
			return errors.New("no status yet")
		}
		return env.Client.Get(ctx, client.ObjectKey{Namespace: tenantsNS, Name: apiserver.CASecretName(cfg.Name)}, &corev1.Secret{})
	}); err != nil {
		t.Fatalf("the manager with the namespaced rights did not reconcile the tenant: %v (conditions %+v)", err, conditions)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("the manager stopped with an error: %v", err)
	}
}

// --watch-namespace takes $WATCH_NAMESPACE, which the OLM bundle sets from
// the OperatorGroup's target namespaces: one, or none for all of them.
func TestManager_WatchesTheNamespaceOLMTargets(t *testing.T) {
	t.Setenv("WATCH_NAMESPACE", "tenants")
	o, err := parseFlags(flag.NewFlagSet("manager", flag.ContinueOnError), nil)
	if err != nil || o.watchNamespaceFilter != "tenants" {
		t.Fatalf("with WATCH_NAMESPACE=tenants the manager watches %q (%v)", o.watchNamespaceFilter, err)
	}
	t.Setenv("WATCH_NAMESPACE", "a,b")
	if _, err := parseFlags(flag.NewFlagSet("manager", flag.ContinueOnError), nil); err == nil || !strings.Contains(err.Error(), "several namespaces") {
		t.Fatalf("two target namespaces gave %v, want a refusal", err)
	}
}

// TestManager_RoleCoversEveryReconcilerPackage: make manifests writes the
// manager's role from the RBAC markers of the packages it lists, one per
// reconciler; a package of controllers/ with markers that the list leaves
// out would have its rights silently missing from the role (the webhook's
// own markers make the webhook's role).
func TestManager_RoleCoversEveryReconcilerPackage(t *testing.T) {
	makefile, err := os.ReadFile(filepath.Join(envtest.RepoRoot(), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, line := range strings.Split(string(makefile), "\n") {
		if !strings.Contains(line, "rbac:roleName=manager-role") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if p, ok := strings.CutPrefix(f, "paths="); ok {
				listed = append(listed, filepath.Clean(strings.Trim(p, `"`)))
			}
		}
	}
	if len(listed) == 0 {
		t.Fatal("no manager-role rule with paths in the Makefile")
	}
	dirs, err := filepath.Glob(filepath.Join(envtest.RepoRoot(), "controllers", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range dirs {
		rel, _ := filepath.Rel(envtest.RepoRoot(), dir)
		if rel == filepath.Join("controllers", "webhooks") {
			continue
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(f, "_test.go") && strings.Contains(string(data), "+kubebuilder:rbac") && !slices.Contains(listed, rel) {
				t.Errorf("%s has RBAC markers, but make manifests reads only %v into the manager's role: add paths=\"./%s\"", rel, listed, rel)
				break
			}
		}
	}
}
