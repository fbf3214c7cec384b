package tenants

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/datastores"
)

// findDatastore finds the datastore that holds the tenant's etcd servers:
// the tenant then gets an etcd user of its own (Inputs.EtcdUser), and
// status.etcdDatastore names it. A spec only partly on one, a datastore
// Secret that cannot be read, or the tenant's datastore gone, is an
// environment failure that ends the pass.
func (r *Reconciler) findDatastore(ctx context.Context, p *pass) error {
	if r.Datastores == nil {
		return nil
	}
	ds, err := r.Datastores.Of(ctx, p.now, &p.cfg.Spec.Etcd)
	if unusable := (*datastores.UnusableError)(nil); errors.As(err, &unusable) {
		p.obs.failure = &envFailure{reason: v1alpha1.ReasonEtcdDatastore, message: unusable.Error(),
			since: failingSince(p.before.Status.Conditions, v1alpha1.ReasonEtcdDatastore, p.now)}
		p.requeueWithin(r.Datastores.Reload())
		p.done = true
		return nil
	}
	if err != nil {
		return err
	}
	if ds == nil {
		was := p.cfg.Status.EtcdDatastore
		if was == "" {
			return nil
		}
		still, err := r.Datastores.ByName(ctx, p.now, was)
		if err != nil {
			return err
		}
		if still != nil {
			// The spec moved its servers off the datastore: its user
			// there is left (see removeEtcdUser), the tenant goes on
			// with spec.etcd.tls.
			ctrl.LoggerFrom(ctx).Info("A tenant left its etcd datastore: its etcd user there stays until removed by hand",
				"apiServerConfig", klog.KObj(p.cfg), "datastore", was, "user", apiserver.EtcdUserName(p.cfg.Namespace, p.cfg.Name))
			p.cfg.Status.EtcdDatastore = ""
			return nil
		}
		// Its apiservers keep the certificate they run with: moving them
		// to spec.etcd.tls's is not the operator's guess to make.
		p.obs.failure = &envFailure{reason: v1alpha1.ReasonEtcdDatastore, message: fmt.Sprintf(
			"the platform's etcd datastore %s, which holds the tenant's etcd servers and its etcd user, is gone: the apiservers keep running as they are until the platform declares it again",
			was),
			since: failingSince(p.before.Status.Conditions, v1alpha1.ReasonEtcdDatastore, p.now)}
		p.requeueWithin(r.Datastores.Reload())
		p.done = true
		return nil
	}
	// On a datastore, where every tenant's etcd user holds its prefix, a
	// prefix is its namespace's: no other namespace's lies above it. A
	// tenant that stored its data there before this rule keeps its
	// prefix.
	kept := p.cfg.Status.EtcdDatastore == ds.Name() && p.cfg.Status.DataPrefix != "" &&
		p.cfg.Status.DataPrefix == apiserver.KeyspaceOf(&p.cfg.Spec.Etcd).Prefix
	if !kept && !apiserver.PrefixInNamespace(p.cfg.Namespace, p.cfg.Spec.Etcd.Prefix) {
		own := apiserver.NewTenantEtcdPrefix(p.cfg.Namespace, "")
		p.obs.failure = &envFailure{reason: v1alpha1.ReasonEtcdDatastore, message: fmt.Sprintf(
			"the tenant's etcd servers are the platform's datastore %s, where a tenant's prefix must be under its namespace's, %s: %s is not; set spec.etcd.prefix under it, or leave it out to get %s%s (nothing was granted or written on the datastore)",
			ds.Name(), own, cmp.Or(p.cfg.Spec.Etcd.Prefix, apiserver.DefaultEtcdPrefix), own, p.cfg.Name),
			since: failingSince(p.before.Status.Conditions, v1alpha1.ReasonEtcdDatastore, p.now)}
		p.done = true
		return nil
	}
	p.datastore = ds
	p.in.EtcdUser = apiserver.EtcdUserName(p.cfg.Namespace, p.cfg.Name)
	p.cfg.Status.EtcdDatastore = ds.Name()
	return nil
}

// ensureEtcdUser makes the tenant's etcd user, on every etcd it stores in,
// what its prefix asks for, once per datastore material and prefix (the
// operator's restart asks again).
func (r *Reconciler) ensureEtcdUser(ctx context.Context, p *pass) error {
	if p.datastore == nil || r.Reach == nil {
		return nil
	}
	ds := p.datastore
	perms := apiserver.EtcdRolePermissions(p.c.Spec.Etcd.Prefix)
	root, rootID := ds.Root()
	want := fmt.Sprintf("%s|%v|%v", rootID, perms, p.c.Etcd.Sets)
	if r.Datastores.Ensured(p.c.EtcdUser, want, p.now) {
		return nil
	}
	for _, set := range p.c.Etcd.Sets {
		if err := r.Reach.EnsureUser(ctx, set, root, p.c.EtcdUser, perms); err != nil {
			return fmt.Errorf("making the tenant's etcd user on %s (datastore %s): %w", strings.Join(set, ","), ds.Name(), err)
		}
	}
	r.Datastores.RecordEnsured(p.c.EtcdUser, want, p.now)
	return nil
}

// removeEtcdUser removes a deleted tenant's etcd user from every etcd it
// stores in, on the datastore status.etcdDatastore names. When that
// datastore is gone the user stays, and an event says how to remove it.
func (r *Reconciler) removeEtcdUser(ctx context.Context, cfg *v1alpha1.ApiServerConfig, now time.Time) error {
	if r.Datastores == nil || r.Reach == nil || cfg.Status.EtcdDatastore == "" {
		return nil
	}
	name := apiserver.EtcdUserName(cfg.Namespace, cfg.Name)
	ds, err := r.Datastores.ByName(ctx, now, cfg.Status.EtcdDatastore)
	if err != nil {
		return err
	}
	var root *tls.Config
	if ds != nil {
		root, _ = ds.Root()
	}
	if root == nil { // gone, or broken
		r.event(cfg, corev1.EventTypeWarning, v1alpha1.ReasonEtcdDatastore, "Delete",
			"The etcd user %s stays: its datastore %s is gone or broken; remove it with etcdctl user delete %s and etcdctl role delete %s", name, cfg.Status.EtcdDatastore, name, name)
		return nil
	}
	c, err := apiserver.Complete(cfg, apiserver.Inputs{EtcdUser: name})
	if err != nil {
		return err
	}
	for _, set := range c.Etcd.Sets {
		if err := r.Reach.RemoveUser(ctx, set, root, name); err != nil {
			return fmt.Errorf("removing the tenant's etcd user from %s (datastore %s): %w", strings.Join(set, ","), ds.Name(), err)
		}
	}
	r.Datastores.ForgetUser(name)
	return nil
}
