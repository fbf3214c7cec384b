package tenants

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/datastores"
	"github.com/apiserver-operator/apiserver-operator/controllers/ownership"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantindex"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// reconcileDelete removes what the operator created for cfg as its
// deletion policy says, then releases the finalizer (the garbage collector
// would remove the owned objects, but not every cluster runs it promptly,
// and Retain must orphan the keys first). Delete: the apiservers stop, the
// tenant's data goes from etcd (deleteData), then everything else; Retain:
// the data and the Secrets that read it stay, the rest goes.
func (r *Reconciler) reconcileDelete(ctx context.Context, cfg *v1alpha1.ApiServerConfig) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(cfg, Finalizer) {
		return ctrl.Result{}, nil
	}
	retain := apiserver.DeletionPolicyOf(&cfg.Spec) == v1alpha1.DeletionPolicyRetain
	stored, err := r.storedData(ctx, cfg)
	if err != nil {
		return ctrl.Result{}, step("Delete", err)
	}
	if !retain && stored {
		wait, err := r.deleteData(ctx, cfg)
		if err != nil || wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, err
		}
	}
	// Its etcd user goes with it (the same tenant created again gets it
	// back, for what Retain kept).
	if err := r.removeEtcdUser(ctx, cfg, r.Clock.Now()); err != nil {
		return ctrl.Result{}, step("Delete", err)
	}
	for _, o := range apiserver.OwnedObjects(cfg.Name) {
		obj := apiserver.NewOwned(o.Kind)
		obj.SetNamespace(cfg.Namespace)
		obj.SetName(o.Name)
		var err error
		if retain && o.Retainable {
			err = r.orphan(ctx, cfg, obj, stored)
		} else {
			err = r.deleteIfOwned(ctx, cfg, obj)
		}
		if err != nil {
			return ctrl.Result{}, step("Delete", err)
		}
	}
	patch := client.MergeFrom(cfg.DeepCopy())
	controllerutil.RemoveFinalizer(cfg, Finalizer)
	if err := r.Client.Patch(ctx, cfg, patch); err != nil {
		return ctrl.Result{}, fmt.Errorf("removing the finalizer: %w", err)
	}
	forgetMetrics(client.ObjectKeyFromObject(cfg))
	r.memory.operatorCredentials.Forget(client.ObjectKeyFromObject(cfg))
	return ctrl.Result{}, nil
}

// storedData reports whether cfg ever stored data: status.dataPrefix says
// where, once its first apiserver was about to start (see checkData). A
// tenant that never started (held by a conflict, stalled on foreign keys)
// has no data to delete or keep, and the keys under its prefix are not its
// own. A tenant that ran before the operator recorded dataPrefix, and was
// deleted before a pass recorded it, has its Deployment still: its prefix
// is recorded now, before the Deployment goes.
func (r *Reconciler) storedData(ctx context.Context, cfg *v1alpha1.ApiServerConfig) (bool, error) {
	if cfg.Status.DataPrefix != "" || cfg.Status.RestoredFrom != "" {
		// A restore cut short wrote under the spec's prefix.
		return true, nil
	}
	d := &appsv1.Deployment{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.DeploymentName(cfg.Name)}, d); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if !ownership.Claim(r.Ownership, cfg, d).Own() {
		return false, nil
	}
	before := cfg.DeepCopy()
	k := apiserver.KeyspaceOf(&cfg.Spec.Etcd)
	cfg.Status.DataPrefix, cfg.Status.DataServers = k.Prefix, k.Addresses
	if err := r.Client.Status().Patch(ctx, cfg, client.MergeFrom(before)); err != nil {
		return false, fmt.Errorf("recording where the deleted tenant's data is: %w", err)
	}
	return true, nil
}

// unnamedDataServers are the servers the tenant's data was proven on that
// its spec names no more (a move the operator held).
func unnamedDataServers(cfg *v1alpha1.ApiServerConfig) []string {
	named := apiserver.KeyspaceOf(&cfg.Spec.Etcd).Addresses
	return slices.DeleteFunc(slices.Clone(cfg.Status.DataServers), func(a string) bool { return slices.Contains(named, a) })
}

// Waits of a deletion that holds the tenant's data.
const (
	// deletionPoll is how soon a deletion looks again at what it waits
	// for by itself (the apiservers stopping, keys that appeared).
	deletionPoll = 5 * time.Second
	// deletionHeld is how soon a deletion that a person must unblock (an
	// unreachable etcd, another tenant's keys, a missing Secret) looks
	// again.
	deletionHeld = 30 * time.Second
)

// deleteData removes the tenant's data from etcd, and keeps it, with the
// finalizer, while it cannot be removed safely: the apiservers are stopped
// first (nothing may write under the prefix meanwhile); no other tenant's
// keyspace may overlap the prefix (the tenant index says: admission refuses
// an overlap, but tenants created before it, or without it, may share a
// prefix); then every key under the prefix goes, on the main servers and on
// each override's, and a count on each proves that none is left. It
// returns how soon to look again while it holds the data; 0 when the data
// is gone.
func (r *Reconciler) deleteData(ctx context.Context, cfg *v1alpha1.ApiServerConfig) (time.Duration, error) {
	// The workload first (OwnedObjects' order), so that nothing writes
	// under the prefix meanwhile.
	for _, o := range apiserver.OwnedObjects(cfg.Name) {
		if o.Kind != "PodDisruptionBudget" && o.Kind != "Deployment" {
			continue
		}
		obj := apiserver.NewOwned(o.Kind)
		obj.SetNamespace(cfg.Namespace)
		obj.SetName(o.Name)
		if err := r.deleteIfOwned(ctx, cfg, obj); err != nil {
			return 0, step("Delete", err)
		}
	}
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(cfg.Namespace), client.MatchingLabels(apiserver.SelectorLabels(cfg.Name))); err != nil {
		return 0, step("Delete", fmt.Errorf("listing the apiserver pods: %w", err))
	}
	running := 0
	for i := range pods.Items {
		if !podEnded(&pods.Items[i]) {
			running++
		}
	}
	if running > 0 {
		return deletionPoll, r.deletionStatus(ctx, cfg, false, v1alpha1.ReasonDeleting,
			fmt.Sprintf("Waiting for %d apiservers to stop before deleting the tenant's data", running))
	}

	if gone := unnamedDataServers(cfg); len(gone) > 0 {
		return deletionHeld, r.deletionStatus(ctx, cfg, true, v1alpha1.ReasonSharedKeyspace, fmt.Sprintf(
			"The tenant's data is kept: it is on %s, which spec.etcd names no more (the move was held): name them in spec.etcd again to delete it, or set spec.deletionPolicy to Retain to keep the data and the keys that read it",
			strings.Join(gone, ", ")))
	}
	c, err := apiserver.Complete(apiserver.WhereDataIs(cfg), apiserver.Inputs{})
	if err != nil {
		return deletionHeld, r.deletionStatus(ctx, cfg, true, v1alpha1.ReasonInvalidSpec,
			fmt.Sprintf("The tenant's data is kept: its etcd keys cannot be found from the spec (%v); fix the spec, or set spec.deletionPolicy to Retain to keep the data and the keys that read it", err))
	}
	prefix := c.Keyspace.Prefix
	if prefix == "/" {
		return deletionHeld, r.deletionStatus(ctx, cfg, true, v1alpha1.ReasonSharedKeyspace,
			"The tenant's data is kept: its prefix is /, every key of its etcd, which the operator does not delete; delete them yourself and set spec.deletionPolicy to Retain")
	}
	if r.TenantIndex == nil {
		return deletionHeld, r.deletionStatus(ctx, cfg, true, v1alpha1.ReasonSharedKeyspace,
			"The tenant's data is kept: this operator has no index of the other tenants to prove that none shares the prefix")
	}
	others, err := r.TenantIndex.Overlapping(ctx, apiserver.WhereDataIs(cfg))
	if err != nil {
		return 0, step("Delete", err)
	}
	retained, err := r.TenantIndex.RetainedOverlapping(ctx, apiserver.WhereDataIs(cfg))
	if err != nil {
		return 0, step("Delete", err)
	}
	if len(others) > 0 || len(retained) > 0 {
		var names []string
		for i := range others {
			names = append(names, tenantindex.Named(&others[i], cfg.Namespace))
		}
		for _, o := range retained {
			names = append(names, tenantindex.NamedRetained(o, cfg.Namespace)+" (its retained data)")
		}
		slices.Sort(names)
		ctrl.LoggerFrom(ctx).Info("Keeping a deleted tenant's data: another tenant's keys share its prefix", "apiServerConfig", klog.KObj(cfg), "others", len(others), "retained", len(retained))
		return deletionHeld, r.deletionStatus(ctx, cfg, true, v1alpha1.ReasonSharedKeyspace, fmt.Sprintf(
			"The tenant's data is kept: the keys under %s on its etcd servers are also the data of %s, which deleting them would delete; set spec.deletionPolicy to Retain to let this ApiServerConfig go without its data",
			prefix, strings.Join(slices.Compact(names), " and ")))
	}
	tlsConfig, err := datastores.TenantTLS(ctx, r.APIReader, r.Datastores, cfg, &c.Spec.Etcd, r.Clock.Now())
	if err != nil {
		if kept, ok := r.memory.etcdClientTLS.Load(client.ObjectKeyFromObject(cfg)); ok {
			tlsConfig, err = kept, nil
		}
	}
	if err != nil {
		return deletionHeld, r.deletionStatus(ctx, cfg, true, v1alpha1.ReasonReferenceMissing, fmt.Sprintf(
			"The tenant's data is kept: the operator cannot reach etcd without the client certificate (%v); restore the Secret, or set spec.deletionPolicy to Retain to keep the data and the keys that read it", err))
	}
	keys := prefix + "/"
	var deleted int64
	// Only the etcd clusters the data was proven on (dataKeyspace): keys
	// under the prefix on a server the spec moved to are not the tenant's.
	sets := c.Etcd.Sets
	for _, set := range sets {
		// Each server answers first: a deletion that waits on a dead etcd
		// would hold the worker for minutes.
		err := r.Reach.Check(ctx, set, tlsConfig)
		var n int64
		if err == nil {
			n, err = r.Reach.Delete(ctx, set, tlsConfig, keys)
		}
		if err == nil {
			var left []int64
			if left, err = r.Reach.Count(ctx, set, tlsConfig, keys); err == nil && left[0] > 0 {
				return deletionPoll, r.deletionStatus(ctx, cfg, false, v1alpha1.ReasonDeleting,
					fmt.Sprintf("Deleting the tenant's data: %d keys appeared under %s on %s after it was deleted", left[0], keys, strings.Join(set, ",")))
			}
		}
		if err != nil {
			ctrl.LoggerFrom(ctx).Info("Keeping a deleted tenant's data: its etcd did not answer", "apiServerConfig", klog.KObj(cfg), "servers", set, "error", tenantio.Detail(err))
			return deletionHeld, r.deletionStatus(ctx, cfg, true, v1alpha1.ReasonEtcdUnreachable, fmt.Sprintf(
				"The tenant's data and its keys are kept until its etcd %s answers (the operator's log has the cause); set spec.deletionPolicy to Retain to let the ApiServerConfig go and keep them", strings.Join(set, ",")))
		}
		deleted += n
	}
	r.event(cfg, corev1.EventTypeNormal, v1alpha1.ReasonDataDeleted, "Delete",
		"Deleted the tenant's data: %d keys under %s on %d etcd clusters; a count found none left", deleted, keys, len(sets))
	return 0, nil
}

// deletionStatus says what a deletion waits for: Ready False, and Stalled
// when only a person can unblock it (Reconciling otherwise).
func (r *Reconciler) deletionStatus(ctx context.Context, cfg *v1alpha1.ApiServerConfig, stalled bool, reason, message string) error {
	before := cfg.DeepCopy()
	meta.SetStatusCondition(&cfg.Status.Conditions, v1alpha1.NewCondition(v1alpha1.ConditionReady, false, reason, message, cfg.Generation))
	meta.SetStatusCondition(&cfg.Status.Conditions, v1alpha1.NewCondition(v1alpha1.ConditionStalled, stalled, reason, message, cfg.Generation))
	meta.SetStatusCondition(&cfg.Status.Conditions, v1alpha1.NewCondition(v1alpha1.ConditionReconciling, !stalled, reason, message, cfg.Generation))
	if apiequality.Semantic.DeepEqual(before.Status, cfg.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, cfg, client.MergeFrom(before)); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("saying what the deletion waits for: %w", err))
	}
	return nil
}

// orphan removes cfg's owner reference from obj, so that it outlives cfg,
// and marks it as retained, with where the data it reads is (the tenant
// index keeps other tenants off that keyspace while the mark exists).
func (r *Reconciler) orphan(ctx context.Context, cfg *v1alpha1.ApiServerConfig, obj client.Object, stored bool) error {
	// From the API server, and written only over that version: the proof
	// covers the whole Secret as it will be.
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !ownership.Claim(r.Ownership, cfg, obj).Own() {
		return nil
	}
	refs := obj.GetOwnerReferences()
	kept := slices.DeleteFunc(slices.Clone(refs), func(ref metav1.OwnerReference) bool { return ref.UID == cfg.UID })
	mark := ""
	if stored {
		mark = apiserver.KeyspaceOf(&apiserver.WhereDataIs(cfg).Spec.Etcd).Annotation()
	}
	if len(kept) == len(refs) && obj.GetAnnotations()[apiserver.RetainedKeyspaceAnnotation] == mark &&
		obj.GetLabels()[apiserver.NameLabel] == cfg.Name && r.Ownership.Proven(cfg.Name, cfg.UID, obj) && (!stored || r.Ownership.MarkProven(obj)) {
		return nil
	}
	patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	obj.SetOwnerReferences(kept)
	obj.SetLabels(withEntry(obj.GetLabels(), apiserver.NameLabel, cfg.Name))
	if stored {
		obj.SetLabels(withEntry(obj.GetLabels(), apiserver.RetainedDataLabel, "true"))
		obj.SetAnnotations(withEntry(obj.GetAnnotations(), apiserver.RetainedKeyspaceAnnotation, mark))
	}
	// The mark has a proof of its own, checked from the metadata (the
	// tenant index holds no data); the Secret's proof is written again
	// over what it holds.
	r.Ownership.Prove(cfg.Name, cfg.UID, obj)
	if stored {
		r.Ownership.ProveMark(obj)
	}
	if err := r.Client.Patch(ctx, obj, patch); err != nil {
		return fmt.Errorf("keeping %s (deletionPolicy Retain): %w", obj.GetName(), err)
	}
	return nil
}

// withEntry is m with key set to value (m may be nil).
func withEntry(m map[string]string, key, value string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[key] = value
	return m
}
