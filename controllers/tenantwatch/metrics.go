package tenantwatch

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	etcdWatchRounds = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "apiserver_operator_etcd_watch_rounds_total",
		Help: "Completed looks of the etcd watch at every etcd server the tenants use.",
	})
	etcdWatchLooks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "apiserver_operator_etcd_watch_looks_total",
		Help: "Status requests the etcd watch sent, one per etcd server and client identity per round.",
	})
	// KonnectivityAgents has a series per apiserver pod of a tenant.
	KonnectivityAgents = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "apiserver_operator_konnectivity_agents",
		Help: "Konnectivity agents that hold a tunnel to the konnectivity server of each apiserver pod of an ApiServerConfig with spec.konnectivity, as last looked at; no series for a server that could not be looked at.",
	}, []string{"namespace", "name", "pod"})
	// AuditEventsLost has a series per audit plugin of a tenant.
	AuditEventsLost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "apiserver_operator_audit_events_lost_total",
		Help: "Audit events the apiservers of an ApiServerConfig with spec.audit.webhook lost, by kube-apiserver's audit plugin (webhook: not taken by the webhook; buffered: dropped from a full buffer; truncate: cut for their size), as read from their apiserver_audit_error_total.",
	}, []string{"namespace", "name", "plugin"})
)

func init() {
	metrics.Registry.MustRegister(etcdWatchRounds, etcdWatchLooks, KonnectivityAgents, AuditEventsLost)
}
