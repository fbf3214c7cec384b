package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/test/burst"
	"github.com/apiserver-operator/apiserver-operator/test/envtest"
)

// BenchmarkAdmission measures what a user's apply waits for at admission:
// server-side dry-run creates of ApiServerConfigs against the running
// operator's webhook, which runs the bundled kube-apiserver's own code on
// each rendered spec. Every spec is new (a distinct extra argument), so no
// answer is reused. admitted is a valid spec, refused one that
// kube-apiserver refuses when it builds its configuration (the slowest
// refusal), repeated the same valid spec applied again (a GitOps tool's
// sync: answered from the operator's memory), catalog-only the checks the webhook ran before it asked
// kube-apiserver, in the benchmark's process.
func BenchmarkAdmission(b *testing.B) {
	s := &scope{TB: b}
	defer s.close()
	env, ns := startAdmission(b, s)
	spec := func(i int, refused bool) *v1alpha1.ApiServerConfig {
		cfg := &v1alpha1.ApiServerConfig{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: fmt.Sprintf("t%d", i)},
			Spec: v1alpha1.ApiServerConfigSpec{
				Etcd: v1alpha1.EtcdSpec{Servers: []string{"https://etcd:2379"}},
				// A distinct value each time: no answer can be reused.
				ExtraArgs: []v1alpha1.ExtraArg{{Name: "max-connection-bytes-per-sec", Value: strconv.Itoa(1<<20 + i)}},
			},
		}
		if refused {
			cfg.Spec.Admission.EnablePlugins = []string{"ImagePolicyWebhook"}
		}
		return cfg
	}
	// The webhook serves once the first dry run goes through.
	for deadline := time.Now().Add(time.Minute); ; {
		err := env.Client.Create(context.Background(), spec(-1, false), client.DryRunAll)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the webhook did not admit a valid spec within a minute: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	for _, mode := range []string{"admitted", "refused", "repeated", "catalog-only"} {
		b.Run(mode, func(b *testing.B) {
			latencies := make([]time.Duration, 0, b.N)
			for i := range b.N {
				cfg := spec(i, mode == "refused")
				if mode == "repeated" {
					cfg = spec(-1, false)
				}
				start := time.Now()
				switch mode {
				case "catalog-only":
					if errs, _ := apiserver.Validate(cfg); len(errs) > 0 {
						b.Fatal(errs.ToAggregate())
					}
				default:
					err := env.Client.Create(context.Background(), cfg, client.DryRunAll)
					if (err != nil) != (mode == "refused") {
						b.Fatalf("%s spec: dry run gave %v", mode, err)
					}
				}
				latencies = append(latencies, time.Since(start))
			}
			sorted := slices.Clone(latencies)
			slices.Sort(sorted)
			b.ReportMetric(float64(percentile(sorted, 0.50).Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(percentile(sorted, 0.99).Microseconds())/1000, "p99-ms")
		})
	}
}

// startAdmission starts a kube-apiserver with the operator's webhook
// configuration and the manager serving it, and a namespace for the specs.
func startAdmission(b *testing.B, s *scope) (*envtest.Environment, *corev1.Namespace) {
	b.Helper()
	env, err := envtest.Start(envtest.WithWebhooks())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.Stop() })
	startOperator(s, env, webhookArgs(env)...)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "admission"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		b.Fatal(err)
	}
	return env, ns
}

// webhookArgs make the manager serve env's webhook configuration, judging
// with the validators built into bin/.
func webhookArgs(env *envtest.Environment) []string {
	wh := env.WebhookInstallOptions
	return []string{"--webhooks=true", "--webhook-cert-management=external",
		"--webhook-cert-dir", wh.LocalServingCertDir, "--webhook-bind-host", wh.LocalServingHost,
		"--webhook-port", strconv.Itoa(wh.LocalServingPort), "--validator-dir", envtest.BinDir()}
}

// BenchmarkAdmissionBurst measures a fleet's first sync as admission sees
// it: BENCH_BURST_SPECS distinct specs (default 1 000; each tenant with its
// own name, etcd servers, prefix and SANs, as a platform creates them),
// applied as server-side dry runs by BENCH_BURST_CLIENTS parallel clients
// (default 32) against the running operator's webhook. Every spec must be
// admitted: a refusal (one for lack of time included) fails the benchmark.
// It reports the latency percentiles one apply waits for and the specs
// admitted per second.
func BenchmarkAdmissionBurst(b *testing.B) {
	specs, clients := intFromEnv(b, "BENCH_BURST_SPECS", 1000), intFromEnv(b, "BENCH_BURST_CLIENTS", 32)
	s := &scope{TB: b}
	defer s.close()
	env, ns := startAdmission(b, s)
	cfg := rest.CopyConfig(env.Config)
	// The clients' own rate limit is not what is measured.
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.New(cfg, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	template := &v1alpha1.ApiServerConfig{}
	// The webhook serves once the first dry run goes through.
	for deadline := time.Now().Add(time.Minute); ; {
		err := c.Create(context.Background(), burst.Tenant(template, ns.Name, "warm", 0), client.DryRunAll)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the webhook did not admit a valid spec within a minute: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.ResetTimer()
	for run := range b.N {
		fleet := make([]*v1alpha1.ApiServerConfig, specs)
		for i := range fleet {
			fleet[i] = burst.Tenant(template, ns.Name, fmt.Sprintf("r%d", run), i)
		}
		res := burst.Run(context.Background(), c, fleet, clients)
		if len(res.Failures) > 0 {
			b.Fatalf("%d of %d distinct valid specs were refused; the first: %v", len(res.Failures), specs, res.Failures[0])
		}
		res.Report(b.ReportMetric)
	}
}
