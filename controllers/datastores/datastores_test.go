package datastores

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
)

// A tenant is on the datastore that holds every one of its etcd servers,
// however the spec writes their host names; partly on one, it waits with
// the reason; a datastore whose key material is broken holds its own
// tenants, not the others.
func TestDatastores_HoldTheTenantsWhoseServersAreAllTheirs(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	ca, err := pki.NewSelfSignedCA("etcd-client-ca", pki.KeyAlgorithmECDSAP256, 48*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	create := func(name, endpoints string, data map[string][]byte) {
		t.Helper()
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{Label: "true"}},
			Data: map[string][]byte{endpointsKey: []byte(endpoints)}}
		for k, v := range data {
			s.Data[k] = v
		}
		if err := env.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	good := map[string][]byte{caKey: ca.CertPEM(), clientCAKey: ca.CertPEM(), clientKeyKey: key}
	create("shared", "https://10.0.0.1:2379,\nhttps://etcd.example.com:2379", good)
	create("broken", "https://10.0.0.7:2379", map[string][]byte{caKey: []byte("not PEM")})
	create("no-endpoints", "", good)
	// Not labelled: not a datastore.
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other"},
		Data: map[string][]byte{endpointsKey: []byte("https://10.0.0.5:2379")}}); err != nil {
		t.Fatal(err)
	}

	d := New(env.Client, ns, time.Minute)
	spec := func(servers []string, override ...string) *v1alpha1.EtcdSpec {
		s := &v1alpha1.EtcdSpec{Servers: servers}
		if len(override) > 0 {
			s.Overrides = []v1alpha1.EtcdOverride{{Resource: "events", Servers: override}}
		}
		return s
	}
	for _, tc := range []struct {
		name, want, err string
		spec            *v1alpha1.EtcdSpec
	}{
		{"one server", "shared", "", spec([]string{"https://10.0.0.1:2379"})},
		{"a host name written otherwise", "shared", "", spec([]string{"https://ETCD.example.com.:2379"}, "https://10.0.0.1:2379")},
		{"a server elsewhere", "", "", spec([]string{"https://10.0.0.5:2379"})},
		{"an override elsewhere", "", "some of spec.etcd's servers", spec([]string{"https://10.0.0.1:2379"}, "https://10.0.0.5:2379")},
		{"a broken datastore", "", "no PEM certificate", spec([]string{"https://10.0.0.7:2379"})},
	} {
		ds, err := d.Of(ctx, time.Now(), tc.spec)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want == "" && ds != nil:
			t.Errorf("%s: on datastore %s, want none", tc.name, ds.name)
		case tc.want != "" && (ds == nil || ds.name != tc.want):
			t.Errorf("%s: on %v, want datastore %s", tc.name, ds, tc.want)
		}
	}
	now := time.Now()
	ds, _ := d.Of(ctx, now, spec([]string{"https://10.0.0.1:2379"}))
	if ds == nil {
		t.Fatal("no datastore")
	}
	rootCert := func() *x509.Certificate {
		t.Helper()
		cert, err := ds.root.GetClientCertificate(nil)
		if err != nil || cert == nil {
			t.Fatalf("the operator has no certificate of the datastore: %v", err)
		}
		root, err := x509.ParseCertificate(cert.Certificate[0])
		if err != nil || root.Subject.CommonName != "root" || root.CheckSignatureFrom(ca.Cert()) != nil {
			t.Fatalf("the operator's certificate of the datastore is %v (%v), want root's, signed by its client CA", root.Subject, err)
		}
		return root
	}
	first := rootCert()
	// Past half its life, the same configuration presents a new one.
	later := now.Add(rootValidity/2 + time.Minute)
	again, _ := d.Of(ctx, later, spec([]string{"https://10.0.0.1:2379"}))
	if again != ds {
		t.Fatal("the datastore was read anew though its Secret did not change")
	}
	if renewed := rootCert(); renewed.SerialNumber.Cmp(first.SerialNumber) == 0 || !renewed.NotAfter.After(later) {
		t.Errorf("the root certificate was not renewed at half its life: serial %v → %v, expires %v", first.SerialNumber, renewed.SerialNumber, renewed.NotAfter)
	}
}
