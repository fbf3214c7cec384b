package controllers

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// +kubebuilder:rbac:groups="",resources=secrets;configmaps;services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// Finalizer holds an ApiServerConfig until the operator removed what it
// created.
const Finalizer = "controlplane.apiserver-operator.dev/cleanup"

// appliedHashAnnotation records the hash of what the operator last applied
// to an object, so that a converged object causes no write at all.
const appliedHashAnnotation = "controlplane.apiserver-operator.dev/applied-hash"

// Named intervals.
const (
	// rotationRequeue is how soon a pass follows one that moved a
	// rotation.
	rotationRequeue = time.Second
	// DefaultMaxConcurrentReconciles lets a batch of new ApiServerConfigs
	// converge in parallel: a pass spends most of its time waiting on API
	// writes, not on the CPU (see BenchmarkConverge in test/bench).
	DefaultMaxConcurrentReconciles = 4
	// etcdRetryInterval is how soon an unreachable etcd is checked again.
	etcdRetryInterval = 30 * time.Second
)

// ApiServerConfigReconciler turns an ApiServerConfig into running
// kube-apiservers: PKI Secrets, etcd checks, Service, configuration,
// Deployment and PodDisruptionBudget, then status.
type ApiServerConfigReconciler struct {
	// Client reads from the cache (the operator's own objects, which carry
	// its labels) and writes.
	Client client.Client
	// APIReader reads what the cache does not hold: the users' Secrets and
	// ConfigMaps that the spec names.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// Etcd checks and counts the tenants' etcd; nil skips both (tests of
	// the rendering only).
	Etcd EtcdClient
	// ImageRepository overrides apiserver.DefaultImageRepository.
	ImageRepository string
	// MaxConcurrentReconciles is how many ApiServerConfigs are reconciled
	// at once (DefaultMaxConcurrentReconciles when zero).
	MaxConcurrentReconciles int
	// ResizePolicy and AutoSizingInterval override, when set, the Auto
	// sizing settings of every spec (spec.cacheSizing's
	// resizeThresholdPercent, minResizeInterval, observationInterval).
	ResizePolicy       apiserver.ResizePolicy
	AutoSizingInterval time.Duration
	// CATrustPropagation is the least time a new CA is trusted before it
	// signs (defaultCATrustPropagation when zero).
	CATrustPropagation time.Duration
	// Namespaces limits the watch of the users' Secrets and ConfigMaps to
	// the namespaces the manager's cache watches (all when nil).
	Namespaces map[string]cache.Config
	// StallAfter is how long an environment failure lasts before the
	// ApiServerConfig is Stalled (DefaultStallAfter when zero).
	StallAfter time.Duration

	// applied remembers, per object, the resourceVersion the operator's last
	// apply left, so that an object nobody changed is not applied again.
	applied sync.Map
	// generationSeen remembers when each ApiServerConfig's current
	// generation was first reconciled, for the time-to-Ready histogram.
	generationSeen sync.Map
	// written remembers, per ApiServerConfig, the object as the operator's
	// last write (finalizer or status) left it: see fresher.
	written sync.Map
}

// writtenConfig is an ApiServerConfig as a write of the operator left it,
// and the resourceVersions that this write and the ones before it replaced.
type writtenConfig struct {
	obj        *v1alpha1.ApiServerConfig
	superseded []string
}

// fresher returns what the operator last wrote of cfg when the cache still
// holds a version that write replaced. A pass that started from such a
// stale copy would write the same status again, repeat its events, and
// take rotation decisions on phases that already moved. The same key is
// never reconciled by two workers at once, so the record needs no lock of
// its own.
func (r *ApiServerConfigReconciler) fresher(cfg *v1alpha1.ApiServerConfig) *v1alpha1.ApiServerConfig {
	key := client.ObjectKeyFromObject(cfg)
	v, ok := r.written.Load(key)
	if !ok {
		return cfg
	}
	w := v.(writtenConfig)
	if slices.Contains(w.superseded, cfg.ResourceVersion) {
		return w.obj.DeepCopy()
	}
	// The cache caught up with the write, or someone wrote after it.
	r.written.Delete(key)
	return cfg
}

// remember records cfg as a write of the operator left it; previous is the
// resourceVersion the write started from.
func (r *ApiServerConfigReconciler) remember(previous string, cfg *v1alpha1.ApiServerConfig) {
	if cfg.ResourceVersion == previous {
		return // the server had nothing to change
	}
	key := client.ObjectKeyFromObject(cfg)
	superseded := []string{previous}
	if v, ok := r.written.Load(key); ok {
		if w := v.(writtenConfig); w.obj.ResourceVersion == previous {
			// A chain of writes (finalizer, then status): the cache may
			// still hold any version of it. A few are plenty.
			superseded = append(w.superseded[max(0, len(w.superseded)-3):], previous)
		}
	}
	obj := cfg.DeepCopy()
	obj.SetManagedFields(nil) // the server's answer has them; nothing reads them
	r.written.Store(key, writtenConfig{obj: obj, superseded: superseded})
}

// generationStart is when a generation was first reconciled.
type generationStart struct {
	generation int64
	at         time.Time
}

// trackTimeToReady observes, once per generation, the time from its first
// reconcile to Ready for it.
func (r *ApiServerConfigReconciler) trackTimeToReady(cfg *v1alpha1.ApiServerConfig, now time.Time) {
	key := cfg.Namespace + "/" + cfg.Name
	seen, ok := r.generationSeen.Load(key)
	if !ok || seen.(generationStart).generation != cfg.Generation {
		seen = generationStart{generation: cfg.Generation, at: now}
		r.generationSeen.Store(key, seen)
	}
	ready := meta.FindStatusCondition(cfg.Status.Conditions, v1alpha1.ConditionReady)
	if ready != nil && ready.Status == metav1.ConditionTrue && ready.ObservedGeneration == cfg.Generation {
		start := seen.(generationStart)
		if !start.at.IsZero() {
			timeToReady.Observe(now.Sub(start.at).Seconds())
			r.generationSeen.Store(key, generationStart{generation: cfg.Generation})
		}
	}
}

// owned are the events of owned objects that bring their owner back: all
// but their creation. The operator creates them itself, in a pass that goes
// on with what the server answered, so a creation would only queue a pass
// with nothing to do: one per object of a new tenant, the whole batch over
// again when many are created at once. Their updates (a Deployment's
// rollout, a Service's load-balancer address, someone's edit) and deletions
// do bring the owner back.
var owned = builder.WithPredicates(predicate.Funcs{CreateFunc: func(event.CreateEvent) bool { return false }})

// podOwner is the ApiServerConfig of an apiserver pod, named by its label.
func podOwner(_ context.Context, pod client.Object) []reconcile.Request {
	name := pod.GetLabels()[apiserver.NameLabel]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: pod.GetNamespace(), Name: name}}}
}

// SetupWithManager registers the reconciler: it watches ApiServerConfigs
// and the objects it owns.
func (r *ApiServerConfigReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.ApiServerConfig{}, referenceIndex, indexReferences); err != nil {
		return fmt.Errorf("indexing ApiServerConfigs by the objects they name: %w", err)
	}
	// The metadata of the users' Secrets and ConfigMaps, in a cache of its
	// own: the manager's holds only the operator's objects.
	references, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		DefaultNamespaces: r.Namespaces, DefaultTransform: cache.TransformStripManagedFields(),
	})
	if err != nil {
		return fmt.Errorf("creating the cache of referenced Secrets and ConfigMaps: %w", err)
	}
	if err := mgr.Add(references); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.ApiServerConfig{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		Owns(&appsv1.Deployment{}, owned).
		Owns(&corev1.Service{}, owned).
		Owns(&corev1.Secret{}, owned).
		Owns(&corev1.ConfigMap{}, owned).
		Owns(&policyv1.PodDisruptionBudget{}, owned).
		// The apiserver pods say why a rollout does not progress, and when
		// the last one of a hibernating tenant is gone.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podOwner))
	for _, src := range r.referenceSources(references, mgr.GetClient()) {
		b = b.WatchesRawSource(src)
	}
	return b.Named("apiserverconfig").
		WithOptions(controller.Options{MaxConcurrentReconciles: cmp.Or(r.MaxConcurrentReconciles, DefaultMaxConcurrentReconciles)}).
		Complete(r)
}

// stepError names the step that failed, for status and metrics.
type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string { return e.step + ": " + e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

func step(name string, err error) error {
	if err == nil {
		return nil
	}
	return &stepError{step: name, err: err}
}

// Reconcile runs the steps in order; the first error stops the pass. Status
// is written once, at the end, and only when it changed.
func (r *ApiServerConfigReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	log := ctrl.LoggerFrom(ctx)
	cfg := &v1alpha1.ApiServerConfig{}
	if err := r.Client.Get(ctx, req.NamespacedName, cfg); err != nil {
		if apierrors.IsNotFound(err) {
			r.written.Delete(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cfg = r.fresher(cfg)
	if !cfg.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, cfg)
	}
	if !controllerutil.ContainsFinalizer(cfg, Finalizer) {
		patch := client.MergeFrom(cfg.DeepCopy())
		previous := cfg.ResourceVersion
		controllerutil.AddFinalizer(cfg, Finalizer)
		if err := r.Client.Patch(ctx, cfg, patch); err != nil {
			// Deleted meanwhile: nothing is left to do.
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		// The pass goes on with the object the patch returned.
		r.remember(previous, cfg)
	}

	if err := r.markReconciling(ctx, cfg); err != nil {
		return ctrl.Result{}, err
	}

	now := r.Clock.Now()
	before := cfg.DeepCopy()
	obs := observations{generation: cfg.Generation, masterCount: 1, now: now, stallAfter: cmp.Or(r.StallAfter, DefaultStallAfter)}
	if cfg.Spec.MasterCount != nil {
		obs.masterCount = *cfg.Spec.MasterCount
	}
	defer func() {
		var se *stepError
		if errors.As(retErr, &se) {
			obs.stepErr, obs.failedStep = se.err, se.step
			reconcileErrors.WithLabelValues(se.step).Inc()
		}
		if err := r.writeStatus(ctx, before, cfg, obs); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("writing status: %w", err))
		}
		// An environment failure is looked at again when it would stall.
		if retErr == nil && obs.failure != nil && !obs.failure.stalled(obs.now, obs.stallAfter) {
			result.RequeueAfter = minPositive(result.RequeueAfter, obs.failure.since.Add(obs.stallAfter).Sub(obs.now)+time.Second)
		}
		r.trackTimeToReady(cfg, r.Clock.Now())
	}()

	// A spec that passed the CRD's rules but not the checks against the
	// bundled binary (the webhook may be off): stalled until edited.
	if errs, _ := apiserver.Validate(cfg); len(errs) > 0 {
		obs.invalid = errs.ToAggregate()
		r.event(cfg, corev1.EventTypeWarning, v1alpha1.ReasonInvalidSpec, "Validate", "%s", obs.invalid.Error())
		return ctrl.Result{}, reconcile.TerminalError(obs.invalid)
	}

	// What runs now, from the cache: status tells it even when a step
	// stops the pass.
	current := &appsv1.Deployment{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.DeploymentName(cfg.Name)}, current); err == nil {
		obs.deployment = current
	} else if !apierrors.IsNotFound(err) {
		return ctrl.Result{}, step("Deployment", err)
	}
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(cfg.Namespace), client.MatchingLabels(apiserver.SelectorLabels(cfg.Name))); err != nil {
		return ctrl.Result{}, step("Pods", err)
	}
	obs.podsLeft = len(pods.Items)

	// The users' Secrets and ConfigMaps the spec names: without them
	// nothing can start. Their watch brings the object back when one is
	// created or fixed.
	refs, err := readReferences(ctx, r.APIReader, cfg)
	if missing := (*missingReference)(nil); errors.As(err, &missing) {
		obs.failure = &envFailure{reason: v1alpha1.ReasonReferenceMissing, message: missing.Error(),
			since: failingSince(before.Status.Conditions, v1alpha1.ReasonReferenceMissing, now)}
		return ctrl.Result{}, nil
	} else if err != nil {
		return ctrl.Result{}, step("References", err)
	}

	// The Service's ClusterIP and load-balancer addresses are SANs of the
	// serving certificate: the Service is applied first, and the options
	// completed again only when applying it changed them (a new Service),
	// or the certificate would be issued without them and then again.
	in := apiserver.Inputs{}
	if s := cfg.Status.CacheSizing; s != nil {
		in.ObservedNodes, in.ObservedPods = s.SizedForNodes, s.SizedForPods
	}
	svc := &corev1.Service{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.ServiceName(cfg.Name)}, svc); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, step("Service", err)
	}
	in.ServiceClusterIP, in.ServiceIngress = serviceAddresses(svc)
	c, err := apiserver.Complete(cfg, in)
	if err != nil {
		obs.invalid = err
		return ctrl.Result{}, reconcile.TerminalError(err)
	}
	svc = apiserver.DesiredService(c)
	if err := r.apply(ctx, cfg, svc, true); err != nil {
		return ctrl.Result{}, step("Service", err)
	}
	if ip, ingress := serviceAddresses(svc); ip != in.ServiceClusterIP || !slices.Equal(ingress, in.ServiceIngress) {
		in.ServiceClusterIP, in.ServiceIngress = ip, ingress
		if c, err = apiserver.Complete(cfg, in); err != nil {
			obs.invalid = err
			return ctrl.Result{}, reconcile.TerminalError(err)
		}
	}

	// PKI: what exists and is current, and what must be issued.
	p, err := r.reconcilePKI(ctx, cfg, c, refs, now)
	if err != nil {
		return ctrl.Result{}, step("PKI", err)
	}
	if len(p.issued) > 0 {
		r.event(cfg, corev1.EventTypeNormal, v1alpha1.ReasonCertificatesIssued, "IssueCertificates", "Issued %s", strings.Join(p.issued, ", "))
	}
	obs.certsReady = true
	obs.certsMessage = fmt.Sprintf("Next renewal at %s", p.nextRenewal.UTC().Format(time.RFC3339))
	cfg.Status.Certificates = p.certificates
	recordCertificateExpiry(cfg, p.certificates)

	// etcd.
	tlsConfig, etcdFiles, err := etcdTLS(ctx, refs, cfg, &c.Spec.Etcd)
	if err != nil {
		return ctrl.Result{}, step("Etcd", err)
	}
	requeue := time.Duration(0)
	if r.Etcd != nil {
		obs.etcdChecked = true
		obs.etcdErr = r.Etcd.Check(ctx, etcdEndpoints(&c.Spec.Etcd), tlsConfig)
		if obs.etcdErr != nil {
			log.Info("etcd is unreachable", "apiServerConfig", klog.KObj(cfg), "error", obs.etcdErr.Error())
			obs.failure = &envFailure{reason: v1alpha1.ReasonEtcdUnreachable, message: obs.etcdErr.Error(),
				since: failingSince(before.Status.Conditions, v1alpha1.ReasonEtcdUnreachable, now)}
			requeue = etcdRetryInterval
		} else if c.Spec.CacheSizing.Policy == v1alpha1.CacheSizingAuto {
			resized, next, err := r.observeClusterSize(ctx, cfg, c, tlsConfig, now)
			if err != nil {
				log.Info("Counting the tenant's nodes and pods failed", "apiServerConfig", klog.KObj(cfg), "error", err.Error())
			}
			if resized {
				// Complete again with the counts now in force.
				in.ObservedNodes, in.ObservedPods = cfg.Status.CacheSizing.SizedForNodes, cfg.Status.CacheSizing.SizedForPods
				if c, err = apiserver.Complete(cfg, in); err != nil {
					return ctrl.Result{}, reconcile.TerminalError(err)
				}
			}
			requeue = minPositive(requeue, next)
		}
	}

	// Configuration.
	oidcCA, err := oidcCA(ctx, refs, cfg, c)
	if err != nil {
		return ctrl.Result{}, step("Config", err)
	}
	cm, err := apiserver.DesiredConfigMap(c, oidcCA)
	if err != nil {
		return ctrl.Result{}, step("Config", err)
	}
	if err := r.apply(ctx, cfg, cm, true); err != nil {
		return ctrl.Result{}, step("Config", err)
	}
	encryption, err := r.encryptionSecret(ctx, c)
	if err != nil {
		return ctrl.Result{}, step("Encryption", err)
	}
	if encryption != nil {
		if err := r.apply(ctx, cfg, encryption, true); err != nil {
			return ctrl.Result{}, step("Encryption", err)
		}
	}

	// Rotations move one phase at a time, and only once the pods run what
	// the previous phase published.
	args, err := apiserver.Args(c)
	if err != nil {
		return ctrl.Result{}, step("Deployment", err)
	}
	secrets, err := apiserver.DesiredPKISecrets(c, p.secrets)
	if err != nil {
		return ctrl.Result{}, step("PKI", err)
	}
	hash := apiserver.ConfigHash(args, apiserver.PodFiles(c, secrets, cm, encryption, etcdFiles))
	rolledOut := rolloutDone(current) && current.Spec.Template.Annotations[apiserver.ConfigHashAnnotation] == hash
	rotationWait, err := r.rotate(ctx, cfg, c, p, now, rolledOut)
	if err != nil {
		return ctrl.Result{}, step("Rotation", err)
	}
	if secrets, err = apiserver.DesiredPKISecrets(c, p.secrets); err != nil {
		return ctrl.Result{}, step("PKI", err)
	}
	hash = apiserver.ConfigHash(args, apiserver.PodFiles(c, secrets, cm, encryption, etcdFiles))

	// The Secrets do not depend on each other: applied side by side, a new
	// tenant's Deployment comes a few round trips sooner.
	retained := c.Spec.Certificates.PKIRetention == "Retain"
	g, gctx := errgroup.WithContext(ctx)
	for _, s := range secrets {
		g.Go(func() error { return r.apply(gctx, cfg, s, !(retained && isCASecret(cfg.Name, s.Name))) })
	}
	if err := g.Wait(); err != nil {
		return ctrl.Result{}, step("PKI", err)
	}

	// Deployment.
	deploy, err := apiserver.DesiredDeployment(c, args, apiserver.DeploymentInputs{ConfigHash: hash, ImageRepository: r.ImageRepository})
	if err != nil {
		return ctrl.Result{}, step("Deployment", err)
	}
	if err := r.apply(ctx, cfg, deploy, true); err != nil {
		return ctrl.Result{}, step("Deployment", err)
	}
	current = deploy
	obs.deployment = current
	// A rollout that does not progress: the pods say why.
	if obs.failure == nil && obs.masterCount > 0 && !rolloutDone(current) {
		obs.failure = cmp.Or(podFailure(pods.Items), rolloutFailure(current))
	}
	if rotationWait > 0 {
		requeue = minPositive(requeue, rotationWait)
	}

	// Scaling: the disruption budget exists only with more than one
	// apiserver.
	if pdb := apiserver.DesiredPodDisruptionBudget(c); pdb != nil {
		if err := r.apply(ctx, cfg, pdb, true); err != nil {
			return ctrl.Result{}, step("PodDisruptionBudget", err)
		}
	} else if err := r.deleteIfOwned(ctx, cfg, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: apiserver.DeploymentName(cfg.Name)}}); err != nil {
		return ctrl.Result{}, step("PodDisruptionBudget", err)
	}

	// Status fields that come from what was applied.
	cfg.Status.Replicas = current.Status.Replicas
	cfg.Status.ReadyReplicas = current.Status.ReadyReplicas
	cfg.Status.Selector = apiserver.Selector(cfg.Name)
	cfg.Status.Version = c.Spec.Version
	cfg.Status.Endpoint = c.Endpoint
	cfg.Status.AdminKubeconfigSecretName = apiserver.AdminKubeconfigSecretName(cfg.Name)
	cfg.Status.CacheSizing = sizingStatus(cfg.Status.CacheSizing, c.Sizing)

	// Come back when the first certificate is due, never by polling.
	requeue = minPositive(requeue, p.nextRenewal.Sub(r.Clock.Now()))
	return ctrl.Result{RequeueAfter: requeue}, nil
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

func minPositive(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return max(b, time.Second)
	case b <= 0:
		return a
	}
	return min(a, b)
}

func isCASecret(name, secret string) bool {
	return secret == apiserver.CASecretName(name) || secret == apiserver.FrontProxyCASecretName(name) ||
		secret == apiserver.ServiceAccountSecretName(name)
}

// sizingStatus carries the sizing in force into status, keeping what Auto
// observed.
func sizingStatus(prev *v1alpha1.CacheSizingStatus, s apiserver.Sizing) *v1alpha1.CacheSizingStatus {
	out := &v1alpha1.CacheSizingStatus{}
	if prev != nil {
		out = prev.DeepCopy()
	}
	out.TargetRAMMB, out.CapacityNodes, out.EstimatedClusterSize = s.TargetRAMMB, s.CapacityNodes, s.EstimatedClusterSize
	out.MaxInflight, out.MaxMutatingInflight, out.GoMemLimitBytes, out.OverCapacity = s.MaxInflight, s.MaxMutatingInflight, s.GoMemLimitBytes, s.OverCapacity
	return out
}

// observeClusterSize counts the tenant's nodes and pods in etcd, at most
// every r.AutoSizingInterval, and moves the counts the sizing is computed
// from when apiserver.DecideResize says so. It returns whether they moved
// and when to count again.
func (r *ApiServerConfigReconciler) observeClusterSize(ctx context.Context, cfg *v1alpha1.ApiServerConfig, c *apiserver.Completed, tlsConfig *tls.Config, now time.Time) (bool, time.Duration, error) {
	spec := &c.Spec.Etcd
	cs := c.Spec.CacheSizing
	interval := cs.ObservationInterval.Duration
	policy := apiserver.ResizePolicy{Threshold: float64(*cs.ResizeThresholdPercent) / 100, MinInterval: cs.MinResizeInterval.Duration}
	if r.AutoSizingInterval > 0 {
		interval = r.AutoSizingInterval
	}
	if r.ResizePolicy != (apiserver.ResizePolicy{}) {
		policy = r.ResizePolicy
	}
	st := cfg.Status.CacheSizing
	if st == nil {
		st = &v1alpha1.CacheSizingStatus{}
		cfg.Status.CacheSizing = st
	}
	if st.ObservationTime != nil && now.Sub(st.ObservationTime.Time) < interval {
		return false, interval - now.Sub(st.ObservationTime.Time), nil
	}
	nodes, err := r.Etcd.Count(ctx, serversOf(spec, "nodes"), tlsConfig, spec.Prefix+"/minions/")
	if err != nil {
		return false, interval, err
	}
	pods, err := r.Etcd.Count(ctx, serversOf(spec, "pods"), tlsConfig, spec.Prefix+"/pods/")
	if err != nil {
		return false, interval, err
	}
	st.ObservedNodes, st.ObservedPods = &nodes[0], &pods[0]
	st.ObservationTime = &metav1.Time{Time: now.UTC().Truncate(time.Second)}
	var last *time.Time
	if st.LastResizeTime != nil {
		last = &st.LastResizeTime.Time
	}
	if !apiserver.DecideResize(st.SizedForNodes, st.SizedForPods, last, nodes[0], pods[0], now, policy) {
		return false, interval, nil
	}
	st.SizedForNodes, st.SizedForPods = &nodes[0], &pods[0]
	st.LastResizeTime = &metav1.Time{Time: now.UTC().Truncate(time.Second)}
	sizingDecisions.WithLabelValues(cfg.Namespace, cfg.Name).Inc()
	r.event(cfg, corev1.EventTypeNormal, "Resized", "Resize", "Sized for %d nodes and %d pods observed in etcd", nodes[0], pods[0])
	return true, interval, nil
}

// oidcCA reads the OIDC issuer's CA from the ConfigMap the spec names.
func oidcCA(ctx context.Context, refs client.Reader, cfg *v1alpha1.ApiServerConfig, c *apiserver.Completed) ([]byte, error) {
	o := c.Spec.Authentication.OIDC
	if o == nil || o.CAConfigMapName == "" {
		return nil, nil
	}
	cm := &corev1.ConfigMap{}
	if err := refs.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: o.CAConfigMapName}, cm); err != nil {
		return nil, fmt.Errorf("reading ConfigMap %s/%s named by spec.authentication.oidc.caConfigMapName: %w", cfg.Namespace, o.CAConfigMapName, err)
	}
	ca := cm.Data["ca.crt"]
	if ca == "" {
		return nil, fmt.Errorf("ConfigMap %s/%s has no key ca.crt", cfg.Namespace, o.CAConfigMapName)
	}
	return []byte(ca), nil
}

// encryptionKeysKey keeps the raw keys next to the configuration, so that
// they survive any change of the rendered file.
const encryptionKeysKey = "keys.json"

// encryptionSecret keeps the encryption keys of spec.encryption.provider,
// generating the first one; nil when the operator manages no encryption.
func (r *ApiServerConfigReconciler) encryptionSecret(ctx context.Context, c *apiserver.Completed) (*corev1.Secret, error) {
	if c.Spec.Encryption == nil || c.Spec.Encryption.Provider == "" {
		return nil, nil
	}
	var keys []apiserver.EncryptionKey
	existing := &corev1.Secret{}
	err := ownSecrets{r}.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: apiserver.EncryptionSecretName(c.Name)}, existing)
	switch {
	case err == nil && len(existing.Data[encryptionKeysKey]) > 0:
		if err := json.Unmarshal(existing.Data[encryptionKeysKey], &keys); err != nil {
			return nil, fmt.Errorf("reading the encryption keys of Secret %s/%s (restore it from a backup: data encrypted with a lost key is lost): %w",
				c.Namespace, apiserver.EncryptionSecretName(c.Name), err)
		}
	case err != nil && !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading Secret %s/%s: %w", c.Namespace, apiserver.EncryptionSecretName(c.Name), err)
	default:
		key := apiserver.EncryptionKey{Name: "key-1", Secret: make([]byte, 32)}
		if _, err := rand.Read(key.Secret); err != nil {
			return nil, fmt.Errorf("generating an encryption key: %w", err)
		}
		keys = []apiserver.EncryptionKey{key}
	}
	s, err := apiserver.DesiredEncryptionSecret(c, keys)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(keys)
	if err != nil {
		return nil, fmt.Errorf("encoding the encryption keys: %w", err)
	}
	s.Data[encryptionKeysKey] = raw
	return s, nil
}

// apply server-side applies obj with the operator's field owner, owned by
// cfg when owned is true. It writes nothing when the object already holds
// what was last applied and nobody changed it since. Either way obj ends up
// as the cluster holds it.
func (r *ApiServerConfigReconciler) apply(ctx context.Context, cfg *v1alpha1.ApiServerConfig, obj client.Object, owned bool) error {
	if owned {
		if err := controllerutil.SetControllerReference(cfg, obj, r.Scheme); err != nil {
			return fmt.Errorf("owning %T %s: %w", obj, obj.GetName(), err)
		}
	}
	hash, err := objectHash(obj)
	if err != nil {
		return err
	}
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[appliedHashAnnotation] = hash
	obj.SetAnnotations(annotations)

	key := appliedKey(obj)
	existing, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("copying %T", obj)
	}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(obj), existing); err == nil {
		last, seen := r.applied.Load(key)
		if existing.GetAnnotations()[appliedHashAnnotation] == hash && seen && last == existing.GetResourceVersion() {
			// obj becomes what the cluster holds, status included.
			return r.Scheme.Convert(existing, obj, nil)
		}
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading %T %s: %w", obj, obj.GetName(), err)
	}

	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return fmt.Errorf("converting %T %s: %w", obj, obj.GetName(), err)
	}
	delete(u, "status")
	unstructured.RemoveNestedField(u, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u, "spec", "template", "metadata", "creationTimestamp")
	desired := &unstructured.Unstructured{Object: u}
	if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(desired), client.FieldOwner(apiserver.FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s/%s: %w", desired.GetKind(), obj.GetNamespace(), obj.GetName(), err)
	}
	r.applied.Store(key, desired.GetResourceVersion())
	// obj becomes the server's answer: the cache may not have it yet.
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(desired.Object, obj); err != nil {
		return fmt.Errorf("reading back %s %s/%s: %w", desired.GetKind(), obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// appliedKey names obj in r.applied.
func appliedKey(obj client.Object) string {
	return fmt.Sprintf("%T/%s/%s", obj, obj.GetNamespace(), obj.GetName())
}

// ownSecrets reads the Secrets the operator writes (CAs, keys, certificates,
// encryption keys) from the cache, unless the cache has not caught up with
// the operator's last write of one: then from the API server. A pass that
// trusted a lagging cache would find a CA or an encryption key missing or
// old and issue another, replacing the one in use.
type ownSecrets struct{ r *ApiServerConfigReconciler }

func (o ownSecrets) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	err := o.r.Client.Get(ctx, key, obj, opts...)
	obj.SetNamespace(key.Namespace)
	obj.SetName(key.Name)
	last, written := o.r.applied.Load(appliedKey(obj))
	if !written || (err == nil && obj.GetResourceVersion() == last) {
		return err
	}
	return o.r.APIReader.Get(ctx, key, obj, opts...)
}

func (o ownSecrets) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return o.r.Client.List(ctx, list, opts...)
}

// objectHash hashes the desired object as it will be applied.
func objectHash(obj client.Object) (string, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return "", fmt.Errorf("hashing %T %s: %w", obj, obj.GetName(), err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])[:32], nil
}

// deleteIfOwned deletes obj if it exists and cfg owns it.
func (r *ApiServerConfigReconciler) deleteIfOwned(ctx context.Context, cfg *v1alpha1.ApiServerConfig, obj client.Object) error {
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(obj, cfg) {
		return nil
	}
	if err := r.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}

// reconcileDelete removes everything the operator created for cfg (the
// garbage collector would, but not every cluster runs it promptly, and
// Retain must orphan the CAs first), then releases the finalizer.
func (r *ApiServerConfigReconciler) reconcileDelete(ctx context.Context, cfg *v1alpha1.ApiServerConfig) error {
	if !controllerutil.ContainsFinalizer(cfg, Finalizer) {
		return nil
	}
	retain := cfg.Spec.Certificates.PKIRetention == "Retain"
	n := cfg.Name
	objs := []client.Object{
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: apiserver.DeploymentName(n)}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: apiserver.DeploymentName(n)}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: apiserver.ServiceName(n)}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: apiserver.ConfigMapName(n)}},
	}
	for _, name := range []string{apiserver.ServingSecretName(n), apiserver.KubeletClientSecretName(n), apiserver.FrontProxyClientSecretName(n),
		apiserver.AdminKubeconfigSecretName(n), apiserver.EncryptionSecretName(n), apiserver.CASecretName(n),
		apiserver.FrontProxyCASecretName(n), apiserver.ServiceAccountSecretName(n)} {
		objs = append(objs, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	for _, obj := range objs {
		obj.SetNamespace(cfg.Namespace)
		if retain && isCASecret(n, obj.GetName()) {
			if err := r.orphan(ctx, cfg, obj); err != nil {
				return step("Delete", err)
			}
			continue
		}
		if err := r.deleteIfOwned(ctx, cfg, obj); err != nil {
			return step("Delete", err)
		}
	}
	patch := client.MergeFrom(cfg.DeepCopy())
	controllerutil.RemoveFinalizer(cfg, Finalizer)
	if err := r.Client.Patch(ctx, cfg, patch); err != nil {
		return fmt.Errorf("removing the finalizer: %w", err)
	}
	forgetMetrics(cfg)
	return nil
}

// orphan removes cfg's owner reference from obj, so that it outlives cfg.
func (r *ApiServerConfigReconciler) orphan(ctx context.Context, cfg *v1alpha1.ApiServerConfig, obj client.Object) error {
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return client.IgnoreNotFound(err)
	}
	refs := obj.GetOwnerReferences()
	kept := slices.DeleteFunc(slices.Clone(refs), func(ref metav1.OwnerReference) bool { return ref.UID == cfg.UID })
	if len(kept) == len(refs) {
		return nil
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	obj.SetOwnerReferences(kept)
	if err := r.Client.Patch(ctx, obj, patch); err != nil {
		return fmt.Errorf("keeping %s (pkiRetention Retain): %w", obj.GetName(), err)
	}
	return nil
}

// markReconciling says at once, before any slow step, that the operator
// works on a new generation of an object it has reported on: otherwise the
// previous generation's conditions, Ready among them, would stand until the
// pass ends. A new object needs no such write: its observedGeneration reads
// 0 (a default of the CRD) until the operator's first status, which GitOps
// tools read as in progress.
func (r *ApiServerConfigReconciler) markReconciling(ctx context.Context, cfg *v1alpha1.ApiServerConfig) error {
	if cfg.Status.ObservedGeneration == cfg.Generation || len(cfg.Status.Conditions) == 0 {
		return nil
	}
	before := cfg.DeepCopy()
	msg := fmt.Sprintf("Reconciling generation %d", cfg.Generation)
	meta.SetStatusCondition(&cfg.Status.Conditions, condition(v1alpha1.ConditionReconciling, true, v1alpha1.ReasonProgressing, msg, cfg.Generation))
	meta.SetStatusCondition(&cfg.Status.Conditions, condition(v1alpha1.ConditionReady, false, v1alpha1.ReasonProgressing, msg, cfg.Generation))
	meta.SetStatusCondition(&cfg.Status.Conditions, condition(v1alpha1.ConditionStalled, false, v1alpha1.ReasonProgressing, msg, cfg.Generation))
	cfg.Status.ObservedGeneration = cfg.Generation
	if err := r.Client.Status().Patch(ctx, cfg, client.MergeFrom(before)); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("marking generation %d as reconciling: %w", cfg.Generation, err))
	}
	r.remember(before.ResourceVersion, cfg)
	return nil
}

// writeStatus computes the conditions and patches status when anything
// changed; observedGeneration moves only on a successful pass.
func (r *ApiServerConfigReconciler) writeStatus(ctx context.Context, before, cfg *v1alpha1.ApiServerConfig, obs observations) error {
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

func (r *ApiServerConfigReconciler) event(cfg *v1alpha1.ApiServerConfig, kind, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(cfg, nil, kind, reason, action, note, args...)
	}
}

// rotate advances the CA and service-account key rotations and reports
// their phases in status. It returns how soon to come back for them: at
// once after an action (the leaves of a new CA are issued by the next
// pass), at the end of a wait, or 0 when only the Deployment's rollout,
// which its watch reports, can move them.
func (r *ApiServerConfigReconciler) rotate(ctx context.Context, cfg *v1alpha1.ApiServerConfig, c *apiserver.Completed, p *pkiResult, now time.Time, rolledOut bool) (time.Duration, error) {
	in := rotationInputs{cfg: cfg, c: c, now: now, rolloutComplete: rolledOut, existing: map[string]*corev1.Secret{},
		caTrustPropagation: r.CATrustPropagation}
	if in.caTrustPropagation == 0 {
		in.caTrustPropagation = defaultCATrustPropagation
	}
	for _, name := range []string{apiserver.CASecretName(cfg.Name), apiserver.ServiceAccountSecretName(cfg.Name)} {
		s := &corev1.Secret{}
		if err := (ownSecrets{r}).Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: name}, s); err == nil {
			in.existing[name] = s
		} else if !apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("reading Secret %s/%s: %w", cfg.Namespace, name, err)
		}
	}
	ca, err := rotateCA(in, p)
	if err != nil {
		return 0, err
	}
	sa, err := rotateServiceAccountKey(in, p)
	if err != nil {
		return 0, err
	}
	cfg.Status.Rotations = []v1alpha1.RotationStatus{ca.status, sa.status}
	for _, res := range []rotationResult{ca, sa} {
		if len(res.actions) > 0 {
			r.event(cfg, corev1.EventTypeNormal, "Rotation", "Rotate", "Rotation of the %s entered phase %s", res.status.Name, res.status.Phase)
		}
	}
	if len(ca.actions)+len(sa.actions) > 0 {
		return rotationRequeue, nil
	}
	var wait time.Duration
	for _, at := range []time.Time{ca.wakeAt, sa.wakeAt} {
		if !at.IsZero() {
			wait = minPositive(wait, at.Sub(now))
		}
	}
	return wait, nil
}

// CacheOptions limits the manager's cache of the kinds the operator owns
// to the objects it creates (they carry its managed-by label): caching every
// Secret or Deployment of a management cluster would cost memory and, for
// Secrets, read access the operator does not need. The users' Secrets are
// read with APIReader. Cached objects drop their managedFields, which the
// reconciler never reads and which are a large part of each object once
// server-side apply wrote it.
func CacheOptions() cache.Options {
	owned := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{"app.kubernetes.io/managed-by": apiserver.FieldOwner})}
	// The apiserver pods carry the name label (they are the Deployment's,
	// not the operator's, so they have no managed-by label).
	apiserverPod, _ := labels.NewRequirement(apiserver.NameLabel, selection.Exists, nil)
	return cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:                   {Label: labels.NewSelector().Add(*apiserverPod)},
			&corev1.Secret{}:                owned,
			&corev1.ConfigMap{}:             owned,
			&corev1.Service{}:               owned,
			&appsv1.Deployment{}:            owned,
			&policyv1.PodDisruptionBudget{}: owned,
		},
		DefaultTransform: cache.TransformStripManagedFields(),
	}
}
