package tenants

import (
	"context"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/controllers/datastores"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// reconcileEtcd checks that every etcd server answers. An unreachable one
// is an environment failure: the pass goes on (nothing it applies needs
// etcd) and looks again soon.
func (r *Reconciler) reconcileEtcd(ctx context.Context, p *pass) error {
	var err error
	if ds := p.datastore; ds != nil {
		p.etcdTLS, p.etcdTLSID = ds.Root()
	} else if p.etcdTLS, p.etcdTLSID, err = datastores.SpecTLS(ctx, p.refs, p.cfg, &p.c.Spec.Etcd); err != nil {
		return err
	}
	// Kept for the deletion of the tenant's data, should the Secret go
	// first (a namespace being deleted).
	r.memory.etcdClientTLS.Store(client.ObjectKeyFromObject(p.cfg), p.etcdTLS)
	if r.Reach == nil {
		return nil
	}
	p.obs.etcdChecked = true
	endpoints := p.c.Etcd.Servers
	p.obs.etcdErr = r.waitOnTenant(ctx, p, func() error { return r.Reach.Check(ctx, endpoints, p.etcdTLS) })
	if r.memory.etcdWatch != nil {
		r.memory.etcdWatch.Record(client.ObjectKeyFromObject(p.cfg), endpoints, p.etcdTLS, p.etcdTLSID, tenantio.UnreachableEndpoint(p.obs.etcdErr))
	}
	if p.obs.etcdErr == nil {
		// The tenant's etcd user gets its rights once the data check
		// proved the keys there its own (checkData).
		return nil
	}
	ctrl.LoggerFrom(ctx).Info("etcd is unreachable", "apiServerConfig", klog.KObj(p.cfg), "error", tenantio.Detail(p.obs.etcdErr))
	p.obs.failure = &envFailure{reason: v1alpha1.ReasonEtcdUnreachable, message: p.obs.etcdErr.Error(),
		since: failingSince(p.before.Status.Conditions, v1alpha1.ReasonEtcdUnreachable, p.now)}
	p.requeueWithin(etcdRetryInterval)
	return nil
}
