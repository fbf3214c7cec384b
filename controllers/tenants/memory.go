package tenants

import (
	"crypto/tls"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/types"

	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantmemory"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantwatch"
)

// memory is everything the tenant reconciler keeps per tenant between
// passes, its one owner: forget drops all of it, and holds says what of
// it is left (a test proves that a deleted tenant leaves nothing). A new
// per-tenant store is a field here and an entry of stores.
type memory struct {
	// written is, per tenant, the object as the operator's last write
	// (finalizer or status) left it: see fresher.
	written tenantmemory.Map[writtenConfig]
	// generationSeen is when each tenant's current generation was first
	// reconciled, for the time-to-Ready histogram.
	generationSeen tenantmemory.Map[generationStart]
	// etcdClientTLS is the TLS configuration the tenant's last pass reached
	// etcd with (nil without TLS), for deleteData when the client
	// certificate's Secret is gone before it.
	etcdClientTLS tenantmemory.Map[*tls.Config]
	// applied is, per tenant, the resourceVersion the operator's last
	// apply of each of its objects left (by appliedKey), so that an object
	// nobody changed is not applied again.
	applied tenantmemory.Map[map[string]string]
	// removedAPIs counts the calls that hold the tenant's upgrade.
	removedAPIs tenantmemory.Map[removedAPICount]
	// operatorCredentials are the operator's own admin credentials of the
	// tenants that publish no admin kubeconfig: they live only in the
	// leader's memory, and a new leader issues its own.
	operatorCredentials tenantmemory.Map[*pki.KeyPair]

	// etcdWatch brings a tenant back when its etcd goes away or returns.
	etcdWatch *tenantwatch.Etcd
	// agentWatch brings a tenant with spec.konnectivity back when the
	// agents its servers hold change.
	agentWatch *tenantwatch.Agents
	// auditWatch brings a tenant with spec.audit.webhook back when its
	// apiservers start or stop losing audit events.
	auditWatch *tenantwatch.Audit
}

// namedStore is a store of the tenant reconciler's memory, by name.
type namedStore struct {
	name  string
	store tenantmemory.Store
}

// stores are every per-tenant store of r: its memory, the restores it
// runs, the etcd users it made on a datastore, and its metric series.
func (r *Reconciler) stores() []namedStore {
	m := &r.memory
	out := []namedStore{
		{"written", &m.written}, {"generationSeen", &m.generationSeen}, {"etcdClientTLS", &m.etcdClientTLS},
		{"applied", &m.applied}, {"removedAPIs", &m.removedAPIs}, {"operatorCredentials", &m.operatorCredentials},
		{"restores", r.restorer()},
		{"metrics", tenantmemory.Func{ForgetFunc: forgetMetrics, HoldsFunc: holdsMetrics}},
	}
	if m.etcdWatch != nil {
		out = append(out, namedStore{"etcdWatch", m.etcdWatch})
	}
	if m.agentWatch != nil {
		out = append(out, namedStore{"agentWatch", m.agentWatch})
	}
	if m.auditWatch != nil {
		out = append(out, namedStore{"auditWatch", m.auditWatch})
	}
	if d := r.Datastores; d != nil {
		user := func(key types.NamespacedName) string { return apiserver.EtcdUserName(key.Namespace, key.Name) }
		out = append(out, namedStore{"datastoreUsers", tenantmemory.Func{
			ForgetFunc: func(key types.NamespacedName) { d.ForgetUser(user(key)) },
			HoldsFunc:  func(key types.NamespacedName) bool { return d.HoldsUser(user(key)) },
		}})
	}
	return out
}

// forget drops everything kept of the tenant: deleted, its finalizer gone.
func (r *Reconciler) forget(key types.NamespacedName) {
	for _, s := range r.stores() {
		s.store.Forget(key)
	}
}

// holds names the stores that keep something of the tenant.
func (r *Reconciler) holds(key types.NamespacedName) []string {
	var out []string
	for _, s := range r.stores() {
		if s.store.Holds(key) {
			out = append(out, s.name)
		}
	}
	return out
}

// tenantSeries are the operator's metric vectors with a series per
// tenant (labels namespace and name).
var tenantSeries = []*prometheus.MetricVec{certificateExpiry.MetricVec, sizingDecisions.MetricVec, tenantwatch.KonnectivityAgents.MetricVec, tenantwatch.AuditEventsLost.MetricVec}

// forgetMetrics drops the tenant's series.
func forgetMetrics(key types.NamespacedName) {
	for _, v := range tenantSeries {
		v.DeletePartialMatch(prometheus.Labels{"namespace": key.Namespace, "name": key.Name})
	}
}

// holdsMetrics says whether a series of the tenant is left.
func holdsMetrics(key types.NamespacedName) bool {
	for _, v := range tenantSeries {
		ch := make(chan prometheus.Metric, 64)
		go func() { v.Collect(ch); close(ch) }()
		found := false
		for m := range ch {
			var d dto.Metric
			if m.Write(&d) != nil || found {
				continue
			}
			labels := map[string]string{}
			for _, l := range d.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			found = labels["namespace"] == key.Namespace && labels["name"] == key.Name
		}
		if found {
			return true
		}
	}
	return false
}
