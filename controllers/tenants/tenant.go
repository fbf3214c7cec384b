package tenants

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// connect opens the tenant's API as its administrator, through r.Reach: at
// its Service's ClusterIP (a SAN of its serving certificate), with the
// admin kubeconfig the operator writes, from inside the management
// cluster, whatever spec.serving says.
func (r *Reconciler) connect(ctx context.Context, p *pass) (tenantio.API, error) {
	if p.pki == nil || len(p.pki.secrets.AdminKubeconfig) == 0 || p.in.ServiceClusterIP == "" || p.in.ServiceClusterIP == "None" {
		return nil, fmt.Errorf("connecting to the tenant's API: no admin kubeconfig or Service address yet")
	}
	if r.Reach == nil {
		return nil, fmt.Errorf("connecting to the tenant's API: the reconciler reaches no tenant")
	}
	return r.Reach.API(ctx, tenantio.APITarget{Tenant: client.ObjectKeyFromObject(p.cfg), AdminKubeconfig: p.pki.secrets.AdminKubeconfig,
		Host: p.in.ServiceClusterIP, Port: p.c.Spec.Serving.Service.Port, ServerName: p.in.ServiceClusterIP, PodPort: p.c.Spec.Serving.SecurePort})
}
