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
	"path/filepath"
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
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

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
