//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// BenchmarkTenantEncryptionRotation rotates the encryption key of a tenant
// that stores BENCH_SECRETS Secrets (10 000 by default), with the rewrite
// unpaced (rewritesPerSecond at its maximum) so that the machine sets the
// pace: reencrypt-objects/s is the Secrets over the time from the new key
// encrypting everywhere to the proof in etcd (SignWithNew to PruneOld in
// status); rotation-s is the whole rotation, from the annotation to
// Stable, with its three rollouts of two apiservers.
func BenchmarkTenantEncryptionRotation(b *testing.B) {
	n := 10000
	if v := os.Getenv("BENCH_SECRETS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("BENCH_SECRETS=%q: want a positive number", v)
		}
	}
	b.StopTimer()
	c, cfg, tenant := startTenant(b, "reencrypted", func(cfg *v1alpha1.ApiServerConfig) {
		cfg.Spec.MasterCount = ptrTo[int32](2)
		cfg.Spec.Encryption = &v1alpha1.EncryptionSpec{Provider: v1alpha1.EncryptionSecretbox, RewritesPerSecond: ptrTo[int32](10000)}
	})
	defer removeTenant(b, c, cfg)
	createSecrets(b, tenant, n, func(i int) (string, []byte) {
		return fmt.Sprintf("bench-%d", i), []byte(fmt.Sprintf("secret number %d", i))
	})

	var throughput, total float64
	for i := range b.N {
		b.StartTimer() // see BenchmarkTenantReadyz
		start := time.Now()
		managementKubectl(b, "-n", cfg.Namespace, "annotate", "--overwrite", "asc/"+cfg.Name, fmt.Sprintf("%s=bench-%d", v1alpha1.RotateEncryptionKeyAnnotation, i))
		writing := waitPhaseSince(b, c, cfg, "SignWithNew", 10*time.Minute)
		proven := waitPhaseSince(b, c, cfg, "PruneOld", 30*time.Minute)
		waitPhase(b, c, cfg, "encryption-key", "Stable", 10*time.Minute)
		b.StopTimer()
		total += time.Since(start).Seconds()
		throughput += float64(n) / max(proven.Sub(writing).Seconds(), 1)
	}
	per := float64(b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(throughput/per, "reencrypt-objects/s")
	b.ReportMetric(total/per, "rotation-s")
}

// waitPhaseSince waits for the encryption key's rotation to reach phase
// and returns when it entered it, as status says (to the second).
func waitPhaseSince(b testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, phase string, timeout time.Duration) time.Time {
	b.Helper()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		got := &v1alpha1.ApiServerConfig{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(cfg), got); err != nil {
			b.Fatal(err)
		}
		for _, r := range got.Status.Rotations {
			if r.Name == "encryption-key" && r.Phase == phase && r.Since != nil {
				return r.Since.Time
			}
		}
	}
	b.Fatalf("the encryption key's rotation did not reach %s within %s", phase, timeout)
	return time.Time{}
}
