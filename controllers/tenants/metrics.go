package tenants

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

var (
	certificateExpiry = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "apiserver_operator_certificate_expiry_timestamp_seconds",
		Help: "When each certificate of an ApiServerConfig expires, as a Unix time.",
	}, []string{"namespace", "name", "certificate"})
	timeToReady = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "apiserver_operator_generation_to_ready_seconds",
		Help:    "Time from a new generation of an ApiServerConfig to its Ready condition for that generation.",
		Buckets: prometheus.ExponentialBuckets(0.5, 2, 12),
	})
	sizingDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "apiserver_operator_cache_sizing_resizes_total",
		Help: "Auto cache-sizing decisions that changed the sizing of an ApiServerConfig.",
	}, []string{"namespace", "name"})
	reconcileErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "apiserver_operator_reconcile_errors_total",
		Help: "Reconcile passes that failed, by the step that failed.",
	}, []string{"step"})
)

func init() {
	metrics.Registry.MustRegister(certificateExpiry, timeToReady, sizingDecisions, reconcileErrors)
}

func recordCertificateExpiry(cfg *v1alpha1.ApiServerConfig, certs []v1alpha1.CertificateStatus) {
	for _, c := range certs {
		certificateExpiry.WithLabelValues(cfg.Namespace, cfg.Name, c.Name).Set(float64(c.NotAfter.Unix()))
	}
}
