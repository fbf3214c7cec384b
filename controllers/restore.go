package controllers

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/backup"
	"github.com/apiserver-operator/apiserver-operator/controllers/archives"
	"github.com/apiserver-operator/apiserver-operator/controllers/ownership"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
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
func (r *ApiServerConfigReconciler) restore(ctx context.Context, p *pass, prefix string, kept *apiserver.EtcdKeyspace) error {
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

	// The restore runs off the reconcile workers (restoreJobs): this pass
	// starts it, the pass its end brings takes its outcome.
	timeout := cmp.Or(r.BackupTimeout, DefaultBackupTimeout)
	jobs := r.restoreJobs()
	key := client.ObjectKeyFromObject(p.cfg)
	keyspace := apiserver.KeyspaceOf(&p.c.Spec.Etcd)
	where := fmt.Sprintf("%s|%v|%v", keyspace.Prefix, keyspace.Addresses, p.c.Etcd.Sets)
	job := jobs.get(key)
	if job == nil || job.backup != b.UID || job.keyspace != where {
		// What the restore needs of the pass, as it stands now.
		snapshot := &pass{cfg: p.cfg.DeepCopy(), before: p.before.DeepCopy(), c: p.c, etcdTLS: p.etcdTLS, enc: p.enc, now: p.now}
		jobs.start(p.cfg, b.UID, where, p.now, timeout, func(ctx context.Context) restoreOutcome {
			return r.runRestore(ctx, snapshot, b, prefix, timeout)
		})
		return r.restoring(p, name, p.now, timeout)
	}
	if !job.finished {
		return r.restoring(p, name, job.started, timeout)
	}
	jobs.forget(key)
	switch out := job.out; {
	case out.hold != "":
		return hold(true, "%s", out.hold)
	case out.err != nil:
		logStoreDetail(ctx, p.cfg, out.err)
		return out.err // retried, from the start
	default:
		p.cfg.Status.RestoredFrom = name
		// The job wrote where the spec still says (job.keyspace).
		p.cfg.Status.DataPrefix, p.cfg.Status.DataServers = prefix, keyspace.Addresses
		r.event(p.cfg, corev1.EventTypeNormal, v1alpha1.ReasonRestored, "Data",
			"Restored %d keys from ApiServerBackup %s under %s, with its encryption keys, CAs and service-account key", out.written, name, prefix)
		p.requeueWithin(time.Millisecond)
		p.done = true
		return nil
	}
}

// restoring says that the tenant's restore runs (since started): the
// tenant waits, and is Stalled only once the restore outlived its deadline.
func (r *ApiServerConfigReconciler) restoring(p *pass, backupName string, started time.Time, timeout time.Duration) error {
	p.obs.failure = &envFailure{reason: v1alpha1.ReasonRestoring, since: started, grace: timeout,
		message: fmt.Sprintf("Restoring ApiServerBackup %s (since %s): the tenant starts once its data and keys are written", backupName, started.UTC().Format(time.RFC3339))}
	p.requeueWithin(restoreWait)
	p.done = true
	return nil
}

// restoreJobs are the reconciler's restores (made on first use by a
// reconciler that was not set up with a manager).
func (r *ApiServerConfigReconciler) restoreJobs() *restoreJobs {
	r.restoresOnce.Do(func() {
		if r.restores == nil {
			r.restores = newRestoreJobs()
		}
	})
	return r.restores
}

// runRestore reads the whole archive once before anything is written (one
// that is truncated, altered, gone, or that this tenant cannot take, is
// refused with nothing written), then writes the backup's Secrets and
// every key under the tenant's prefix, within ctx's deadline. p is the
// pass that started it, as it stood.
func (r *ApiServerConfigReconciler) runRestore(ctx context.Context, p *pass, b *v1alpha1.ApiServerBackup, prefix string, timeout time.Duration) restoreOutcome {
	name := b.Name
	timedOut := func(err error) bool { return err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) }
	if err := r.verifyArchive(ctx, p, b); err != nil {
		switch {
		case errors.Is(err, backup.ErrCorrupt) || errors.Is(err, archives.ErrGone) || errors.Is(err, errCannotTake):
			return restoreOutcome{hold: fmt.Sprintf("ApiServerBackup %s cannot be restored: %v", name, err)}
		case timedOut(err):
			return restoreOutcome{hold: fmt.Sprintf("Reading ApiServerBackup %s took longer than %s (--backup-timeout): the restore starts over later", name, timeout)}
		}
		return restoreOutcome{err: err}
	}
	keys := apiserver.KeysUnder(prefix)
	counts := make([]int64, len(p.c.Etcd.Sets))
	for i, set := range p.c.Etcd.Sets {
		n, err := r.Etcd.Count(ctx, set, p.etcdTLS, keys)
		if err != nil {
			return restoreOutcome{err: fmt.Errorf("restoring: %w", err)}
		}
		counts[i] = n[0]
	}
	if slices.ContainsFunc(counts, func(n int64) bool { return n > 0 }) {
		if p.cfg.Status.RestoredFrom != name {
			return restoreOutcome{hold: fmt.Sprintf("The tenant's etcd prefix %s holds keys already: a restore writes into an empty prefix only; choose another spec.etcd.prefix, or delete them (etcdctl del --prefix %s)", prefix, keys)}
		}
		for i, set := range p.c.Etcd.Sets {
			if counts[i] == 0 {
				continue
			}
			if _, err := r.Etcd.Delete(ctx, set, p.etcdTLS, keys); err != nil {
				return restoreOutcome{err: fmt.Errorf("restoring again: removing what the restore cut short wrote: %w", err)}
			}
		}
	}
	if p.cfg.Status.RestoredFrom != name {
		before := p.cfg.DeepCopy()
		p.cfg.Status.RestoredFrom = name
		if err := r.Client.Status().Patch(ctx, p.cfg, client.MergeFrom(before)); err != nil {
			return restoreOutcome{err: fmt.Errorf("saying that the restore of %s begins: %w", name, err)}
		}
	}
	written, err := r.restoreArchive(ctx, p, b, prefix)
	switch {
	case timedOut(err):
		return restoreOutcome{hold: fmt.Sprintf("Restoring ApiServerBackup %s took longer than %s (--backup-timeout): the restore starts over later, from the start", name, timeout)}
	case err != nil:
		return restoreOutcome{err: err} // proven whole above: retried, from the start
	}
	return restoreOutcome{written: written}
}

// errCannotTake: the tenant cannot take the backup as its spec stands.
var errCannotTake = errors.New("the tenant cannot take it")

// verifyArchive reads the backup's archive to its end (its summary proves
// it whole) and checks that the tenant can take it: the same etcd
// placement (which resources an override stores apart), and, for
// encrypted data, encryption the operator manages.
func (r *ApiServerConfigReconciler) verifyArchive(ctx context.Context, p *pass, b *v1alpha1.ApiServerBackup) error {
	in, err := openArchive(ctx, r.APIReader, ArchivePlaces{Dir: r.BackupDir, S3Endpoints: r.BackupS3Endpoints}, b)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	a, err := backup.NewReader(in)
	if err != nil {
		return err
	}
	encrypted := false
	for {
		s, _, err := a.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if s != nil && p.cfg.Name+"-"+s.Role == apiserver.EncryptionSecretName(p.cfg.Name) {
			encrypted = true
		}
	}
	if encrypted && p.enc == nil {
		return fmt.Errorf("%w: its data is encrypted with the operator's keys, and the tenant encrypts with its own EncryptionConfiguration (spec.encryption.configSecretName)", errCannotTake)
	}
	var theirs, ours []string
	for _, s := range a.Manifest().Sets {
		theirs = append(theirs, strings.Join(slices.Sorted(slices.Values(s.Resources)), ","))
	}
	for _, set := range p.c.Etcd.SetResources() {
		var names []string
		for _, gr := range set {
			names = append(names, gr.String())
		}
		ours = append(ours, strings.Join(slices.Sorted(slices.Values(names)), ","))
	}
	slices.Sort(theirs)
	slices.Sort(ours)
	if !slices.Equal(theirs, ours) {
		return fmt.Errorf("%w: the backup's etcds stored %s, and this tenant's store %s: give spec.etcd.overrides the resources the backed-up tenant had",
			errCannotTake, placementOf(theirs), placementOf(ours))
	}
	return nil
}

// placementOf names the sets of resources of each etcd.
func placementOf(sets []string) string {
	var out []string
	for _, s := range sets {
		if s == "" {
			s = "the other resources"
		}
		out = append(out, "["+s+"]")
	}
	return strings.Join(out, " ")
}

// restoreArchive writes the archive's Secrets and keys for the tenant,
// and returns how many keys it wrote.
func (r *ApiServerConfigReconciler) restoreArchive(ctx context.Context, p *pass, b *v1alpha1.ApiServerBackup, prefix string) (int64, error) {
	etcd, ok := r.Etcd.(tenantio.EtcdV3)
	if !ok {
		return 0, errors.New("restoring needs the operator's etcd client")
	}
	in, err := openArchive(ctx, r.APIReader, ArchivePlaces{Dir: r.BackupDir, S3Endpoints: r.BackupS3Endpoints}, b)
	if err != nil {
		return 0, err
	}
	defer func() { _ = in.Close() }()
	a, err := backup.NewReader(in)
	if err != nil {
		return 0, err
	}
	m := a.Manifest()
	// Where each of the backup's etcds goes: the tenant's etcd for the
	// resources it held.
	target := make([]int, len(m.Sets))
	for i, s := range m.Sets {
		if len(s.Resources) > 0 {
			target[i] = p.c.Etcd.SetOf(schema.ParseGroupResource(s.Resources[0]))
		}
	}
	loaders := make([]*tenantio.Loader, len(p.c.Etcd.Sets))
	defer func() {
		for _, l := range loaders {
			if l != nil {
				_ = l.Close()
			}
		}
	}()
	var read *apiserver.Decrypter
	for {
		s, kv, err := a.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, err
		}
		if s != nil {
			if read, err = r.restoreSecret(ctx, p, s, read); err != nil {
				return 0, err
			}
			continue
		}
		t := target[kv.Set]
		if loaders[t] == nil {
			if loaders[t], err = etcd.Loader(p.c.Etcd.Sets[t], p.etcdTLS); err != nil {
				return 0, err
			}
		}
		from, to := []byte(m.Prefix+kv.Key), []byte(prefix+kv.Key)
		value := kv.Value
		if read != nil && bytes.HasPrefix(value, []byte(apiserver.EncryptedValuePrefix)) {
			if value, err = read.Rebind(from, to, value); err != nil {
				return 0, fmt.Errorf("%w: %w", backup.ErrCorrupt, err)
			}
		}
		if err := loaders[t].Put(ctx, to, value, kv.TTL); err != nil {
			return 0, err
		}
	}
	var written int64
	for _, l := range loaders {
		if l == nil {
			continue
		}
		if err := l.Flush(ctx); err != nil {
			return 0, err
		}
		written += l.Written
	}
	return written, nil
}

// restoreSecret makes one of the backup's Secrets the tenant's; the
// encryption Secret gives the Decrypter of what is stored.
func (r *ApiServerConfigReconciler) restoreSecret(ctx context.Context, p *pass, s *backup.Secret, read *apiserver.Decrypter) (*apiserver.Decrypter, error) {
	name := p.cfg.Name + "-" + s.Role
	if !apiserver.Retainable(p.cfg.Name, name) {
		return nil, fmt.Errorf("%w: it holds a Secret of role %q, which no tenant has", backup.ErrCorrupt, s.Role)
	}
	want := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.cfg.Namespace, Name: name, Labels: map[string]string{
			apiserver.NameLabel: p.cfg.Name, "app.kubernetes.io/managed-by": apiserver.FieldOwner}},
		Type: corev1.SecretTypeOpaque,
		Data: s.Data,
	}
	if state, ok := s.Annotations[apiserver.RotationStateAnnotation]; ok {
		want.Annotations = map[string]string{apiserver.RotationStateAnnotation: state}
	}
	switch t := corev1.SecretType(s.Type); t {
	case corev1.SecretTypeOpaque, corev1.SecretTypeTLS:
		want.Type = t
	case "":
	default:
		return nil, fmt.Errorf("%w: its Secret %s is of type %s, which the operator never writes", backup.ErrCorrupt, s.Role, t)
	}
	r.Ownership.Prove(p.cfg.Name, p.cfg.UID, want)
	existing := &corev1.Secret{}
	switch err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(want), existing); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("restoring Secret %s: %w", name, err)
	default:
		if c := ownership.Claim(r.Ownership, p.cfg, existing); !c.Own() {
			return nil, &nameConflict{kind: "Secret", namespace: p.cfg.Namespace, name: name, holder: c.Holder}
		}
	}
	// Applied with the operator's field owner, as its passes apply it:
	// a key the backup holds that a later pass drops (the next CA of a
	// rotation it promotes) goes, and the proof stays true.
	want.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}
	desired, err := apiserver.ApplyForm(want)
	if err != nil {
		return nil, err
	}
	if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(desired), client.FieldOwner(apiserver.FieldOwner), client.ForceOwnership); err != nil {
		return nil, fmt.Errorf("restoring Secret %s: %w", name, err)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Restored a Secret", "secret", name)
	if name != apiserver.EncryptionSecretName(p.cfg.Name) {
		return read, nil
	}
	keys, err := apiserver.ParseEncryptionKeys(s.Data[apiserver.EncryptionKeysKey], apiserver.EncryptionLayout{})
	if err != nil {
		return nil, fmt.Errorf("%w: its encryption keys do not parse: %w", backup.ErrCorrupt, err)
	}
	return apiserver.NewDecrypter(keys)
}
