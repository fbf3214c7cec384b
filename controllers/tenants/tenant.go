package tenants

import (
	"context"
	"fmt"

	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// TenantConnector opens a tenant's API as its administrator.
type TenantConnector func(ctx context.Context, p *pass) (tenantio.API, error)

// connectTenant reaches a tenant at its Service's ClusterIP (a SAN of its
// serving certificate), with the admin kubeconfig the operator writes:
// from inside the management cluster, whatever spec.serving says.
func connectTenant(_ context.Context, p *pass) (tenantio.API, error) {
	if p.pki == nil || len(p.pki.secrets.AdminKubeconfig) == 0 || p.in.ServiceClusterIP == "" || p.in.ServiceClusterIP == "None" {
		return nil, fmt.Errorf("connecting to the tenant's API: no admin kubeconfig or Service address yet")
	}
	return tenantio.Connect(p.pki.secrets.AdminKubeconfig, p.in.ServiceClusterIP, p.c.Spec.Serving.Service.Port, p.in.ServiceClusterIP, p.c.Spec.Serving.SecurePort)
}
