package controllers

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
)

// DatastoreLabel, "true" on a Secret of the operator's datastore namespace
// (--etcd-datastore-namespace), declares etcd servers that the platform
// runs with authentication (etcd's auth enabled, --client-cert-auth), on
// which every tenant gets an etcd user of its own, limited to its prefix
// (apiserver.EtcdRolePermissions): etcd itself then keeps the tenants
// apart. Its keys:
//
//   - endpoints: the etcd client URLs it holds, one per line or comma;
//   - ca.crt: what verifies those servers;
//   - client-ca.crt, client-ca.key: the CA the servers trust for client
//     certificates (--trusted-ca-file). The operator issues from it each
//     tenant's certificate (its user's name as common name) and its own,
//     as etcd's root user, with which it manages the users and reads and
//     deletes the tenants' keys.
//
// Only the platform may write there: whoever holds the client CA is root
// of those servers.
const DatastoreLabel = "controlplane.apiserver-operator.dev/etcd-datastore"

// Keys of a datastore Secret.
const (
	datastoreEndpointsKey = "endpoints"
	datastoreCAKey        = "ca.crt"
	datastoreClientCAKey  = "client-ca.crt"
	datastoreClientKeyKey = "client-ca.key"
)

// DefaultDatastoreReload is how long the datastores read last are used: a
// new or changed datastore Secret is taken up within it, at one list of
// the namespace per interval whatever the number of tenants.
const DefaultDatastoreReload = 30 * time.Second

// datastoreRootValidity is how long the operator's root certificate of a
// datastore lives; a new one is issued at half of it.
const datastoreRootValidity = 24 * time.Hour

// datastore is one datastore Secret, read.
type datastore struct {
	name string
	// addresses are the host:port of its endpoints, as KeyspaceOf writes
	// them.
	addresses map[string]bool
	serverCA  []byte
	clientCA  *pki.KeyPair
	// root is the operator's TLS configuration as etcd's root user, and
	// rootID the identity of the Secret's material (for the etcd watch):
	// both stay while the Secret does, the certificate they present
	// (rootCert, issued at rootIssued, under Datastores.mu) is renewed
	// underneath, so that kept connections and configurations never
	// present an expired one.
	root       *tls.Config
	rootID     string
	rootCert   atomic.Pointer[tls.Certificate]
	rootIssued time.Time
	// version is the Secret's resourceVersion.
	version string
	// err says what is wrong with the Secret beyond its endpoints: the
	// tenants on them wait until it is fixed.
	err error
}

// Datastores reads the datastore Secrets at most every datastoreReload;
// the reconcilers of tenants and of backups share one.
type Datastores struct {
	reader    client.Reader
	namespace string
	reload    time.Duration

	mu     sync.Mutex
	readAt time.Time
	all    []*datastore
	err    error
	// ignored are the Secrets without endpoints, by name, at the
	// resourceVersion last logged.
	ignored map[string]string
	// ensured remembers, per tenant user, what its etcd user was last made
	// to be and when, so that a pass does not ask etcd again for nothing;
	// an entry lasts ensuredFor, so that a user removed behind the
	// operator's back (an etcd restored from a snapshot) comes back.
	ensured map[string]ensuredUser
}

type ensuredUser struct {
	what string
	at   time.Time
}

// ensuredFor is how long a tenant's etcd user is taken to be as it was
// made.
const ensuredFor = time.Hour

// NewDatastores reads the datastores of namespace (DatastoreLabel) with
// reader, which reads the API server (the operator's cache holds only its
// own objects).
func NewDatastores(reader client.Reader, namespace string, reload time.Duration) *Datastores {
	return &Datastores{reader: reader, namespace: namespace, reload: cmp.Or(reload, DefaultDatastoreReload),
		ignored: map[string]string{}, ensured: map[string]ensuredUser{}}
}

// of is the datastore that holds every etcd server of spec, nil when none
// holds any. A spec whose servers are partly on a datastore is an error:
// its apiservers present one certificate to every server.
func (d *Datastores) of(ctx context.Context, now time.Time, spec *v1alpha1.EtcdSpec) (*datastore, error) {
	all, err := d.list(ctx, now)
	if err != nil {
		return nil, err
	}
	addresses := apiserver.KeyspaceOf(spec).Addresses
	for _, ds := range all {
		in := 0
		for _, a := range addresses {
			if ds.addresses[a] {
				in++
			}
		}
		switch {
		case in == len(addresses) && ds.err != nil:
			return nil, &datastoreError{ds.err.Error()}
		case in == len(addresses):
			return ds, nil
		case in > 0:
			return nil, &datastoreError{fmt.Sprintf("some of spec.etcd's servers (%s) are on the etcd datastore %s and others are not: its apiservers present one etcd certificate to every server, so put all of them on it or none",
				strings.Join(addresses, ", "), ds.name)}
		}
	}
	return nil, nil
}

// datastoreError says why a tenant cannot use the datastore that holds
// its servers: until the spec or the datastore changes, it waits.
type datastoreError struct{ message string }

func (e *datastoreError) Error() string { return e.message }

// list reads the datastores again when the last read is older than the
// reload interval. A failed read keeps what the last one found (and is
// tried again after the interval): an API server that does not answer for
// a moment moves no tenant.
func (d *Datastores) list(ctx context.Context, now time.Time) ([]*datastore, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.readAt.IsZero() && now.Sub(d.readAt) < d.reload {
		return d.all, d.err
	}
	secrets := &corev1.SecretList{}
	if err := d.reader.List(ctx, secrets, client.InNamespace(d.namespace), client.MatchingLabels{DatastoreLabel: "true"}); err != nil {
		err = fmt.Errorf("listing the etcd datastores (Secrets labelled %s=true in %s): %w", DatastoreLabel, d.namespace, err)
		if d.readAt.IsZero() {
			return nil, err
		}
		ctrl.LoggerFrom(ctx).Info("Keeping the etcd datastores read last", "error", err)
		d.readAt = now
		return d.all, d.err
	}
	previous := map[string]*datastore{}
	for _, ds := range d.all {
		previous[ds.name] = ds
	}
	var all []*datastore
	for i := range secrets.Items {
		s := &secrets.Items[i]
		if old := previous[s.Name]; old != nil && old.version == s.ResourceVersion {
			if old.err == nil && now.Sub(old.rootIssued) >= datastoreRootValidity/2 {
				if err := old.renewRoot(now); err != nil {
					ctrl.LoggerFrom(ctx).Error(err, "Renewing the operator's root certificate of an etcd datastore", "datastore", s.Name)
				}
			}
			all = append(all, old)
			continue
		}
		ds, err := readDatastore(s, now)
		if err != nil {
			// Without endpoints it holds no tenant's servers.
			if d.ignored[s.Name] != s.ResourceVersion {
				d.ignored[s.Name] = s.ResourceVersion
				ctrl.LoggerFrom(ctx).Info("Ignoring an etcd datastore Secret", "problem", err.Error())
			}
			continue
		}
		all = append(all, ds)
	}
	d.readAt, d.all, d.err = now, all, nil
	return d.all, d.err
}

// byName is the datastore of that name, nil when there is none.
func (d *Datastores) byName(ctx context.Context, now time.Time, name string) (*datastore, error) {
	all, err := d.list(ctx, now)
	if err != nil {
		return nil, err
	}
	for _, ds := range all {
		if ds.name == name {
			return ds, nil
		}
	}
	return nil, nil
}

// readDatastore reads a datastore Secret and issues the operator's root
// certificate of it.
func readDatastore(s *corev1.Secret, now time.Time) (*datastore, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("the etcd datastore Secret %s/%s: %s", s.Namespace, s.Name, fmt.Sprintf(format, a...))
	}
	ds := &datastore{name: s.Name, addresses: map[string]bool{}, serverCA: s.Data[datastoreCAKey], version: s.ResourceVersion, rootIssued: now}
	for _, e := range strings.FieldsFunc(string(s.Data[datastoreEndpointsKey]), func(r rune) bool { return r == ',' || r == '\n' || r == ' ' }) {
		u, err := url.Parse(e)
		if err != nil || u.Hostname() == "" || u.Port() == "" {
			return nil, bad("endpoint %q is no URL with a host and a port", e)
		}
		ds.addresses[net.JoinHostPort(strings.TrimSuffix(strings.ToLower(u.Hostname()), "."), u.Port())] = true
	}
	if len(ds.addresses) == 0 {
		return nil, bad("no endpoints in key %q", datastoreEndpointsKey)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ds.serverCA) {
		ds.err = bad("no PEM certificate in key %q", datastoreCAKey)
		return ds, nil
	}
	ca, err := pki.ParseKeyPair(s.Data[datastoreClientCAKey], s.Data[datastoreClientKeyKey])
	if err != nil {
		ds.err = bad("keys %q and %q hold no CA and its key: %v", datastoreClientCAKey, datastoreClientKeyKey, err)
		return ds, nil
	}
	ds.clientCA = ca
	if err := ds.renewRoot(now); err != nil {
		ds.err = bad("%v", err)
		return ds, nil
	}
	ds.root = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return ds.rootCert.Load(), nil }}
	sum := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(s.Data)) {
		sum.Write([]byte(k))
		sum.Write(s.Data[k])
	}
	ds.rootID = "datastore:" + s.Name + ":" + hex.EncodeToString(sum.Sum(nil))[:16]
	return ds, nil
}

// renewRoot issues the operator's root certificate of the datastore, which
// its TLS configuration presents from then on.
func (ds *datastore) renewRoot(now time.Time) error {
	root, err := pki.NewSignedCert(ds.clientCA, etcdUserCertConfig("root"), pki.KeyAlgorithmOf(ds.clientCA.Cert().PublicKey), datastoreRootValidity, now)
	if err != nil {
		return fmt.Errorf("issuing the operator's root certificate: %w", err)
	}
	ds.rootCert.Store(&tls.Certificate{Certificate: [][]byte{root.Cert().Raw}, PrivateKey: root.Key(), Leaf: root.Cert()})
	ds.rootIssued = now
	return nil
}

// etcdUserCertConfig is the client certificate of the etcd user name.
func etcdUserCertConfig(name string) pki.CertConfig {
	return pki.CertConfig{CommonName: name, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
}

// etcdUsers manages etcd users: tenantio.EtcdV3 does.
type etcdUsers interface {
	EnsureUser(ctx context.Context, endpoints []string, tlsConfig *tls.Config, name string, perms []apiserver.EtcdKeyRange) error
	RemoveUser(ctx context.Context, endpoints []string, tlsConfig *tls.Config, name string) error
}

// findDatastore finds the datastore that holds the tenant's etcd servers:
// the tenant then gets an etcd user of its own (Inputs.EtcdUser), and
// status.etcdDatastore names it. A spec only partly on one, a datastore
// Secret that cannot be read, or the tenant's datastore gone, is an
// environment failure that ends the pass.
func (r *ApiServerConfigReconciler) findDatastore(ctx context.Context, p *pass) error {
	if r.Datastores == nil {
		return nil
	}
	ds, err := r.Datastores.of(ctx, p.now, &p.cfg.Spec.Etcd)
	if unusable := (*datastoreError)(nil); errors.As(err, &unusable) {
		p.obs.failure = &envFailure{reason: v1alpha1.ReasonEtcdDatastore, message: unusable.Error(),
			since: failingSince(p.before.Status.Conditions, v1alpha1.ReasonEtcdDatastore, p.now)}
		p.requeueWithin(r.Datastores.reload)
		p.done = true
		return nil
	}
	if err != nil {
		return err
	}
	if ds == nil {
		was := p.cfg.Status.EtcdDatastore
		if was == "" {
			return nil
		}
		still, err := r.Datastores.byName(ctx, p.now, was)
		if err != nil {
			return err
		}
		if still != nil {
			// The spec moved its servers off the datastore: its user
			// there is left (see removeEtcdUser), the tenant goes on
			// with spec.etcd.tls.
			ctrl.LoggerFrom(ctx).Info("A tenant left its etcd datastore: its etcd user there stays until removed by hand",
				"apiServerConfig", klog.KObj(p.cfg), "datastore", was, "user", apiserver.EtcdUserName(p.cfg.Namespace, p.cfg.Name))
			p.cfg.Status.EtcdDatastore = ""
			return nil
		}
		// Its apiservers keep the certificate they run with: moving them
		// to spec.etcd.tls's is not the operator's guess to make.
		p.obs.failure = &envFailure{reason: v1alpha1.ReasonEtcdDatastore, message: fmt.Sprintf(
			"the platform's etcd datastore %s, which holds the tenant's etcd servers and its etcd user, is gone: the apiservers keep running as they are until the platform declares it again",
			was),
			since: failingSince(p.before.Status.Conditions, v1alpha1.ReasonEtcdDatastore, p.now)}
		p.requeueWithin(r.Datastores.reload)
		p.done = true
		return nil
	}
	// On a datastore, where every tenant's etcd user holds its prefix, a
	// prefix is its namespace's: no other namespace's lies above it. A
	// tenant that stored its data there before this rule keeps its
	// prefix.
	kept := p.cfg.Status.EtcdDatastore == ds.name && p.cfg.Status.DataPrefix != "" &&
		p.cfg.Status.DataPrefix == apiserver.KeyspaceOf(&p.cfg.Spec.Etcd).Prefix
	if !kept && !apiserver.PrefixInNamespace(p.cfg.Namespace, p.cfg.Spec.Etcd.Prefix) {
		own := apiserver.NewTenantEtcdPrefix(p.cfg.Namespace, "")
		p.obs.failure = &envFailure{reason: v1alpha1.ReasonEtcdDatastore, message: fmt.Sprintf(
			"the tenant's etcd servers are the platform's datastore %s, where a tenant's prefix must be under its namespace's, %s: %s is not; set spec.etcd.prefix under it, or leave it out to get %s%s (nothing was granted or written on the datastore)",
			ds.name, own, cmp.Or(p.cfg.Spec.Etcd.Prefix, apiserver.DefaultEtcdPrefix), own, p.cfg.Name),
			since: failingSince(p.before.Status.Conditions, v1alpha1.ReasonEtcdDatastore, p.now)}
		p.done = true
		return nil
	}
	p.datastore = ds
	p.in.EtcdUser = apiserver.EtcdUserName(p.cfg.Namespace, p.cfg.Name)
	p.cfg.Status.EtcdDatastore = ds.name
	return nil
}

// ensureEtcdUser makes the tenant's etcd user, on every etcd it stores in,
// what its prefix asks for, once per datastore material and prefix (the
// operator's restart asks again).
func (r *ApiServerConfigReconciler) ensureEtcdUser(ctx context.Context, p *pass) error {
	users, ok := r.Etcd.(etcdUsers)
	if p.datastore == nil || !ok {
		return nil
	}
	ds := p.datastore
	perms := apiserver.EtcdRolePermissions(p.c.Spec.Etcd.Prefix)
	want := fmt.Sprintf("%s|%v|%v", ds.rootID, perms, p.c.Etcd.Sets)
	r.Datastores.mu.Lock()
	last := r.Datastores.ensured[p.c.EtcdUser]
	r.Datastores.mu.Unlock()
	done := last.what == want && p.now.Sub(last.at) < ensuredFor
	if done {
		return nil
	}
	for _, set := range p.c.Etcd.Sets {
		if err := users.EnsureUser(ctx, set, ds.root, p.c.EtcdUser, perms); err != nil {
			return fmt.Errorf("making the tenant's etcd user on %s (datastore %s): %w", strings.Join(set, ","), ds.name, err)
		}
	}
	r.Datastores.mu.Lock()
	r.Datastores.ensured[p.c.EtcdUser] = ensuredUser{what: want, at: p.now}
	r.Datastores.mu.Unlock()
	return nil
}

// tenantEtcdTLS is how the operator reaches the etcd of spec, a tenant's
// (or its keyspace's): as root of the datastore that holds it, or with
// spec.etcd.tls's Secret.
func tenantEtcdTLS(ctx context.Context, reader client.Reader, d *Datastores, cfg *v1alpha1.ApiServerConfig, spec *v1alpha1.EtcdSpec, now time.Time) (*tls.Config, error) {
	if d != nil {
		ds, err := d.of(ctx, now, spec)
		if err != nil {
			return nil, err
		}
		if ds != nil {
			return ds.root, nil
		}
	}
	tlsConfig, _, err := etcdTLS(ctx, reader, cfg, spec)
	return tlsConfig, err
}

// removeEtcdUser removes a deleted tenant's etcd user from every etcd it
// stores in, on the datastore status.etcdDatastore names. When that
// datastore is gone the user stays, and an event says how to remove it.
func (r *ApiServerConfigReconciler) removeEtcdUser(ctx context.Context, cfg *v1alpha1.ApiServerConfig, now time.Time) error {
	users, ok := r.Etcd.(etcdUsers)
	if r.Datastores == nil || !ok || cfg.Status.EtcdDatastore == "" {
		return nil
	}
	name := apiserver.EtcdUserName(cfg.Namespace, cfg.Name)
	ds, err := r.Datastores.byName(ctx, now, cfg.Status.EtcdDatastore)
	if err != nil {
		return err
	}
	if ds == nil || ds.root == nil { // gone, or broken (datastore.err)
		r.event(cfg, corev1.EventTypeWarning, v1alpha1.ReasonEtcdDatastore, "Delete",
			"The etcd user %s stays: its datastore %s is gone or broken; remove it with etcdctl user delete %s and etcdctl role delete %s", name, cfg.Status.EtcdDatastore, name, name)
		return nil
	}
	c, err := apiserver.Complete(cfg, apiserver.Inputs{EtcdUser: name})
	if err != nil {
		return err
	}
	for _, set := range c.Etcd.Sets {
		if err := users.RemoveUser(ctx, set, ds.root, name); err != nil {
			return fmt.Errorf("removing the tenant's etcd user from %s (datastore %s): %w", strings.Join(set, ","), ds.name, err)
		}
	}
	r.Datastores.mu.Lock()
	delete(r.Datastores.ensured, name)
	r.Datastores.mu.Unlock()
	return nil
}
