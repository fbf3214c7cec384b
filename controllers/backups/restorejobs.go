package backups

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// restoreSlots is how many restores run at once: each reads a whole
// archive and writes a whole tenant.
const restoreSlots = 2

// Outcome is how a restore ended.
type Outcome struct {
	Written int64
	// Hold: it cannot go on as things stand (a person must act, or the
	// deadline passed): the tenant is held with this message.
	Hold string
	// Err: it failed and is tried again.
	Err error
}

// Job is one tenant's restore, run off the reconcile workers.
type Job struct {
	// Backup is the uid of the backup it restores: one of the same name
	// made again is another.
	Backup types.UID
	// Keyspace is where it writes, as the spec said when it started: a
	// spec that moves meanwhile starts another.
	Keyspace string
	Started  time.Time
	Finished bool
	Outcome  Outcome
	cancel   context.CancelFunc
}

// restoreJobs runs restores off the reconcile workers, restoreSlots at
// once: a restore waiting on a slow or stalled archive store holds no
// worker, and so delays no other tenant's pass. Each tenant has at most
// one; the pass that finds it finished takes its outcome. It is the one
// owner of that per-tenant state: forget drops it with the tenant.
type restoreJobs struct {
	mu    sync.Mutex
	jobs  map[types.NamespacedName]*Job
	slots chan struct{}
	done  chan event.TypedGenericEvent[*v1alpha1.ApiServerConfig]
	base  context.Context
}

func newRestoreJobs() *restoreJobs {
	return &restoreJobs{
		jobs:  map[types.NamespacedName]*Job{},
		slots: make(chan struct{}, restoreSlots),
		done:  make(chan event.TypedGenericEvent[*v1alpha1.ApiServerConfig], 64),
		base:  context.Background(),
	}
}

// Start runs until ctx ends, then stops every restore (a manager
// Runnable: restores end with the process's leadership).
func (j *restoreJobs) Start(ctx context.Context) error {
	j.mu.Lock()
	j.base = ctx
	j.mu.Unlock()
	<-ctx.Done()
	j.mu.Lock()
	defer j.mu.Unlock()
	for key, job := range j.jobs {
		job.cancel()
		delete(j.jobs, key)
	}
	return nil
}

// NeedLeaderElection: only the leader restores.
func (j *restoreJobs) NeedLeaderElection() bool { return true }

// source brings a tenant's pass when its restore ends.
func (j *restoreJobs) source() source.Source {
	return source.Channel(j.done, &handler.TypedEnqueueRequestForObject[*v1alpha1.ApiServerConfig]{})
}

// get is the tenant's restore as it stands (a copy); nil when none.
func (j *restoreJobs) get(key types.NamespacedName) *Job {
	j.mu.Lock()
	defer j.mu.Unlock()
	if job := j.jobs[key]; job != nil {
		out := *job
		return &out
	}
	return nil
}

// start runs run for cfg's restore of the backup of uid, with timeout, as
// soon as a slot is free; the tenant's pass comes back when it ends.
func (j *restoreJobs) start(cfg *v1alpha1.ApiServerConfig, backup types.UID, keyspace string, now time.Time, timeout time.Duration,
	run func(ctx context.Context) Outcome) {
	key := types.NamespacedName{Namespace: cfg.Namespace, Name: cfg.Name}
	j.mu.Lock()
	defer j.mu.Unlock()
	if old := j.jobs[key]; old != nil {
		old.cancel()
	}
	ctx, cancel := context.WithCancel(j.base)
	job := &Job{Backup: backup, Keyspace: keyspace, Started: now, cancel: cancel}
	j.jobs[key] = job
	wake := &v1alpha1.ApiServerConfig{}
	wake.Namespace, wake.Name = cfg.Namespace, cfg.Name
	go func() {
		var out Outcome
		select {
		case j.slots <- struct{}{}:
			runCtx, stop := context.WithTimeout(ctx, timeout)
			out = run(runCtx)
			stop()
			<-j.slots
		case <-ctx.Done():
			out = Outcome{Err: ctx.Err()}
		}
		j.mu.Lock()
		if j.jobs[key] != job {
			j.mu.Unlock()
			return // forgotten, or replaced
		}
		job.Finished, job.Outcome = true, out
		j.mu.Unlock()
		select {
		case j.done <- event.TypedGenericEvent[*v1alpha1.ApiServerConfig]{Object: wake}:
		default: // the pass's own requeue comes
		}
	}()
}

// forget stops and drops the tenant's restore.
func (j *restoreJobs) forget(key types.NamespacedName) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if job := j.jobs[key]; job != nil {
		job.cancel()
		delete(j.jobs, key)
	}
}
