package tenants

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// checkData makes sure that a tenant starts only on data that is its own:
// before its first apiserver starts on a prefix (status.dataPrefix is
// another), every etcd it uses must hold no key under the prefix, or only
// what this tenant's namesake kept with deletionPolicy Retain, every value
// of which its encryption keys read. Otherwise the tenant would serve a
// deleted tenant's objects as its own, or fail on every list of a resource
// whose values no key reads; it is Stalled at once (ForeignData), naming
// the prefix and the count, and gets no Deployment; unless the user says
// that they are its own (AdoptDataAnnotation names the prefix: the etcd of
// a cluster the tenant takes over), and its keys read them. A tenant that ran
// before the operator checked this (a Deployment, no dataPrefix) keeps
// its data as its own.
func (r *Reconciler) checkData(ctx context.Context, p *pass) error {
	if r.Reach == nil {
		return nil
	}
	keyspace := p.c.Keyspace
	prefix := keyspace.Prefix
	st := &p.cfg.Status
	if st.DataPrefix == "" && p.current.Name != "" {
		// Ran before the operator recorded where its data is.
		st.DataPrefix, st.DataServers = prefix, keyspace.Addresses
	}
	if st.DataPrefix == prefix && len(st.DataServers) == 0 {
		// Recorded by a release that knew the prefix alone.
		st.DataServers = keyspace.Addresses
	}
	// The etcd clusters the data check reads: every one for a new prefix,
	// those the tenant moves to otherwise.
	sets := p.c.Etcd.Sets
	if st.DataPrefix == prefix {
		sets = slices.DeleteFunc(slices.Clone(sets), func(set []string) bool {
			return len(apiserver.SetsOn([][]string{set}, st.DataServers)) > 0
		})
	}
	if dataChecked(p.cfg) {
		return r.ensureDataRecorded(ctx, p, keyspace)
	}
	// Nothing starts before the check; the Etcd step says why it waits.
	if p.done = p.obs.etcdErr != nil; p.done {
		return nil
	}
	var kept *apiserver.EtcdKeyspace
	if r.TenantIndex != nil {
		k, ok, err := r.TenantIndex.RetainedBy(ctx, p.cfg.Namespace, p.cfg.Name)
		if err != nil {
			return err
		}
		if ok {
			kept = &k
		}
	}
	if p.cfg.Spec.Restore != nil && p.cfg.Status.DataPrefix == "" && p.current.Name == "" {
		// Only before the tenant ever started: a restored tenant that
		// moves its prefix later is checked as any other.
		return r.restore(ctx, p, prefix, kept)
	}
	// No restore goes on (spec.restore removed meanwhile).
	r.restorer().Forget(client.ObjectKeyFromObject(p.cfg))
	retained := kept != nil && kept.Prefix == prefix && kept.Overlaps(p.c.Keyspace)
	adopt := p.cfg.Annotations[v1alpha1.AdoptDataAnnotation] == prefix
	var read *apiserver.Decrypter
	if p.enc != nil {
		var err error
		if read, err = apiserver.NewDecrypter(p.enc.keys); err != nil {
			return fmt.Errorf("checking that the tenant reads the data under %s: %w", prefix, err)
		}
	}
	keys := apiserver.KeysUnder(prefix)
	var total, unreadable int
	for _, servers := range sets {
		err := r.Reach.Scan(ctx, servers, p.etcdTLS, keys, func(key, value []byte) {
			total++
			// Without the operator's keys (the user's own
			// EncryptionConfiguration), what it cannot read is the user's
			// to judge.
			if read != nil && !read.Reads(key, value) {
				unreadable++
			}
		})
		if err != nil {
			return fmt.Errorf("checking that the keys under %s are the tenant's own before it starts: %w", keys, err)
		}
	}
	var msg string
	switch {
	case total == 0:
	case !retained && !adopt:
		msg = fmt.Sprintf("The tenant's etcd prefix %s holds %d keys it did not write (left by a deleted tenant whose data was not deleted, or written there directly): it would serve them as its own objects; delete them (etcdctl del --prefix %s) or choose another spec.etcd.prefix; if they are this tenant's (the etcd of a cluster it takes over), set annotation %s=%s",
			prefix, total, keys, v1alpha1.AdoptDataAnnotation, prefix)
	case unreadable > 0:
		msg = fmt.Sprintf("The tenant's etcd prefix %s holds %d values, %d of which are encrypted with keys the tenant does not hold (Secret %s was deleted or replaced, or another cluster wrote them): every list of their resources would fail; restore that Secret from a backup, or delete the data (etcdctl del --prefix %s)",
			prefix, total, unreadable, apiserver.EncryptionSecretName(p.cfg.Name), keys)
	case retained:
		r.event(p.cfg, corev1.EventTypeNormal, v1alpha1.ReasonDataTakenBack, "Data",
			"Took back the data its namesake kept under %s (%d keys) and the keys that read it", prefix, total)
	default:
		r.event(p.cfg, corev1.EventTypeNormal, v1alpha1.ReasonDataAdopted, "Data",
			"Adopted the %d keys under %s, as annotation %s says", total, prefix, v1alpha1.AdoptDataAnnotation)
	}
	if msg != "" {
		p.obs.failure = &envFailure{reason: v1alpha1.ReasonForeignData, message: msg, atOnce: true,
			since: failingSince(p.before.Status.Conditions, v1alpha1.ReasonForeignData, p.now)}
		p.requeueWithin(nameConflictRecheck)
		p.done = true
		return nil
	}
	return r.ensureDataRecorded(ctx, p, keyspace)
}

// dataChecked reports whether status says that the tenant's data at its
// spec's keyspace is proven its own: the prefix and every etcd cluster.
func dataChecked(cfg *v1alpha1.ApiServerConfig) bool {
	st, sets := cfg.Status, apiserver.EtcdSetsOf(&cfg.Spec.Etcd)
	return st.DataPrefix == apiserver.KeyspaceOf(&cfg.Spec.Etcd).Prefix &&
		len(apiserver.SetsOn(sets, st.DataServers)) == len(sets)
}

// ensureDataRecorded records the keyspace the data check proved the
// tenant's, and only then gives its etcd user its rights there.
func (r *Reconciler) ensureDataRecorded(ctx context.Context, p *pass, k apiserver.EtcdKeyspace) error {
	p.cfg.Status.DataPrefix, p.cfg.Status.DataServers = k.Prefix, k.Addresses
	if reachable := p.obs.etcdErr == nil; reachable {
		return r.ensureEtcdUser(ctx, p)
	}
	return nil // the Etcd step says why etcd waits
}
