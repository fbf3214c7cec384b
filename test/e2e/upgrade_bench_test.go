//go:build e2e

package e2e

import (
	"testing"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// BenchmarkTenantUpgrade upgrades a tenant of two apiservers from the
// older bundled minor to the newer one while a reader (a List every 100 ms)
// and a writer (a Create every 200 ms) call it: upgrade-s is from `kubectl
// patch` to every apiserver on the new version and Ready; read-p99-ms and
// write-p99-ms are the clients' 99th percentile latency over the upgrade
// (and 2 s either side); failed counts the failed calls (0 is the claim).
// One upgrade per tenant: each iteration starts a tenant of its own.
func BenchmarkTenantUpgrade(b *testing.B) {
	from, to := upgradeVersions(b)
	b.StopTimer()
	var took, readP99, writeP99, failed float64
	for range b.N {
		c, cfg, tenant := startTenant(b, "upgrade-bench", func(cfg *v1alpha1.ApiServerConfig) {
			cfg.Spec.Version = from
			cfg.Spec.MasterCount = ptrTo[int32](2)
		})
		b.StartTimer() // see BenchmarkTenantReadyz
		up := runUpgrade(b, c, cfg, tenant, to, nil)
		b.StopTimer()
		took += up.took.Seconds()
		readP99 += float64(up.reads.quantile(0.99).Milliseconds())
		writeP99 += float64(up.writes.quantile(0.99).Milliseconds())
		failed += float64(up.reads.failed.Load() + up.writes.failed.Load())
		removeTenant(b, c, cfg)
	}
	per := float64(b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(took/per, "upgrade-s")
	b.ReportMetric(readP99/per, "read-p99-ms")
	b.ReportMetric(writeP99/per, "write-p99-ms")
	b.ReportMetric(failed/per, "failed")
}
