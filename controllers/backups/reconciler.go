package backups

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/backup"
	"github.com/apiserver-operator/apiserver-operator/controllers/archives"
	"github.com/apiserver-operator/apiserver-operator/controllers/ownership"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// +kubebuilder:rbac:groups=controlplane.apiserver-operator.dev,resources=apiserverbackups,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=controlplane.apiserver-operator.dev,resources=apiserverbackups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=controlplane.apiserver-operator.dev,resources=apiserverbackups/finalizers,verbs=update

// Finalizer removes a backup's archive with the backup.
const Finalizer = "controlplane.apiserver-operator.dev/archive"

// Waits of a backup.
const (
	// backupRetry is how soon a backup that waits for its tenant (not
	// started yet, a Secret missing) looks again.
	backupRetry = 30 * time.Second
)

// Reconciler takes each ApiServerBackup once: it reads every
// key under the tenant's prefix, on each etcd it stores in, at one
// revision of each, with the Secrets that read and trust them, into an
// archive sealed for an identity of the backup's own (a Secret, gone with
// the backup), and stores it. A backup that completed or failed is never
// taken again; deleting it removes its archive.
type Reconciler struct {
	Client client.Client
	// APIReader reads the Secrets the operator does not cache (the etcd
	// client Secret, the backup's identity).
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	Etcd      tenantio.EtcdV3
	// Ownership checks that the tenant's Secrets are the operator's
	// before they are backed up as its key material.
	Ownership *apiserver.Ownership
	// Dir is the backup volume (--backup-dir); empty refuses volume
	// storage.
	Dir string
	// S3Endpoints are the S3 endpoints the platform allows (see
	// ArchivePlaces).
	S3Endpoints []string
	// Timeout bounds one backup (DefaultTimeout when zero): one that
	// takes longer fails, and the worker goes on to the next.
	Timeout time.Duration
	// MaxBytes bounds one archive (DefaultMaxBytes when zero): a
	// backup whose archive would be larger fails, and keeps nothing.
	MaxBytes int64
	// EtcdTLS is how a tenant's etcd is reached (datastores.TenantTLS on
	// the platform's registry): a backup of a tenant on one of the
	// platform's datastores reads as its root. Required.
	EtcdTLS EtcdTLS
	// Workers is how many backups run at once (DefaultWorkers when
	// zero), one per namespace at most.
	Workers int

	// running are the namespaces a backup runs in now.
	mu      sync.Mutex
	running map[string]bool
}

// DefaultWorkers is how many backups run at once: each reads a whole
// tenant, so a burst queues rather than loads every etcd at once, and
// each namespace runs one at a time, so that one namespace's burst (or a
// backup that hangs until its timeout) delays no other namespace's.
const DefaultWorkers = 4

// backupTurnWait is how soon a backup whose namespace runs another looks
// again.
const backupTurnWait = 2 * time.Second

// startIn takes the namespace's turn; false when a backup of it runs.
func (r *Reconciler) startIn(namespace string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running[namespace] {
		return false
	}
	if r.running == nil {
		r.running = map[string]bool{}
	}
	r.running[namespace] = true
	return true
}

func (r *Reconciler) endIn(namespace string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.running, namespace)
}

// SetupWithManager registers the reconciler: Workers backups at a time,
// one per namespace (DefaultWorkers).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.ApiServerBackup{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: cmp.Or(r.Workers, DefaultWorkers)}).
		Complete(r)
}

// Reconcile takes the backup, or removes its archive when it is deleted.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	b := &v1alpha1.ApiServerBackup{}
	if err := r.Client.Get(ctx, req.NamespacedName, b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !b.DeletionTimestamp.IsZero() {
		if !controllerutil.ContainsFinalizer(b, Finalizer) {
			return ctrl.Result{}, nil
		}
		if err := r.removeArchive(ctx, b); err != nil {
			return ctrl.Result{}, err
		}
		patch := client.MergeFrom(b.DeepCopy())
		controllerutil.RemoveFinalizer(b, Finalizer)
		return ctrl.Result{}, client.IgnoreNotFound(r.Client.Patch(ctx, b, patch))
	}
	if b.Status.Phase == v1alpha1.BackupCompleted || b.Status.Phase == v1alpha1.BackupFailed {
		return ctrl.Result{}, nil
	}
	// The cache may not hold yet what the last pass wrote (its finalizer
	// brings this pass at once): a backup is taken once, so read it live.
	if err := r.APIReader.Get(ctx, req.NamespacedName, b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if b.Status.Phase == v1alpha1.BackupCompleted || b.Status.Phase == v1alpha1.BackupFailed || !b.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	if !controllerutil.ContainsFinalizer(b, Finalizer) {
		patch := client.MergeFrom(b.DeepCopy())
		controllerutil.AddFinalizer(b, Finalizer)
		if err := r.Client.Patch(ctx, b, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer that removes the archive with the backup: %w", err)
		}
	}
	before := b.DeepCopy()
	if !r.startIn(b.Namespace) {
		// The namespace's other backup runs: this one waits its turn,
		// while other namespaces' run beside it.
		r.setPhase(b, v1alpha1.BackupRunning, "WaitingForTurn", "Another backup of this namespace runs: a namespace's backups run one at a time, beside other namespaces'")
		if !apiequality.Semantic.DeepEqual(before.Status, b.Status) {
			if err := r.Client.Status().Patch(ctx, b, client.MergeFrom(before)); err != nil {
				return ctrl.Result{}, fmt.Errorf("saying that the backup waits its turn: %w", err)
			}
		}
		return ctrl.Result{RequeueAfter: backupTurnWait}, nil
	}
	defer r.endIn(b.Namespace)
	timeout := cmp.Or(r.Timeout, DefaultTimeout)
	tctx, cancel := context.WithTimeout(ctx, timeout)
	wait, err := r.take(tctx, b)
	if errors.Is(err, errTooLarge) {
		err = fail("TooLarge", "the archive passed %d bytes (--backup-max-bytes), the most the platform keeps of one backup; its archive was not kept", cmp.Or(r.MaxBytes, DefaultMaxBytes))
	}
	if err != nil && tctx.Err() != nil && ctx.Err() == nil {
		err = fail("TimedOut", "the backup took longer than %s (--backup-timeout) and was stopped; its archive was not kept: ask the platform for a longer timeout, or back up less often", timeout)
	}
	cancel()
	var failed *backupFailure
	switch {
	case errors.As(err, &failed):
		r.setPhase(b, v1alpha1.BackupFailed, failed.reason, failed.Error())
		r.event(b, corev1.EventTypeWarning, failed.reason, "Backup", "%s", failed.Error())
		err = nil
	case err != nil:
		LogStoreDetail(ctx, b, err)
		r.setPhase(b, v1alpha1.BackupRunning, "Retrying", "The backup failed and is retried: "+err.Error())
	case wait > 0:
		// setPhase was called by take with what it waits for.
	default:
		r.event(b, corev1.EventTypeNormal, "BackupCompleted", "Backup", "Stored %d keys (%d bytes) of ApiServerConfig %s at %s", b.Status.Keys, b.Status.Bytes, b.Spec.ApiServerConfigName, b.Status.Location)
	}
	if !apiequality.Semantic.DeepEqual(before.Status, b.Status) {
		if perr := r.Client.Status().Patch(ctx, b, client.MergeFrom(before)); perr != nil && err == nil {
			err = fmt.Errorf("saying how the backup went: %w", perr)
		}
	}
	return ctrl.Result{RequeueAfter: wait}, err
}

// DefaultTimeout bounds one backup and one restore.
const DefaultTimeout = time.Hour

// DefaultMaxBytes bounds one archive: the backup volume and buckets
// are shared by every namespace.
const DefaultMaxBytes = 8 << 30

// errTooLarge: the archive passed its cap.
var errTooLarge = errors.New("the archive is larger than the platform allows")

// cappedDestination refuses to write an archive past limit bytes.
type cappedDestination struct {
	archives.Destination
	limit, n int64
}

func (d *cappedDestination) Write(p []byte) (int, error) {
	if d.n+int64(len(p)) > d.limit {
		return 0, errTooLarge
	}
	n, err := d.Destination.Write(p)
	d.n += int64(n)
	return n, err
}

// backupFailure ends a backup: only another backup can do better.
type backupFailure struct {
	reason string
	err    error
}

func (f *backupFailure) Error() string { return f.err.Error() }

func fail(reason, format string, args ...any) error {
	return &backupFailure{reason: reason, err: fmt.Errorf(format, args...)}
}

// take takes the backup; it returns how soon to look again when it waits.
func (r *Reconciler) take(ctx context.Context, b *v1alpha1.ApiServerBackup) (time.Duration, error) {
	cfg := &v1alpha1.ApiServerConfig{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.ApiServerConfigName}, cfg); err != nil {
		if apierrors.IsNotFound(err) {
			return 0, fail("TenantNotFound", "ApiServerConfig %s does not exist in namespace %s: there is nothing to back up", b.Spec.ApiServerConfigName, b.Namespace)
		}
		return 0, err
	}
	if cfg.Status.DataPrefix == "/" {
		return 0, fail(v1alpha1.ReasonInvalidSpec, "ApiServerConfig %s stores under /, every key of its etcd, which is not one tenant's to back up", cfg.Name)
	}
	if cfg.Status.DataPrefix == "" {
		r.setPhase(b, v1alpha1.BackupRunning, "TenantNotStarted", fmt.Sprintf("ApiServerConfig %s has not started yet: it stored nothing to back up", cfg.Name))
		return backupRetry, nil
	}
	held := apiserver.WhereDataIs(cfg)
	c, err := apiserver.Complete(held, apiserver.Inputs{})
	if err != nil {
		return 0, fail(v1alpha1.ReasonInvalidSpec, "the tenant's etcd cannot be found from its spec: %v", err)
	}
	tlsConfig, err := r.EtcdTLS.of(ctx, cfg, &c.Spec.Etcd, r.Clock.Now())
	if err != nil {
		r.setPhase(b, v1alpha1.BackupRunning, v1alpha1.ReasonReferenceMissing, err.Error())
		return backupRetry, nil
	}
	secrets, err := r.tenantSecrets(ctx, cfg)
	if err != nil {
		return 0, err
	}
	identity, keySecret, err := r.identity(ctx, b)
	if err != nil {
		return 0, err
	}
	store, err := storeOf(ctx, r.APIReader, ArchivePlaces{Dir: r.Dir, S3Endpoints: r.S3Endpoints}, b)
	if err != nil {
		return 0, err
	}
	location := store.Location()
	dest, err := store.Create(ctx)
	if err != nil {
		return 0, err
	}
	defer dest.Abort()
	limit := cmp.Or(r.MaxBytes, DefaultMaxBytes)
	capped := &cappedDestination{Destination: dest, limit: limit}
	now := metav1.NewTime(r.Clock.Now())
	b.Status.StartTime, b.Status.Prefix, b.Status.KeySecretName = &now, cfg.Status.DataPrefix, keySecret
	r.setPhase(b, v1alpha1.BackupRunning, "Running", "Reading the tenant's keys")

	sealed, err := backup.Seal(capped, identity)
	if err != nil {
		return 0, err
	}
	m := backup.Manifest{Namespace: cfg.Namespace, Name: cfg.Name, UID: string(cfg.UID), Prefix: cfg.Status.DataPrefix,
		Version: cfg.Status.Version, CreatedAt: now.UTC()}
	resources := c.Etcd.SetResources()
	for i, set := range c.Etcd.Sets {
		s := backup.Set{Servers: set}
		for _, gr := range resources[i] {
			s.Resources = append(s.Resources, gr.String())
		}
		m.Sets = append(m.Sets, s)
	}
	w, err := backup.NewWriter(sealed, m)
	if err != nil {
		return 0, err
	}
	for _, s := range secrets {
		if err := w.Secret(s); err != nil {
			return 0, err
		}
	}
	keys := apiserver.KeysUnder(cfg.Status.DataPrefix)
	for i, set := range c.Etcd.Sets {
		// What the reconciler's passes tell of an etcd, no more: an
		// address that does not answer as an etcd "did not answer".
		if err := r.Etcd.Check(ctx, set, tlsConfig); err != nil {
			ctrl.LoggerFrom(ctx).Info("A backup could not reach its tenant's etcd", "apiServerBackup", klog.KObj(b), "error", tenantio.Detail(err))
			return 0, fmt.Errorf("reading the tenant's keys on etcd %s: %w", strings.Join(set, ","), err)
		}
		rev, err := r.Etcd.Snapshot(ctx, set, tlsConfig, keys, func(k tenantio.SnapshotKey) error {
			// Relative to the prefix, from its "/" on.
			return w.KeyValue(backup.KeyValue{Set: i, Key: string(k.Key[len(keys)-1:]), TTL: k.TTL, Value: k.Value})
		})
		if tenantio.IsCompacted(err) {
			return 0, fail("Compacted", "etcd %s compacted the revision the backup read at before it had read every key (the tenant's keys took longer to read than the etcd's compaction interval): take another backup", strings.Join(set, ","))
		}
		if err != nil {
			ctrl.LoggerFrom(ctx).Info("A backup could not read its tenant's etcd", "apiServerBackup", klog.KObj(b), "error", tenantio.Detail(err))
			return 0, fmt.Errorf("reading the tenant's keys on etcd %s: %w", strings.Join(set, ","), err)
		}
		w.Revision(i, rev)
	}
	summary, err := w.Close()
	if err != nil {
		return 0, fmt.Errorf("writing the archive: %w", err)
	}
	if err := sealed.Close(); err != nil {
		return 0, fmt.Errorf("sealing the archive: %w", err)
	}
	size, err := dest.Commit()
	if err != nil {
		return 0, err
	}
	done := metav1.NewTime(r.Clock.Now())
	b.Status.CompletionTime, b.Status.Location, b.Status.ArchiveBytes = &done, location, size
	b.Status.SHA256, b.Status.Revisions = summary.SHA256, summary.Revisions
	b.Status.Keys, b.Status.Bytes = 0, 0
	for i := range summary.Keys {
		b.Status.Keys += summary.Keys[i]
		b.Status.Bytes += summary.Bytes[i]
	}
	r.setPhase(b, v1alpha1.BackupCompleted, v1alpha1.BackupCompleted, fmt.Sprintf("%d keys of ApiServerConfig %s, and %d Secrets, stored at %s", b.Status.Keys, cfg.Name, summary.Secrets, location))
	return 0, nil
}

// tenantSecrets are the Secrets a restore needs (those deletionPolicy
// Retain keeps), by role; only the tenant's own.
func (r *Reconciler) tenantSecrets(ctx context.Context, cfg *v1alpha1.ApiServerConfig) ([]backup.Secret, error) {
	var out []backup.Secret
	for _, o := range apiserver.OwnedSecrets(cfg.Name) {
		if !o.Retainable {
			continue
		}
		s := &corev1.Secret{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: o.Name}, s)
		if apierrors.IsNotFound(err) {
			continue // no encryption key without encryption
		}
		if err != nil {
			return nil, fmt.Errorf("reading Secret %s/%s: %w", cfg.Namespace, o.Name, err)
		}
		if !ownership.Claim(r.Ownership, cfg, s).Own() {
			return nil, fail(v1alpha1.ReasonNameConflict, "Secret %s is not the tenant's own: it is not backed up as its key material", o.Name)
		}
		kept := backup.Secret{Role: strings.TrimPrefix(o.Name, cfg.Name+"-"), Type: string(s.Type), Data: s.Data}
		if state, ok := s.Annotations[apiserver.RotationStateAnnotation]; ok {
			kept.Annotations = map[string]string{apiserver.RotationStateAnnotation: state}
		}
		out = append(out, kept)
	}
	return out, nil
}

// identity reads, or makes, the backup's identity Secret.
func (r *Reconciler) identity(ctx context.Context, b *v1alpha1.ApiServerBackup) (identity, name string, err error) {
	name = KeySecretName(b.Name)
	s := &corev1.Secret{}
	err = r.APIReader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: name}, s)
	switch {
	case err == nil:
		if !metav1.IsControlledBy(s, b) {
			return "", "", fail(v1alpha1.ReasonNameConflict, "Secret %s exists and is not this backup's: delete it or name the backup otherwise", name)
		}
		return string(s.Data[backup.IdentityKey]), name, nil
	case !apierrors.IsNotFound(err):
		return "", "", fmt.Errorf("reading the backup's identity Secret %s: %w", name, err)
	}
	identity, _, err = backup.NewIdentity()
	if err != nil {
		return "", "", err
	}
	s = &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: b.Namespace, Name: name, Labels: map[string]string{"app.kubernetes.io/managed-by": apiserver.FieldOwner}},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{backup.IdentityKey: []byte(identity)},
	}
	if err := controllerutil.SetControllerReference(b, s, r.Scheme); err != nil {
		return "", "", err
	}
	if err := r.Client.Create(ctx, s); err != nil {
		return "", "", fmt.Errorf("creating the backup's identity Secret %s: %w", name, err)
	}
	return identity, name, nil
}

// EtcdTLS is how the operator reaches the etcd of spec, a tenant's (or
// where its data is).
type EtcdTLS func(ctx context.Context, cfg *v1alpha1.ApiServerConfig, spec *v1alpha1.EtcdSpec, now time.Time) (*tls.Config, error)

func (f EtcdTLS) of(ctx context.Context, cfg *v1alpha1.ApiServerConfig, spec *v1alpha1.EtcdSpec, now time.Time) (*tls.Config, error) {
	if f == nil {
		return nil, errors.New("the backup reconciler was set up without a way to reach the tenants' etcd (EtcdTLS): this is a bug of the operator")
	}
	return f(ctx, cfg, spec, now)
}

// KeySecretName is the Secret whose identity unseals the backup
// name's archive.
func KeySecretName(name string) string { return name + "-backup-key" }

// setPhase says where the backup stands: Ready once completed, Stalled
// once failed, Reconciling meanwhile.
func (r *Reconciler) setPhase(b *v1alpha1.ApiServerBackup, phase, reason, message string) {
	b.Status.Phase, b.Status.ObservedGeneration = phase, b.Generation
	meta.SetStatusCondition(&b.Status.Conditions, v1alpha1.NewCondition(v1alpha1.ConditionReady, phase == v1alpha1.BackupCompleted, reason, message, b.Generation))
	meta.SetStatusCondition(&b.Status.Conditions, v1alpha1.NewCondition(v1alpha1.ConditionStalled, phase == v1alpha1.BackupFailed, reason, message, b.Generation))
	meta.SetStatusCondition(&b.Status.Conditions, v1alpha1.NewCondition(v1alpha1.ConditionReconciling, phase == v1alpha1.BackupRunning, reason, message, b.Generation))
}

func (r *Reconciler) event(b *v1alpha1.ApiServerBackup, kind, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(b, nil, kind, reason, action, note, args...)
	}
}
