package tenants

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/backups"
	"github.com/apiserver-operator/apiserver-operator/controllers/datastores"
	"github.com/apiserver-operator/apiserver-operator/controllers/managercache"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantindex"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantwatch"
)

// +kubebuilder:rbac:groups="",resources=secrets;configmaps;services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch;delete
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

// Reconciler turns an ApiServerConfig into running
// kube-apiservers: PKI Secrets, etcd checks, Service, configuration,
// Deployment and PodDisruptionBudget, then status.
type Reconciler struct {
	// Client reads from the cache (the operator's own objects, which carry
	// its labels) and writes.
	Client client.Client
	// APIReader reads what the cache does not hold: the users' Secrets and
	// ConfigMaps that the spec names.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// Ownership proves that the operator wrote a tenant's Secrets and
	// Deployment, and checks it before one is read as key material or
	// taken as evidence (ownership.Load).
	Ownership *apiserver.Ownership
	// Reach is how every step reaches a tenant: its etcd, its API and its
	// apiservers' metrics, its konnectivity servers (tenantio.Real; a test
	// of a step, tenantiofake.Reach). Nil skips the etcd checks and counts
	// (tests of the rendering only).
	Reach tenantio.Reach
	// ImageRepository overrides apiserver.DefaultImageRepository.
	ImageRepository string
	// EtcdDialerImage overrides apiserver.DefaultEtcdDialerImage.
	EtcdDialerImage string
	// KonnectivityServerImage and KonnectivityAgentImage override
	// apiserver.DefaultKonnectivityServerImage and
	// apiserver.DefaultKonnectivityAgentImage.
	KonnectivityServerImage string
	KonnectivityAgentImage  string
	// TenantEgress are the platform's ranges of the apiserver pods' egress
	// filter: the management cluster's networks no tenant may call, and
	// the exceptions (ManagementServiceRanges finds the Service ranges).
	TenantEgress apiserver.EgressRanges
	// MaxConcurrentReconciles is how many ApiServerConfigs are reconciled
	// at once (DefaultMaxConcurrentReconciles when zero).
	MaxConcurrentReconciles int
	// ResizePolicy and AutoSizingInterval override, when set, the Auto
	// sizing settings of every spec (spec.cacheSizing's
	// resizeThresholdPercent, minResizeInterval, observationInterval).
	ResizePolicy       apiserver.ResizePolicy
	AutoSizingInterval time.Duration
	// CATrustPropagation is the least time a new CA is trusted before it
	// signs (DefaultCATrustPropagation when zero).
	CATrustPropagation time.Duration
	// Namespaces limits the watch of the users' Secrets and ConfigMaps to
	// the namespaces the manager's cache watches (all when nil).
	Namespaces map[string]cache.Config
	// StallAfter is how long an environment failure lasts before the
	// ApiServerConfig is Stalled (DefaultStallAfter when zero).
	StallAfter time.Duration
	// EtcdWatchInterval is how often every tenant's etcd servers are
	// looked at between passes (DefaultEtcdWatchInterval when zero).
	EtcdWatchInterval time.Duration

	// TenantIndex is every ApiServerConfig of the cluster: the deletion of
	// a tenant's data checks there that no other tenant's keys are under
	// its prefix. Nil deletes no data (deletionPolicy Delete then waits).
	TenantIndex *tenantindex.Tenants
	// KonnectivityWatchInterval is how often every tenant's konnectivity
	// servers are looked at between passes
	// (DefaultKonnectivityWatchInterval when zero).
	KonnectivityWatchInterval time.Duration
	// AuditWatchInterval is how often the audit counters of every tenant
	// with spec.audit.webhook are read between passes
	// (DefaultAuditWatchInterval when zero).
	AuditWatchInterval time.Duration
	// RemovedAPIQuietPeriod is how long no client may have called an API
	// the target minor removed before a held upgrade goes ahead
	// (DefaultRemovedAPIQuietPeriod when zero).
	RemovedAPIQuietPeriod time.Duration

	// BackupDir is the backup volume (--backup-dir), which a restore
	// (spec.restore) reads archives from.
	BackupDir string
	// BackupS3Endpoints are the S3 endpoints the platform allows (see
	// backups.ArchivePlaces).
	BackupS3Endpoints []string
	// BackupTimeout bounds one restore (backups.DefaultTimeout when zero).
	BackupTimeout time.Duration

	// restores run off the reconcile workers (backups.Restorer).
	restores     *backups.Restorer
	restoresOnce sync.Once
	// Datastores are the platform's etcd datastores (datastores.Label); nil
	// knows none.
	Datastores *datastores.Registry

	// memory is what the reconciler keeps per tenant between passes.
	memory memory
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
func (r *Reconciler) fresher(cfg *v1alpha1.ApiServerConfig) *v1alpha1.ApiServerConfig {
	key := client.ObjectKeyFromObject(cfg)
	w, ok := r.memory.written.Load(key)
	if !ok {
		return cfg
	}
	if slices.Contains(w.superseded, cfg.ResourceVersion) {
		return w.obj.DeepCopy()
	}
	// The cache caught up with the write, or someone wrote after it.
	r.memory.written.Forget(key)
	return cfg
}

// remember records cfg as a write of the operator left it; previous is the
// resourceVersion the write started from.
func (r *Reconciler) remember(previous string, cfg *v1alpha1.ApiServerConfig) {
	if cfg.ResourceVersion == previous {
		return // the server had nothing to change
	}
	key := client.ObjectKeyFromObject(cfg)
	superseded := []string{previous}
	if w, ok := r.memory.written.Load(key); ok {
		if w.obj.ResourceVersion == previous {
			// A chain of writes (finalizer, then status): the cache may
			// still hold any version of it. A few are plenty.
			// A copy: the recorded chain is shared with readers.
			superseded = append(slices.Clone(w.superseded[max(0, len(w.superseded)-3):]), previous)
		}
	}
	obj := cfg.DeepCopy()
	obj.SetManagedFields(nil) // the server's answer has them; nothing reads them
	r.memory.written.Store(key, writtenConfig{obj: obj, superseded: superseded})
}

// generationStart is when a generation was first reconciled.
type generationStart struct {
	generation int64
	at         time.Time
}

// trackTimeToReady observes, once per generation, the time from its first
// reconcile to Ready for it.
func (r *Reconciler) trackTimeToReady(cfg *v1alpha1.ApiServerConfig, now time.Time) {
	key := client.ObjectKeyFromObject(cfg)
	seen, ok := r.memory.generationSeen.Load(key)
	if !ok || seen.generation != cfg.Generation {
		seen = generationStart{generation: cfg.Generation, at: now}
		r.memory.generationSeen.Store(key, seen)
	}
	ready := meta.FindStatusCondition(cfg.Status.Conditions, v1alpha1.ConditionReady)
	if ready != nil && ready.Status == metav1.ConditionTrue && ready.ObservedGeneration == cfg.Generation && !seen.at.IsZero() {
		timeToReady.Observe(now.Sub(seen.at).Seconds())
		r.memory.generationSeen.Store(key, generationStart{generation: cfg.Generation})
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
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.ApiServerConfig{}, referenceIndex, indexReferences); err != nil {
		return fmt.Errorf("indexing ApiServerConfigs by the objects they name: %w", err)
	}
	// The metadata of the users' Secrets and ConfigMaps, in a cache of its
	// own: the manager's holds only the operator's objects.
	references, err := cache.New(mgr.GetConfig(), managercache.ReferenceCacheOptions(mgr.GetScheme(), mgr.GetRESTMapper(), r.Namespaces))
	if err != nil {
		return fmt.Errorf("creating the cache of referenced Secrets and ConfigMaps: %w", err)
	}
	if err := mgr.Add(references); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.ApiServerConfig{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		// The apiserver pods say why a rollout does not progress, and when
		// the last one of a hibernating tenant is gone.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podOwner)).
		// A new ReplicaSet makes its pods the tenant's (tenantPods): a
		// pod seen before its ReplicaSet is looked at again.
		Watches(managercache.ReplicaSetMetadata(), handler.EnqueueRequestsFromMapFunc(podOwner), builder.OnlyMetadata,
			builder.WithPredicates(predicate.Funcs{
				CreateFunc: func(event.CreateEvent) bool { return true },
				UpdateFunc: func(event.UpdateEvent) bool { return false },
				DeleteFunc: func(event.DeleteEvent) bool { return false },
			}))
	for _, src := range r.referenceSources(references, mgr.GetClient()) {
		b = b.WatchesRawSource(src)
	}
	if r.Reach != nil {
		r.memory.etcdWatch = tenantwatch.NewEtcd(r.Reach, cmp.Or(r.EtcdWatchInterval, tenantwatch.DefaultEtcdWatchInterval))
		if err := mgr.Add(r.memory.etcdWatch); err != nil {
			return err
		}
		b = b.WatchesRawSource(r.memory.etcdWatch.Source())
	}
	r.memory.agentWatch = tenantwatch.NewAgents(r.konnectivityProber(), cmp.Or(r.KonnectivityWatchInterval, tenantwatch.DefaultKonnectivityWatchInterval))
	if err := mgr.Add(r.memory.agentWatch); err != nil {
		return err
	}
	b = b.WatchesRawSource(r.memory.agentWatch.Source())
	r.memory.auditWatch = tenantwatch.NewAudit(cmp.Or(r.AuditWatchInterval, tenantwatch.DefaultAuditWatchInterval))
	if err := mgr.Add(r.memory.auditWatch); err != nil {
		return err
	}
	b = b.WatchesRawSource(r.memory.auditWatch.Source())
	if err := mgr.Add(r.restorer().Runnable()); err != nil {
		return err
	}
	b = b.WatchesRawSource(r.restores.Source())
	// Every kind of the objects a tenant owns.
	for _, o := range apiserver.OwnedKinds() {
		b = b.Owns(o, owned)
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

// overdueRequeue is how soon a pass follows one that asked to come back at
// a time already past (a deadline that is due now): never a busy loop.
const overdueRequeue = time.Second

// sooner is the earlier of current, a requeue where 0 means none, and d, a
// requeue asked for: d is kept as asked whatever current is, except that a
// d not in the future means overdueRequeue.
func sooner(current, d time.Duration) time.Duration {
	if d <= 0 {
		d = overdueRequeue
	}
	if current <= 0 {
		return d
	}
	return min(current, d)
}
