package tenants

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/datastores"
	"github.com/apiserver-operator/apiserver-operator/controllers/ownership"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// pass is one reconcile of one ApiServerConfig: what the steps found and
// made, handed from each step to the next. Each step records in obs what
// it observed, and the conditions are computed from obs alone.
type pass struct {
	cfg *v1alpha1.ApiServerConfig
	// before is cfg as the pass found it, for the status patch.
	before *v1alpha1.ApiServerConfig
	now    time.Time
	obs    observations

	// in and c are the spec's completion: the only path to c is complete.
	in apiserver.Inputs
	c  *apiserver.Completed

	// refs are the users' objects the spec names.
	refs *referenced
	// current is the apiserver Deployment as it runs (empty when there is
	// none yet); pods are its pods.
	current *appsv1.Deployment
	pods    []corev1.Pod
	// gateLooks are the konnectivity servers the readiness gate looked at
	// in this pass, by pod name.
	gateLooks map[string]serverLook

	pki *pkiResult
	// datastore holds the tenant's etcd servers, nil when none does.
	datastore *datastores.Datastore
	// etcdTLS is how the operator reaches etcd (nil without TLS).
	etcdTLS   *tls.Config
	etcdTLSID string
	// issuerCAs are the JWT issuers' CAs, from the user's objects, by
	// apiserver.Reference.Key.
	issuerCAs map[string][]byte
	// enc is the operator's encryption material, nil without it.
	enc *encryptionPass

	// desired is every object the tenant gets, rendered from the material
	// (again when a rotation moved): the Apply step writes it, once.
	desired *apiserver.Objects
	// templateKept: the Deployment rendered before the rotations had their
	// say is the one that runs (applying it would change nothing).
	// rolledOut: besides, every apiserver runs it (see podsRunTemplate).
	templateKept, rolledOut bool
	// held: the Preflight step holds an upgrade, so the Deployment keeps
	// its template and nothing that waits for a rollout moves.
	held bool
	// maint is where the pass stands in spec.maintenance's windows.
	maint maintenanceGate
	// marked: status says that the pass's generation is reconciled (or
	// describes it already): see waitOnTenant.
	marked bool

	// requeue is how soon to come back (0: only on an event).
	requeue time.Duration
	// done ends the pass without an error: a step found nothing more can
	// be done until something changes.
	done bool
}

// requeueWithin brings the next pass at most d from now.
func (p *pass) requeueWithin(d time.Duration) { p.requeue = sooner(p.requeue, d) }

// complete completes the spec with what the pass knows so far. It is the
// pass's only call of apiserver.Complete: the Service step calls it with the
// Service's addresses, the sizing step again when the counts it sizes for
// moved.
func (p *pass) complete() error {
	c, err := apiserver.Complete(p.cfg, p.in)
	if err != nil {
		p.obs.invalid = err
		return reconcile.TerminalError(err)
	}
	p.c = c
	return nil
}

// reconcileStep is one concern of a pass. The first error stops the pass;
// so does setting p.done.
type reconcileStep struct {
	name string
	run  func(ctx context.Context, p *pass) error
}

// steps are the concerns of a pass, in order: each needs what the ones
// before it found. The pass observes, decides the material (certificates,
// keys, where each rotation stands), renders every object from it
// (apiserver.Desired), lets the rotations act on the material (rendering
// again when one moved), then applies each object once.
func (r *Reconciler) steps() []reconcileStep {
	return []reconcileStep{
		{"Validate", r.validateSpec},
		{"Workload", r.observeWorkload},
		{"Konnectivity", r.gateKonnectivity},
		{"Keyspace", r.checkKeyspace},
		{"References", r.checkReferences},
		{"Datastore", r.findDatastore},
		{"Service", r.reconcileService},
		{"PKI", r.reconcilePKI},
		{"Etcd", r.reconcileEtcd},
		{"Sizing", r.reconcileSizing},
		{"Agents", r.reconcileAgents},
		{"Audit", r.reconcileAudit},
		{"Config", r.loadConfig},
		{"Data", r.checkData},
		{"Preflight", r.preflightUpgrade},
		{"Render", r.renderObjects},
		{"Encryption", r.reconcileEncryption},
		{"Rotation", r.reconcileRotations},
		{"Apply", r.applyObjects},
		{"Status", r.reportApplied},
	}
}

// Reconcile says that a new generation is being reconciled, adds the
// finalizer, then runs the steps in order. Status is then written once
// more, at the end, and only when it changed.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	cfg := &v1alpha1.ApiServerConfig{}
	if err := r.Client.Get(ctx, req.NamespacedName, cfg); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cfg = r.fresher(cfg)
	if paused(cfg) {
		// Nothing is written, the deletion included; the etcd checks
		// and the agents' count stop with the rest.
		if r.memory.etcdWatch != nil {
			r.memory.etcdWatch.Forget(req.NamespacedName)
		}
		r.forgetAgents(req.NamespacedName)
		r.forgetAudit(req.NamespacedName)
		requeue, err := r.reportPaused(ctx, cfg)
		// But for the readiness gate of a new apiserver pod (one that
		// replaced a pod lost with its node): a paused tenant keeps
		// serving.
		if gate := r.gateKonnectivityPaused(ctx, cfg); gate > 0 {
			requeue = sooner(requeue, gate)
		}
		return ctrl.Result{RequeueAfter: requeue}, err
	}
	if !cfg.DeletionTimestamp.IsZero() {
		if r.memory.etcdWatch != nil {
			r.memory.etcdWatch.Forget(req.NamespacedName)
		}
		r.forgetAgents(req.NamespacedName)
		r.forgetAudit(req.NamespacedName)
		r.restorer().Forget(req.NamespacedName)
		if err := r.clearPaused(ctx, cfg); err != nil {
			return ctrl.Result{}, err
		}
		return r.reconcileDelete(ctx, cfg)
	}
	// A generation that status does not describe yet: an edited object's
	// is marked at once (its previous generation's Ready would stand
	// meanwhile); a new object's, which has no condition to stand, once a
	// wait on its tenant's network lasts (see waitOnTenant).
	marked := cfg.Status.ObservedGeneration == cfg.Generation
	if !marked && len(cfg.Status.Conditions) > 0 {
		if err := r.markReconciling(ctx, cfg); err != nil {
			return ctrl.Result{}, err
		}
		marked = true
	}
	if err := r.addFinalizer(ctx, cfg); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err) // deleted meanwhile: nothing is left to do
	}

	p := r.newPass(cfg)
	p.marked = marked
	defer func() {
		var se *stepError
		if errors.As(retErr, &se) {
			p.obs.stepErr, p.obs.failedStep = se.err, se.step
			reconcileErrors.WithLabelValues(se.step).Inc()
			// Status says in a few words what a tenant's etcd did; the
			// log says why.
			if detail := tenantio.Detail(se.err); detail != se.err.Error() {
				ctrl.LoggerFrom(ctx).Info("A step failed on the tenant's etcd", "apiServerConfig", klog.KObj(cfg), "step", se.step, "error", detail)
			}
		}
		if err := r.writeStatus(ctx, p.before, cfg, p.obs); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("writing status: %w", err))
		}
		// An environment failure is looked at again when it would stall.
		if f := p.obs.failure; retErr == nil && f != nil && !f.stalled(p.now, p.obs.stallAfter) {
			result.RequeueAfter = sooner(result.RequeueAfter, f.since.Add(p.obs.stallAfter).Sub(p.now)+time.Second)
		}
		r.trackTimeToReady(cfg, r.Clock.Now())
		if r.memory.etcdWatch != nil && !p.obs.etcdChecked {
			r.memory.etcdWatch.Forget(req.NamespacedName)
		}
	}()
	for _, s := range r.steps() {
		if err := s.run(ctx, p); err != nil {
			if p.obs.invalid != nil {
				return ctrl.Result{}, err // terminal: only an edit helps
			}
			if conflict := (*ownership.NameConflict)(nil); errors.As(err, &conflict) {
				p.obs.failure = &envFailure{reason: v1alpha1.ReasonNameConflict, message: conflict.Error(), atOnce: true,
					since: failingSince(p.before.Status.Conditions, v1alpha1.ReasonNameConflict, p.now)}
				if c := meta.FindStatusCondition(p.before.Status.Conditions, v1alpha1.ConditionDegraded); c == nil || c.Reason != v1alpha1.ReasonNameConflict {
					r.event(cfg, corev1.EventTypeWarning, v1alpha1.ReasonNameConflict, s.name, "%s", conflict.Error())
				}
				return ctrl.Result{RequeueAfter: nameConflictRecheck}, nil
			}
			return ctrl.Result{}, step(s.name, err)
		}
		if p.done {
			break
		}
	}
	return ctrl.Result{RequeueAfter: p.requeue}, nil
}

func (r *Reconciler) newPass(cfg *v1alpha1.ApiServerConfig) *pass {
	now := r.Clock.Now()
	p := &pass{cfg: cfg, before: cfg.DeepCopy(), now: now, current: &appsv1.Deployment{},
		obs: observations{generation: cfg.Generation, masterCount: 1, now: now, stallAfter: cmp.Or(r.StallAfter, DefaultStallAfter)}}
	if cfg.Spec.MasterCount != nil {
		p.obs.masterCount = *cfg.Spec.MasterCount
	}
	if s := cfg.Status.CacheSizing; s != nil {
		p.in.ObservedNodes, p.in.ObservedPods = s.SizedForNodes, s.SizedForPods
	}
	return p
}

// addFinalizer holds cfg until the operator removed what it created; the
// pass goes on with the object the patch returned.
func (r *Reconciler) addFinalizer(ctx context.Context, cfg *v1alpha1.ApiServerConfig) error {
	if controllerutil.ContainsFinalizer(cfg, Finalizer) {
		return nil
	}
	patch := client.MergeFrom(cfg.DeepCopy())
	previous := cfg.ResourceVersion
	controllerutil.AddFinalizer(cfg, Finalizer)
	if err := r.Client.Patch(ctx, cfg, patch); err != nil {
		return err
	}
	r.remember(previous, cfg)
	return nil
}

// validateSpec stalls a spec that passed the CRD's rules but not the checks
// against the bundled binary (the webhook may be off) until it is edited.
func (r *Reconciler) validateSpec(_ context.Context, p *pass) error {
	if errs, _ := apiserver.Validate(p.cfg); len(errs) > 0 {
		p.obs.invalid = errs.ToAggregate()
		r.event(p.cfg, corev1.EventTypeWarning, v1alpha1.ReasonInvalidSpec, "Validate", "%s", p.obs.invalid.Error())
		return reconcile.TerminalError(p.obs.invalid)
	}
	if err := p.placeInMaintenance(); err != nil {
		p.obs.invalid = err
		return reconcile.TerminalError(err)
	}
	return nil
}

// checkReferences reads the users' Secrets and ConfigMaps the spec names:
// without them nothing can start. A missing one is an environment failure
// that ends the pass; their watch brings the object back when one is
// created or fixed.
func (r *Reconciler) checkReferences(ctx context.Context, p *pass) error {
	refs, err := readReferences(ctx, r.APIReader, p.cfg)
	if missing := (*missingReference)(nil); errors.As(err, &missing) {
		p.obs.failure = &envFailure{reason: v1alpha1.ReasonReferenceMissing, message: missing.Error(),
			since: failingSince(p.before.Status.Conditions, v1alpha1.ReasonReferenceMissing, p.now)}
		p.done = true
		return nil
	}
	if invalid := (*invalidReference)(nil); errors.As(err, &invalid) {
		p.obs.failure = &envFailure{reason: v1alpha1.ReasonReferenceInvalid, message: invalid.Error(), atOnce: true,
			since: failingSince(p.before.Status.Conditions, v1alpha1.ReasonReferenceInvalid, p.now)}
		p.done = true
		return nil
	}
	p.refs = refs
	return err
}

// markPatience is how long a new object's pass may wait on its tenant's
// network before status says that it is being reconciled: a healthy etcd
// answers well within it, so that a new tenant costs no write more.
const markPatience = 300 * time.Millisecond

// waitOnTenant runs wait, a call to the tenant's etcd or API, which may
// take until its timeout. In a pass over a generation that status does not
// describe yet, status says that it is being reconciled as soon as wait
// lasts markPatience: kubectl and GitOps tools see the generation taken up
// within a second, not when an unreachable etcd's timeout ends the pass.
func (r *Reconciler) waitOnTenant(ctx context.Context, p *pass, wait func() error) error {
	if p.marked {
		return wait()
	}
	var mu sync.Mutex
	finished := false
	var marked *v1alpha1.ApiServerConfig
	timer := time.AfterFunc(markPatience, func() {
		mu.Lock()
		defer mu.Unlock()
		if finished {
			return
		}
		// p.before is what the server holds; the pass changes only p.cfg.
		m := p.before.DeepCopy()
		if err := r.markReconciling(ctx, m); err != nil {
			ctrl.LoggerFrom(ctx).Info("Saying that a new generation is being reconciled failed", "apiServerConfig", klog.KObj(m), "error", err.Error())
			return
		}
		marked = m
	})
	err := wait()
	timer.Stop()
	mu.Lock()
	defer mu.Unlock()
	finished = true
	if marked != nil {
		// The status patch at the end of the pass starts from the mark.
		p.before, p.marked = marked, true
		p.cfg.ObjectMeta = *marked.ObjectMeta.DeepCopy()
	}
	return err
}

// markReconciling says that the operator works on cfg's generation, which
// status does not describe yet: Reconciling, and Ready False until the
// pass ends.
func (r *Reconciler) markReconciling(ctx context.Context, cfg *v1alpha1.ApiServerConfig) error {
	before := cfg.DeepCopy()
	msg := fmt.Sprintf("Reconciling generation %d", cfg.Generation)
	meta.SetStatusCondition(&cfg.Status.Conditions, v1alpha1.NewCondition(v1alpha1.ConditionReconciling, true, v1alpha1.ReasonProgressing, msg, cfg.Generation))
	meta.SetStatusCondition(&cfg.Status.Conditions, v1alpha1.NewCondition(v1alpha1.ConditionReady, false, v1alpha1.ReasonProgressing, msg, cfg.Generation))
	meta.SetStatusCondition(&cfg.Status.Conditions, v1alpha1.NewCondition(v1alpha1.ConditionStalled, false, v1alpha1.ReasonProgressing, msg, cfg.Generation))
	cfg.Status.ObservedGeneration = cfg.Generation
	if err := r.Client.Status().Patch(ctx, cfg, client.MergeFrom(before)); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("marking generation %d as reconciling: %w", cfg.Generation, err))
	}
	r.remember(before.ResourceVersion, cfg)
	return nil
}

// writeStatus computes the conditions and patches status when anything
// changed; observedGeneration moves only on a successful pass.
func (r *Reconciler) writeStatus(ctx context.Context, before, cfg *v1alpha1.ApiServerConfig, obs observations) error {
	oldReady := meta.FindStatusCondition(before.Status.Conditions, v1alpha1.ConditionReady)
	for _, c := range conditions(obs) {
		if obs.unobserved(c.Type) && meta.FindStatusCondition(cfg.Status.Conditions, c.Type) != nil {
			continue // the pass stopped before looking: what was seen last stands
		}
		meta.SetStatusCondition(&cfg.Status.Conditions, c)
		if !c.LastTransitionTime.IsZero() {
			// The condition knows since when its cause holds.
			meta.FindStatusCondition(cfg.Status.Conditions, c.Type).LastTransitionTime = c.LastTransitionTime
		}
	}
	if obs.agents != nil && obs.agents.Status == "" {
		meta.RemoveStatusCondition(&cfg.Status.Conditions, v1alpha1.ConditionKonnectivityAgentsConnected)
	}
	if obs.audit != nil && obs.audit.Status == "" {
		meta.RemoveStatusCondition(&cfg.Status.Conditions, v1alpha1.ConditionAuditDelivered)
	}
	if v := obs.versions; v.running != "" {
		cfg.Status.Version, cfg.Status.Versions = v.running, v.counts
	}
	if meta.FindStatusCondition(cfg.Status.Conditions, v1alpha1.ConditionPaused) != nil {
		meta.RemoveStatusCondition(&cfg.Status.Conditions, v1alpha1.ConditionPaused)
		r.event(cfg, corev1.EventTypeNormal, v1alpha1.ReasonResumed, "Resume", "Resumed: what waited during the pause is done now")
	}
	// The conditions describe this generation, whatever they say: kstatus
	// reads Stalled only of an observed generation.
	cfg.Status.ObservedGeneration = cfg.Generation
	if apiequality.Semantic.DeepEqual(before.Status, cfg.Status) {
		return nil
	}
	// An event marks each change of Ready, but not the Progressing a new
	// object starts in: CertificatesIssued already says work began.
	newReady := meta.FindStatusCondition(cfg.Status.Conditions, v1alpha1.ConditionReady)
	initial := oldReady == nil && newReady != nil && newReady.Reason == v1alpha1.ReasonProgressing
	if newReady != nil && !initial && (oldReady == nil || oldReady.Status != newReady.Status || oldReady.Reason != newReady.Reason) {
		kind := corev1.EventTypeNormal
		if newReady.Status != metav1.ConditionTrue && newReady.Reason != v1alpha1.ReasonProgressing {
			kind = corev1.EventTypeWarning
		}
		r.event(cfg, kind, newReady.Reason, "Ready", "Ready is %s: %s", newReady.Status, newReady.Message)
	}
	if err := r.Client.Status().Patch(ctx, cfg, client.MergeFrom(before)); err != nil {
		return err
	}
	r.remember(before.ResourceVersion, cfg)
	return nil
}

func (r *Reconciler) event(cfg *v1alpha1.ApiServerConfig, kind, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(cfg, nil, kind, reason, action, note, args...)
	}
}
