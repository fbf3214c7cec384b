package tenantio

import (
	"context"
	"crypto/tls"

	"k8s.io/apimachinery/pkg/types"

	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// Reach is every way the operator reaches a tenant, the one interface a
// step of the tenant reconciler goes through: its etcd servers (Etcd, and
// its user on a platform's datastore), its API and the /metrics of its
// apiservers (API), and the konnectivity servers of its apiserver pods
// (KonnectivityAgents). Real is what the operator runs; tenantiofake.Reach
// is an in-memory one, so that a step is tested without a cluster.
type Reach interface {
	Etcd
	// EnsureUser makes the etcd user name hold exactly perms (a role of
	// its name), as root of the servers.
	EnsureUser(ctx context.Context, endpoints []string, tlsConfig *tls.Config, name string, perms []apiserver.EtcdKeyRange) error
	// RemoveUser removes the etcd user name and its role.
	RemoveUser(ctx context.Context, endpoints []string, tlsConfig *tls.Config, name string) error
	// API opens the tenant's API as its administrator.
	API(ctx context.Context, t APITarget) (API, error)
	// KonnectivityAgents counts the agents that hold a tunnel to the
	// konnectivity server of the apiserver pod at podIP.
	KonnectivityAgents(ctx context.Context, podIP string) (int32, error)
	// V3 is the operator's own etcd client, when the reach has one: kept
	// connections (the etcd watch) and bulk writes (a restore) need it.
	V3() (EtcdV3, bool)
}

// APITarget is where a tenant's API is served and who calls it.
type APITarget struct {
	// Tenant is the ApiServerConfig.
	Tenant types.NamespacedName
	// AdminKubeconfig is the administrator's credential.
	AdminKubeconfig []byte
	// Host and Port are the tenant's Service; ServerName a SAN of its
	// serving certificate, which verifies an apiserver pod reached at its
	// own address on PodPort.
	Host       string
	Port       int32
	ServerName string
	PodPort    int32
}

// Real reaches tenants over the network: their etcd with EtcdV3, their
// API with Connect, their konnectivity servers on their health port.
type Real struct{ EtcdV3 }

// API connects to the tenant's API (Connect).
func (r Real) API(_ context.Context, t APITarget) (API, error) {
	return Connect(t.AdminKubeconfig, t.Host, t.Port, t.ServerName, t.PodPort)
}

// KonnectivityAgents counts the agents of the server of the pod at podIP,
// on its health port.
func (r Real) KonnectivityAgents(ctx context.Context, podIP string) (int32, error) {
	return KonnectivityAgents(ctx, podIP, apiserver.KonnectivityHealthPort)
}

// V3 is Real's etcd client.
func (r Real) V3() (EtcdV3, bool) { return r.EtcdV3, true }
