package tenants

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// reconcileService applies the apiservers' Service and the konnectivity
// agents' one, the objects applied before the others (the Apply step
// leaves them), and completes the spec.
// The Service's ClusterIP and load-balancer addresses are SANs of the
// serving certificate: the Service comes first, and the spec is completed
// again only when applying it changed them (a new Service), or the
// certificate would be issued without them and then again.
func (r *Reconciler) reconcileService(ctx context.Context, p *pass) error {
	svc := &corev1.Service{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: p.cfg.Namespace, Name: apiserver.ServiceName(p.cfg.Name)}, svc); err == nil {
		if err := r.claim(p.cfg, svc); err != nil {
			return err
		}
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	p.in.ServiceClusterIP, p.in.ServiceIngress = serviceAddresses(svc)
	if err := p.complete(); err != nil {
		return err
	}
	svc = apiserver.DesiredService(p.c)
	if err := r.apply(ctx, p.cfg, svc); err != nil {
		return err
	}
	// The agents' Service with it: a pass that stops after this step
	// leaves the agents no less to dial than before it.
	if ks := apiserver.DesiredKonnectivityService(p.c); ks != nil {
		if err := r.apply(ctx, p.cfg, ks); err != nil {
			return err
		}
	} else if err := r.deleteIfOwned(ctx, p.cfg, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: p.cfg.Namespace, Name: apiserver.KonnectivityServiceName(p.cfg.Name)}}); err != nil {
		return err
	}
	if ip, ingress := serviceAddresses(svc); ip != p.in.ServiceClusterIP || !slices.Equal(ingress, p.in.ServiceIngress) {
		p.in.ServiceClusterIP, p.in.ServiceIngress = ip, ingress
		return p.complete()
	}
	return nil
}

// serviceAddresses are the addresses of svc that the serving certificate
// names: its ClusterIP and its load balancer's.
func serviceAddresses(svc *corev1.Service) (string, []string) {
	var ingress []string
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		ingress = append(ingress, ing.IP+ing.Hostname)
	}
	return svc.Spec.ClusterIP, ingress
}
