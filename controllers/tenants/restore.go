package tenants

import (
	"cmp"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/backups"
)

// restoreWait is how soon a tenant that waits for its backup to complete
// looks again; restoreRecheck, one that only a person can unblock.
const (
	restoreWait    = 10 * time.Second
	restoreRecheck = 5 * time.Minute
)

// restore starts the tenant from the backup spec.restore names, before
// its first apiserver starts: the backup's Secrets become the tenant's
// (the encryption keys, the CAs, the service-account key), and every key
// of the archive is written under the tenant's own prefix, on the etcd
// that stores its resource for this tenant (aesgcm values encrypted again
// for their new key). The prefix must be empty, unless a restore of the
// same backup was cut short there (status.restoredFrom, no dataPrefix):
// what it wrote goes first. The pass ends after it: the next one reads the
// restored Secrets.
func (r *Reconciler) restore(ctx context.Context, p *pass, prefix string, kept *apiserver.EtcdKeyspace) error {
	name := p.cfg.Spec.Restore.BackupName
	hold := func(atOnce bool, format string, args ...any) error {
		msg := fmt.Sprintf(format, args...)
		p.obs.failure = &envFailure{reason: v1alpha1.ReasonRestoreFailed, message: msg, atOnce: atOnce,
			since: failingSince(p.before.Status.Conditions, v1alpha1.ReasonRestoreFailed, p.now)}
		if atOnce {
			p.requeueWithin(restoreRecheck)
		} else {
			p.requeueWithin(restoreWait)
		}
		p.done = true
		return nil
	}
	if prefix == "/" {
		return hold(true, "A restore writes under the tenant's own prefix, and / is every key of the etcd: choose a spec.etcd.prefix")
	}
	if kept != nil {
		// Its Secrets are the keys of that data: a restore would replace
		// them.
		return hold(true, "ApiServerConfig %s kept data under %s (deletionPolicy Retain) with the Secrets that read it, which a restore would replace: delete that data and those Secrets, or restore into a tenant of another name", p.cfg.Name, kept.Prefix)
	}
	b := &v1alpha1.ApiServerBackup{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: p.cfg.Namespace, Name: name}, b); err != nil {
		if apierrors.IsNotFound(err) {
			return hold(true, "spec.restore names ApiServerBackup %s, which does not exist in this namespace", name)
		}
		return err
	}
	if !b.DeletionTimestamp.IsZero() {
		return hold(true, "spec.restore names ApiServerBackup %s, which is being deleted: choose another backup", name)
	}
	switch b.Status.Phase {
	case v1alpha1.BackupCompleted:
	case v1alpha1.BackupFailed:
		return hold(true, "spec.restore names ApiServerBackup %s, which failed: choose another backup", name)
	default:
		return hold(false, "Waiting for ApiServerBackup %s to complete before restoring it", name)
	}

	// The restore runs off the reconcile workers (backups.Restorer): this pass
	// starts it, the pass its end brings takes its outcome.
	timeout := cmp.Or(r.BackupTimeout, backups.DefaultTimeout)
	jobs := r.restorer()
	key := client.ObjectKeyFromObject(p.cfg)
	keyspace := p.c.Keyspace
	where := fmt.Sprintf("%s|%v|%v", keyspace.Prefix, keyspace.Addresses, p.c.Etcd.Sets)
	job := jobs.Job(key)
	if job == nil || job.Backup != b.UID || job.Keyspace != where {
		// What the restore needs of the pass, as it stands now.
		target := backups.Target{Config: p.cfg.DeepCopy(), Completed: p.c, EtcdTLS: p.etcdTLS, OperatorEncryption: p.enc != nil, Prefix: prefix}
		jobs.Begin(target, b, where, p.now, timeout)
		return r.restoring(p, name, p.now, timeout)
	}
	if !job.Finished {
		return r.restoring(p, name, job.Started, timeout)
	}
	jobs.Forget(key)
	switch out := job.Outcome; {
	case out.Hold != "":
		return hold(true, "%s", out.Hold)
	case out.Err != nil:
		backups.LogStoreDetail(ctx, p.cfg, out.Err)
		return out.Err // retried, from the start
	default:
		p.cfg.Status.RestoredFrom = name
		// The job wrote where the spec still says (job.keyspace).
		p.cfg.Status.DataPrefix, p.cfg.Status.DataServers = prefix, keyspace.Addresses
		r.event(p.cfg, corev1.EventTypeNormal, v1alpha1.ReasonRestored, "Data",
			"Restored %d keys from ApiServerBackup %s under %s, with its encryption keys, CAs and service-account key", out.Written, name, prefix)
		p.requeueWithin(time.Millisecond)
		p.done = true
		return nil
	}
}

// restoring says that the tenant's restore runs (since started): the
// tenant waits, and is Stalled only once the restore outlived its deadline.
func (r *Reconciler) restoring(p *pass, backupName string, started time.Time, timeout time.Duration) error {
	p.obs.failure = &envFailure{reason: v1alpha1.ReasonRestoring, since: started, grace: timeout,
		message: fmt.Sprintf("Restoring ApiServerBackup %s (since %s): the tenant starts once its data and keys are written", backupName, started.UTC().Format(time.RFC3339))}
	p.requeueWithin(restoreWait)
	p.done = true
	return nil
}

// restorer runs the reconciler's restores (made on first use by a
// reconciler that was not set up with a manager).
func (r *Reconciler) restorer() *backups.Restorer {
	r.restoresOnce.Do(func() {
		if r.restores == nil {
			r.restores = backups.NewRestorer(backups.Restorer{Client: r.Client, APIReader: r.APIReader, Reach: r.Reach, Ownership: r.Ownership,
				Places: backups.ArchivePlaces{Dir: r.BackupDir, S3Endpoints: r.BackupS3Endpoints}})
		}
	})
	return r.restores
}
