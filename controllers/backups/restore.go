package backups

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/backup"
	"github.com/apiserver-operator/apiserver-operator/controllers/archives"
	"github.com/apiserver-operator/apiserver-operator/controllers/ownership"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// Target is the tenant a restore writes into, as the pass that started it
// saw it.
type Target struct {
	// Config is the tenant (a copy: the restore outlives the pass).
	Config *v1alpha1.ApiServerConfig
	// Completed is its completed spec: where each resource is stored.
	Completed *apiserver.Completed
	// EtcdTLS reaches its etcd.
	EtcdTLS *tls.Config
	// OperatorEncryption: the tenant encrypts with the operator's keys (no
	// spec.encryption.configSecretName of its own), so encrypted data can
	// be taken.
	OperatorEncryption bool
	// Prefix is where its keys go, cleaned and rooted.
	Prefix string
}

// Restorer restores backups into tenants, off the reconcile workers (see
// restoreJobs): the tenant reconciler's restore step begins one, and takes
// its Outcome in the pass its end brings.
type Restorer struct {
	Client    client.Client
	APIReader client.Reader
	// Reach counts and deletes what a restore cut short wrote; its own
	// etcd client (Reach.V3) writes.
	Reach tenantio.Reach
	// Ownership proves the restored Secrets the operator's.
	Ownership *apiserver.Ownership
	// Places are where archives may be read from.
	Places ArchivePlaces

	jobs *restoreJobs
}

// NewRestorer is a Restorer that runs restoreSlots restores at once.
func NewRestorer(r Restorer) *Restorer {
	r.jobs = newRestoreJobs()
	return &r
}

// Job is the tenant's restore as it stands (a copy); nil when none.
func (r *Restorer) Job(key types.NamespacedName) *Job { return r.jobs.get(key) }

// Begin starts the restore of b into t, writing where keyspace says, with
// timeout, as soon as a slot is free (one of the tenant's that runs
// stops): the tenant's pass comes back when it ends.
func (r *Restorer) Begin(t Target, b *v1alpha1.ApiServerBackup, keyspace string, now time.Time, timeout time.Duration) {
	r.jobs.start(t.Config, b.UID, keyspace, now, timeout, func(ctx context.Context) Outcome {
		return r.run(ctx, t, b, timeout)
	})
}

// Forget stops and drops the tenant's restore.
func (r *Restorer) Forget(key types.NamespacedName) { r.jobs.forget(key) }

// Holds says whether a restore of the tenant is kept.
func (r *Restorer) Holds(key types.NamespacedName) bool { return r.jobs.get(key) != nil }

// Runnable runs the restores with the manager, on the leader only
// (manager.LeaderElectionRunnable).
func (r *Restorer) Runnable() manager.Runnable { return r.jobs }

// Source brings a tenant's pass when its restore ends.
func (r *Restorer) Source() source.Source { return r.jobs.source() }

// run reads the whole archive once before anything is written (one that
// is truncated, altered, gone, or that this tenant cannot take, is refused
// with nothing written), then writes the backup's Secrets and every key
// under the tenant's prefix, within ctx's deadline.
func (r *Restorer) run(ctx context.Context, p Target, b *v1alpha1.ApiServerBackup, timeout time.Duration) Outcome {
	prefix := p.Prefix
	name := b.Name
	timedOut := func(err error) bool { return err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) }
	if err := r.verifyArchive(ctx, p, b); err != nil {
		switch {
		case errors.Is(err, backup.ErrCorrupt) || errors.Is(err, archives.ErrGone) || errors.Is(err, errCannotTake):
			return Outcome{Hold: fmt.Sprintf("ApiServerBackup %s cannot be restored: %v", name, err)}
		case timedOut(err):
			return Outcome{Hold: fmt.Sprintf("Reading ApiServerBackup %s took longer than %s (--backup-timeout): the restore starts over later", name, timeout)}
		}
		return Outcome{Err: err}
	}
	keys := apiserver.KeysUnder(prefix)
	counts := make([]int64, len(p.Completed.Etcd.Sets))
	for i, set := range p.Completed.Etcd.Sets {
		n, err := r.Reach.Count(ctx, set, p.EtcdTLS, keys)
		if err != nil {
			return Outcome{Err: fmt.Errorf("restoring: %w", err)}
		}
		counts[i] = n[0]
	}
	if slices.ContainsFunc(counts, func(n int64) bool { return n > 0 }) {
		if p.Config.Status.RestoredFrom != name {
			return Outcome{Hold: fmt.Sprintf("The tenant's etcd prefix %s holds keys already: a restore writes into an empty prefix only; choose another spec.etcd.prefix, or delete them (etcdctl del --prefix %s)", prefix, keys)}
		}
		for i, set := range p.Completed.Etcd.Sets {
			if counts[i] == 0 {
				continue
			}
			if _, err := r.Reach.Delete(ctx, set, p.EtcdTLS, keys); err != nil {
				return Outcome{Err: fmt.Errorf("restoring again: removing what the restore cut short wrote: %w", err)}
			}
		}
	}
	if p.Config.Status.RestoredFrom != name {
		before := p.Config.DeepCopy()
		p.Config.Status.RestoredFrom = name
		if err := r.Client.Status().Patch(ctx, p.Config, client.MergeFrom(before)); err != nil {
			return Outcome{Err: fmt.Errorf("saying that the restore of %s begins: %w", name, err)}
		}
	}
	written, err := r.restoreArchive(ctx, p, b)
	switch {
	case timedOut(err):
		return Outcome{Hold: fmt.Sprintf("Restoring ApiServerBackup %s took longer than %s (--backup-timeout): the restore starts over later, from the start", name, timeout)}
	case err != nil:
		return Outcome{Err: err} // proven whole above: retried, from the start
	}
	return Outcome{Written: written}
}

// errCannotTake: the tenant cannot take the backup as its spec stands.
var errCannotTake = errors.New("the tenant cannot take it")

// verifyArchive reads the backup's archive to its end (its summary proves
// it whole) and checks that the tenant can take it: the same etcd
// placement (which resources an override stores apart), and, for
// encrypted data, encryption the operator manages.
func (r *Restorer) verifyArchive(ctx context.Context, p Target, b *v1alpha1.ApiServerBackup) error {
	in, err := openArchive(ctx, r.APIReader, r.Places, b)
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
		if s != nil && p.Config.Name+"-"+s.Role == apiserver.EncryptionSecretName(p.Config.Name) {
			encrypted = true
		}
	}
	if encrypted && !p.OperatorEncryption {
		return fmt.Errorf("%w: its data is encrypted with the operator's keys, and the tenant encrypts with its own EncryptionConfiguration (spec.encryption.configSecretName)", errCannotTake)
	}
	var theirs, ours []string
	for _, s := range a.Manifest().Sets {
		theirs = append(theirs, strings.Join(slices.Sorted(slices.Values(s.Resources)), ","))
	}
	for _, set := range p.Completed.Etcd.SetResources() {
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
func (r *Restorer) restoreArchive(ctx context.Context, p Target, b *v1alpha1.ApiServerBackup) (int64, error) {
	etcd, ok := r.Reach.V3()
	if !ok {
		return 0, errors.New("restoring needs the operator's etcd client")
	}
	in, err := openArchive(ctx, r.APIReader, r.Places, b)
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
			target[i] = p.Completed.Etcd.SetOf(schema.ParseGroupResource(s.Resources[0]))
		}
	}
	loaders := make([]*tenantio.Loader, len(p.Completed.Etcd.Sets))
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
			if loaders[t], err = etcd.Loader(p.Completed.Etcd.Sets[t], p.EtcdTLS); err != nil {
				return 0, err
			}
		}
		from, to := []byte(m.Prefix+kv.Key), []byte(p.Prefix+kv.Key)
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
func (r *Restorer) restoreSecret(ctx context.Context, p Target, s *backup.Secret, read *apiserver.Decrypter) (*apiserver.Decrypter, error) {
	name := p.Config.Name + "-" + s.Role
	if !apiserver.Retainable(p.Config.Name, name) {
		return nil, fmt.Errorf("%w: it holds a Secret of role %q, which no tenant has", backup.ErrCorrupt, s.Role)
	}
	want := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Config.Namespace, Name: name, Labels: map[string]string{
			apiserver.NameLabel: p.Config.Name, "app.kubernetes.io/managed-by": apiserver.FieldOwner}},
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
	r.Ownership.Prove(p.Config.Name, p.Config.UID, want)
	existing := &corev1.Secret{}
	switch err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(want), existing); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("restoring Secret %s: %w", name, err)
	default:
		if c := ownership.Claim(r.Ownership, p.Config, existing); !c.Own() {
			return nil, &ownership.NameConflict{Kind: "Secret", Namespace: p.Config.Namespace, Name: name, Holder: c.Holder}
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
	if name != apiserver.EncryptionSecretName(p.Config.Name) {
		return read, nil
	}
	keys, err := apiserver.ParseEncryptionKeys(s.Data[apiserver.EncryptionKeysKey], apiserver.EncryptionLayout{})
	if err != nil {
		return nil, fmt.Errorf("%w: its encryption keys do not parse: %w", backup.ErrCorrupt, err)
	}
	return apiserver.NewDecrypter(keys)
}
