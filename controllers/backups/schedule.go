package backups

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// +kubebuilder:rbac:groups=controlplane.apiserver-operator.dev,resources=apiserverbackupschedules,verbs=get;list;watch
// +kubebuilder:rbac:groups=controlplane.apiserver-operator.dev,resources=apiserverbackupschedules/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=controlplane.apiserver-operator.dev,resources=apiserverbackups,verbs=create;delete

// ScheduleReconciler takes a schedule's backups when they
// are due (one at once for a time missed while the operator was away,
// never a burst of them) and deletes the oldest beyond spec.keep.
type ScheduleReconciler struct {
	Client   client.Client
	Scheme   *runtime.Scheme
	Recorder events.EventRecorder
	Clock    clock.PassiveClock
	// MinInterval is the least time a schedule may leave between two of
	// its backups (DefaultMinInterval when zero): backups of every
	// namespace take turns on one worker.
	MinInterval time.Duration
}

// DefaultMinInterval is the least time between two backups of a
// schedule: @every 1s would queue a backup a second ahead of every other
// namespace's.
const DefaultMinInterval = 15 * time.Minute

// scheduleInterval is the shortest time between two of the next times of
// sched after from (a few of them: cron's gaps repeat), zero when it has
// fewer than two.
func scheduleInterval(sched cron.Schedule, from time.Time) time.Duration {
	var shortest time.Duration
	prev := sched.Next(from)
	for range 64 {
		next := sched.Next(prev)
		if prev.IsZero() || next.IsZero() {
			break
		}
		if d := next.Sub(prev); shortest == 0 || d < shortest {
			shortest = d
		}
		prev = next
	}
	return shortest
}

// SetupWithManager registers the reconciler; a backup that completes or
// fails brings its schedule's retention.
func (r *ScheduleReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.ApiServerBackupSchedule{}).
		Watches(&v1alpha1.ApiServerBackup{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []ctrl.Request {
			if name := obj.GetLabels()[v1alpha1.BackupScheduleLabel]; name != "" {
				return []ctrl.Request{{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}}}
			}
			return nil
		})).
		Complete(r)
}

// cronParser reads the five fields of a CronJob, and descriptors.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Reconcile takes the backup that is due and applies the retention.
func (r *ScheduleReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s := &v1alpha1.ApiServerBackupSchedule{}
	if err := r.Client.Get(ctx, req.NamespacedName, s); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := s.DeepCopy()
	result, err := r.reconcile(ctx, s)
	if !apiequality.Semantic.DeepEqual(before.Status, s.Status) {
		if perr := r.Client.Status().Patch(ctx, s, client.MergeFrom(before)); perr != nil && err == nil {
			err = fmt.Errorf("saying what the schedule did: %w", perr)
		}
	}
	return result, err
}

func (r *ScheduleReconciler) reconcile(ctx context.Context, s *v1alpha1.ApiServerBackupSchedule) (ctrl.Result, error) {
	s.Status.ObservedGeneration = s.Generation
	sched, err := cronParser.Parse(s.Spec.Schedule)
	if err != nil {
		r.setReady(s, false, v1alpha1.ReasonInvalidSpec, fmt.Sprintf("spec.schedule %q is not a cron expression of five fields, nor a descriptor such as @daily: %v", s.Spec.Schedule, err))
		return ctrl.Result{}, nil
	}
	floor := cmp.Or(r.MinInterval, DefaultMinInterval)
	if every := scheduleInterval(sched, s.CreationTimestamp.Time); every > 0 && every < floor {
		r.setReady(s, false, v1alpha1.ReasonInvalidSpec, fmt.Sprintf("spec.schedule %q takes a backup every %s: the platform allows one every %s at most", s.Spec.Schedule, every, floor))
		return ctrl.Result{}, nil
	}
	running, err := r.prune(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	now := r.Clock.Now().UTC()
	last := s.CreationTimestamp.Time
	if s.Status.LastScheduleTime != nil {
		last = s.Status.LastScheduleTime.Time
	}
	due := sched.Next(last)
	if due.IsZero() {
		// robfig/cron's answer for an expression that never matches (30
		// February), and for any time after it.
		r.setReady(s, false, v1alpha1.ReasonInvalidSpec, fmt.Sprintf("spec.schedule %q never comes: no minute matches it", s.Spec.Schedule))
		return ctrl.Result{}, nil
	}
	// One missed time or several: one backup, for the latest of them.
	for next := sched.Next(due); !next.IsZero() && !next.After(now); next = sched.Next(next) {
		due = next
	}
	if s.Spec.Suspend {
		s.Status.NextScheduleTime = nil
		r.setReady(s, true, "Suspended", "spec.suspend: no backup is taken")
		return ctrl.Result{}, nil
	}
	if !due.After(now) && running != "" {
		// Never two at once: the one running ends first (its end brings
		// the schedule back), then one backup for the time that came.
		s.Status.NextScheduleTime = nil
		r.setReady(s, true, "Waiting", fmt.Sprintf("A backup is due; ApiServerBackup %s of this schedule has not ended yet", running))
		return ctrl.Result{}, nil
	}
	if !due.After(now) {
		name := fmt.Sprintf("%s-%d", s.Name, due.Unix())
		b := &v1alpha1.ApiServerBackup{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name, Labels: map[string]string{v1alpha1.BackupScheduleLabel: s.Name}},
			Spec:       s.Spec.Template,
		}
		if shard, ok := s.Labels[apiserver.WatchFilterLabel]; ok {
			b.Labels[apiserver.WatchFilterLabel] = shard // the same instance takes it
		}
		if err := r.Client.Create(ctx, b); err != nil && !apierrors.IsAlreadyExists(err) {
			r.setReady(s, false, "BackupNotCreated", fmt.Sprintf("Creating ApiServerBackup %s: %v", name, err))
			return ctrl.Result{}, fmt.Errorf("creating ApiServerBackup %s: %w", name, err)
		}
		if r.Recorder != nil {
			r.Recorder.Eventf(s, nil, corev1.EventTypeNormal, "BackupCreated", "Schedule", "Created ApiServerBackup %s, due at %s", name, due.Format(time.RFC3339))
		}
		at := metav1.NewTime(due)
		s.Status.LastScheduleTime, s.Status.LastBackupName = &at, name
		for due = sched.Next(due); !due.IsZero() && !due.After(now); {
			due = sched.Next(due)
		}
		if due.IsZero() {
			s.Status.NextScheduleTime = nil
			r.setReady(s, true, "Scheduled", "The schedule has no time left")
			return ctrl.Result{}, nil
		}
	}
	next := metav1.NewTime(due)
	s.Status.NextScheduleTime = &next
	r.setReady(s, true, "Scheduled", fmt.Sprintf("The next backup is due at %s", due.Format(time.RFC3339)))
	return ctrl.Result{RequeueAfter: due.Sub(now)}, nil
}

// prune deletes the schedule's completed backups beyond spec.keep, oldest
// first, and its failed ones older than its newest completed one; never
// one that a tenant is being restored from. It returns the name of a
// backup of the schedule that has not ended ("" when none).
func (r *ScheduleReconciler) prune(ctx context.Context, s *v1alpha1.ApiServerBackupSchedule) (string, error) {
	list := &v1alpha1.ApiServerBackupList{}
	if err := r.Client.List(ctx, list, client.InNamespace(s.Namespace), client.MatchingLabels{v1alpha1.BackupScheduleLabel: s.Name}); err != nil {
		return "", fmt.Errorf("listing the schedule's backups: %w", err)
	}
	running := ""
	for _, b := range list.Items {
		if b.DeletionTimestamp.IsZero() && b.Status.Phase != v1alpha1.BackupCompleted && b.Status.Phase != v1alpha1.BackupFailed {
			running = b.Name
		}
	}
	backups := list.Items
	slices.SortFunc(backups, func(a, b v1alpha1.ApiServerBackup) int {
		return cmp.Or(b.CreationTimestamp.Compare(a.CreationTimestamp.Time), cmp.Compare(b.Name, a.Name)) // newest first
	})
	tenants := &v1alpha1.ApiServerConfigList{}
	if err := r.Client.List(ctx, tenants, client.InNamespace(s.Namespace)); err != nil {
		return "", fmt.Errorf("listing the tenants that may be restoring a backup: %w", err)
	}
	restoring := map[string]bool{}
	for _, t := range tenants.Items {
		if t.Spec.Restore != nil && t.Status.DataPrefix == "" {
			restoring[t.Spec.Restore.BackupName] = true
		}
	}
	keep := int(ptrOr(s.Spec.Keep, 7))
	completed := 0
	for i := range backups {
		b := &backups[i]
		drop := false
		switch b.Status.Phase {
		case v1alpha1.BackupCompleted:
			completed++
			drop = completed > keep
		case v1alpha1.BackupFailed:
			drop = completed > 0
		}
		if !drop || !b.DeletionTimestamp.IsZero() || restoring[b.Name] {
			continue // a tenant that starts from it needs it until it started
		}
		if err := client.IgnoreNotFound(r.Client.Delete(ctx, b)); err != nil {
			return "", fmt.Errorf("deleting ApiServerBackup %s, beyond the %d the schedule keeps: %w", b.Name, keep, err)
		}
	}
	return running, nil
}

func ptrOr[T any](p *T, v T) T {
	if p == nil {
		return v
	}
	return *p
}

func (r *ScheduleReconciler) setReady(s *v1alpha1.ApiServerBackupSchedule, ok bool, reason, message string) {
	meta.SetStatusCondition(&s.Status.Conditions, v1alpha1.NewCondition(v1alpha1.ConditionReady, ok, reason, message, s.Generation))
	meta.SetStatusCondition(&s.Status.Conditions, v1alpha1.NewCondition(v1alpha1.ConditionStalled, !ok && reason == v1alpha1.ReasonInvalidSpec, reason, message, s.Generation))
}
