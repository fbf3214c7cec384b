// Package datastores says how the operator reaches the etcd a tenant
// stores in: as root of a platform's datastore that holds its servers
// (Secrets labelled Label, read at most every reload interval, one
// Registry shared by every reconciler), or with the client Secret its
// spec.etcd.tls names. The tenant reconciler makes each tenant's etcd user
// on its datastore; the backup reconciler reads through the same root.
package datastores

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
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
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
)

// Label, "true" on a Secret of the operator's datastore namespace
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
const Label = "controlplane.apiserver-operator.dev/etcd-datastore"

// Keys of a datastore Secret.
const (
	endpointsKey = "endpoints"
	caKey        = "ca.crt"
	clientCAKey  = "client-ca.crt"
	clientKeyKey = "client-ca.key"
)

// DefaultReload is how long the datastores read last are used: a
// new or changed datastore Secret is taken up within it, at one list of
// the namespace per interval whatever the number of tenants.
const DefaultReload = 30 * time.Second

// rootValidity is how long the operator's root certificate of a
// datastore lives; a new one is issued at half of it.
const rootValidity = 24 * time.Hour

// Datastore is one datastore Secret, read.
type Datastore struct {
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

// Registry reads the datastore Secrets at most every datastoreReload;
// the reconcilers of tenants and of backups share one.
type Registry struct {
	reader    client.Reader
	namespace string
	reload    time.Duration

	mu     sync.Mutex
	readAt time.Time
	all    []*Datastore
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

// New reads the datastores of namespace (Label) with
// reader, which reads the API server (the operator's cache holds only its
// own objects).
func New(reader client.Reader, namespace string, reload time.Duration) *Registry {
	return &Registry{reader: reader, namespace: namespace, reload: cmp.Or(reload, DefaultReload),
		ignored: map[string]string{}, ensured: map[string]ensuredUser{}}
}

// Of is the datastore that holds every etcd server of spec, nil when none
// holds any. A spec whose servers are partly on a datastore is an error:
// its apiservers present one certificate to every server.
func (d *Registry) Of(ctx context.Context, now time.Time, spec *v1alpha1.EtcdSpec) (*Datastore, error) {
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
			return nil, &UnusableError{ds.err.Error()}
		case in == len(addresses):
			return ds, nil
		case in > 0:
			return nil, &UnusableError{fmt.Sprintf("some of spec.etcd's servers (%s) are on the etcd datastore %s and others are not: its apiservers present one etcd certificate to every server, so put all of them on it or none",
				strings.Join(addresses, ", "), ds.name)}
		}
	}
	return nil, nil
}

// UnusableError says why a tenant cannot use the datastore that holds
// its servers: until the spec or the datastore changes, it waits.
type UnusableError struct{ message string }

func (e *UnusableError) Error() string { return e.message }

// list reads the datastores again when the last read is older than the
// reload interval. A failed read keeps what the last one found (and is
// tried again after the interval): an API server that does not answer for
// a moment moves no tenant.
func (d *Registry) list(ctx context.Context, now time.Time) ([]*Datastore, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.readAt.IsZero() && now.Sub(d.readAt) < d.reload {
		return d.all, d.err
	}
	secrets := &corev1.SecretList{}
	if err := d.reader.List(ctx, secrets, client.InNamespace(d.namespace), client.MatchingLabels{Label: "true"}); err != nil {
		err = fmt.Errorf("listing the etcd datastores (Secrets labelled %s=true in %s): %w", Label, d.namespace, err)
		if d.readAt.IsZero() {
			return nil, err
		}
		ctrl.LoggerFrom(ctx).Info("Keeping the etcd datastores read last", "error", err)
		d.readAt = now
		return d.all, d.err
	}
	previous := map[string]*Datastore{}
	for _, ds := range d.all {
		previous[ds.name] = ds
	}
	var all []*Datastore
	for i := range secrets.Items {
		s := &secrets.Items[i]
		if old := previous[s.Name]; old != nil && old.version == s.ResourceVersion {
			if old.err == nil && now.Sub(old.rootIssued) >= rootValidity/2 {
				if err := old.renewRoot(now); err != nil {
					ctrl.LoggerFrom(ctx).Error(err, "Renewing the operator's root certificate of an etcd datastore", "datastore", s.Name)
				}
			}
			all = append(all, old)
			continue
		}
		ds, err := read(s, now)
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

// ByName is the datastore of that name, nil when there is none.
func (d *Registry) ByName(ctx context.Context, now time.Time, name string) (*Datastore, error) {
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

// read reads a datastore Secret and issues the operator's root
// certificate of it.
func read(s *corev1.Secret, now time.Time) (*Datastore, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("the etcd datastore Secret %s/%s: %s", s.Namespace, s.Name, fmt.Sprintf(format, a...))
	}
	ds := &Datastore{name: s.Name, addresses: map[string]bool{}, serverCA: s.Data[caKey], version: s.ResourceVersion, rootIssued: now}
	for _, e := range strings.FieldsFunc(string(s.Data[endpointsKey]), func(r rune) bool { return r == ',' || r == '\n' || r == ' ' }) {
		u, err := url.Parse(e)
		if err != nil || u.Hostname() == "" || u.Port() == "" {
			return nil, bad("endpoint %q is no URL with a host and a port", e)
		}
		ds.addresses[net.JoinHostPort(strings.TrimSuffix(strings.ToLower(u.Hostname()), "."), u.Port())] = true
	}
	if len(ds.addresses) == 0 {
		return nil, bad("no endpoints in key %q", endpointsKey)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ds.serverCA) {
		ds.err = bad("no PEM certificate in key %q", caKey)
		return ds, nil
	}
	ca, err := pki.ParseKeyPair(s.Data[clientCAKey], s.Data[clientKeyKey])
	if err != nil {
		ds.err = bad("keys %q and %q hold no CA and its key: %v", clientCAKey, clientKeyKey, err)
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
func (ds *Datastore) renewRoot(now time.Time) error {
	root, err := pki.NewSignedCert(ds.clientCA, UserCertConfig("root"), pki.KeyAlgorithmOf(ds.clientCA.Cert().PublicKey), rootValidity, now)
	if err != nil {
		return fmt.Errorf("issuing the operator's root certificate: %w", err)
	}
	ds.rootCert.Store(&tls.Certificate{Certificate: [][]byte{root.Cert().Raw}, PrivateKey: root.Key(), Leaf: root.Cert()})
	ds.rootIssued = now
	return nil
}

// UserCertConfig is the client certificate of the etcd user name.
func UserCertConfig(name string) pki.CertConfig {
	return pki.CertConfig{CommonName: name, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
}

// Name is the datastore's Secret's name.
func (ds *Datastore) Name() string { return ds.name }

// Root is the operator's TLS configuration as etcd's root user of the
// datastore (nil when its Secret is broken), and RootID the identity of
// the Secret's material.
func (ds *Datastore) Root() (*tls.Config, string) { return ds.root, ds.rootID }

// ClientCA is the CA the datastore's servers trust for client certificates.
func (ds *Datastore) ClientCA() *pki.KeyPair { return ds.clientCA }

// Reload is how long the datastores read last are used.
func (d *Registry) Reload() time.Duration { return d.reload }

// Ensured says whether user was made to be what less than ensuredFor ago.
func (d *Registry) Ensured(user, what string, now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	last := d.ensured[user]
	return last.what == what && now.Sub(last.at) < ensuredFor
}

// RecordEnsured remembers that user was made to be what at now.
func (d *Registry) RecordEnsured(user, what string, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ensured[user] = ensuredUser{what: what, at: now}
}

// HoldsUser says whether anything of user is remembered.
func (d *Registry) HoldsUser(user string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.ensured[user]
	return ok
}

// ForgetUser forgets user, removed with its tenant.
func (d *Registry) ForgetUser(user string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.ensured, user)
}

// ServerCA is what verifies the datastore's servers.
func (ds *Datastore) ServerCA() []byte { return ds.serverCA }
