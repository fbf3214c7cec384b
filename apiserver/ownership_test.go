package apiserver

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

func testOwnership(t *testing.T, fill byte, since time.Time) *Ownership {
	t.Helper()
	key := make([]byte, OwnershipKeyBytes)
	for i := range key {
		key[i] = fill
	}
	o, err := NewOwnership(key, since)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestNewOwnership_RefusesAShortKey(t *testing.T) {
	if _, err := NewOwnership(make([]byte, OwnershipKeyBytes-1), time.Now()); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Fatalf("a key of 31 bytes gave %v, want a refusal naming the size", err)
	}
}

// What a namespace's user can write (labels, owner references, the data
// of a Secret, a proof copied from another object) never makes an object
// the tenant's: only the proof the key computed over the object as it is.
func TestOwnership_ClaimNeedsAProofNoWriterCanForge(t *testing.T) {
	since := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	o := testOwnership(t, 1, since)
	const uid = types.UID("u-x")
	controlled := []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ApiServerConfig", Name: "x", UID: uid, Controller: ptr.To(true)}}
	ca := func() *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "x-ca", Labels: map[string]string{NameLabel: "x"}, OwnerReferences: controlled,
				CreationTimestamp: metav1.NewTime(since.Add(time.Hour)),
				Annotations:       map[string]string{RotationStateAnnotation: `{"phase":"Stable"}`}},
			Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": []byte("cert"), "tls.key": []byte("key")},
		}
	}
	proven := func() *corev1.Secret { s := ca(); o.Prove("x", uid, s); return s }

	for _, tc := range []struct {
		name   string
		secret func() *corev1.Secret
		legacy bool
		own    bool
	}{
		{"written by the operator", proven, false, true},
		{"kept by Retain for a tenant of that name (no owner, another uid)", func() *corev1.Secret {
			s := proven()
			s.OwnerReferences = nil
			return s
		}, false, true},
		{"planted with the operator's labels and owner, no proof", ca, false, false},
		{"planted before the tenant's objects were proven, but after the key", ca, true, false},
		{"written before the key by a release that proved nothing, on a tenant not proven yet", func() *corev1.Secret {
			s := ca()
			s.CreationTimestamp = metav1.NewTime(since.Add(-time.Hour))
			return s
		}, true, true},
		{"written before the key, on a tenant whose objects are proven", func() *corev1.Secret {
			s := ca()
			s.CreationTimestamp = metav1.NewTime(since.Add(-time.Hour))
			return s
		}, false, false},
		{"its key replaced", func() *corev1.Secret {
			s := proven()
			s.Data["tls.key"] = []byte("the user's key")
			return s
		}, false, false},
		{"a key added", func() *corev1.Secret {
			s := proven()
			s.Data["tls-next.key"] = []byte("the user's key")
			return s
		}, false, false},
		{"its rotation moved by someone else", func() *corev1.Secret {
			s := proven()
			s.Annotations[RotationStateAnnotation] = `{"phase":"Distrust"}`
			return s
		}, false, false},
		{"another type", func() *corev1.Secret {
			s := proven()
			s.Type = corev1.SecretTypeOpaque
			return s
		}, false, false},
		{"an unrelated annotation or label added: still its own", func() *corev1.Secret {
			s := proven()
			s.Annotations["example.com/note"] = "x"
			s.Labels["example.com/team"] = "y"
			return s
		}, false, true},
		{"the proof copied from another namespace's Secret of that name", func() *corev1.Secret {
			other := ca()
			other.Namespace = "b"
			o.Prove("x", uid, other)
			s := ca()
			s.Annotations[ProofAnnotation] = other.Annotations[ProofAnnotation]
			return s
		}, false, false},
		{"the proof of another key", func() *corev1.Secret {
			s := ca()
			testOwnership(t, 2, since).Prove("x", uid, s)
			return s
		}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c := o.Claim("x", uid, tc.secret(), tc.legacy); c.Own() != tc.own {
				t.Fatalf("Claim = %+v, want own %v", c, tc.own)
			}
		})
	}

	// Tenant x-front-proxy's CA is named as tenant x's front-proxy CA:
	// the proof names the tenant it was written for.
	fp := ca()
	fp.Name, fp.Labels[NameLabel], fp.OwnerReferences = "x-front-proxy-ca", "x-front-proxy", nil
	o.Prove("x-front-proxy", "u-other", fp)
	fp.Labels[NameLabel] = "x"
	if c := o.Claim("x", uid, fp, false); c.Own() {
		t.Error("tenant x-front-proxy's CA, relabelled, is taken as tenant x's front-proxy CA")
	}

	// Without a key, nothing of a proven kind is anyone's.
	var none *Ownership
	if c := none.Claim("x", uid, proven(), true); c.Own() || !strings.Contains(c.Holder, "ownership key") {
		t.Errorf("without a key: Claim = %+v, want no owner and the reason", c)
	}
}

// The Deployment is the evidence that a tenant ran: bound to the tenant's
// uid, not to a spec the deployment controller and scalers change.
func TestOwnership_DeploymentIsBoundToTheTenantsLife(t *testing.T) {
	o := testOwnership(t, 1, time.Now().Add(-time.Hour))
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "x-apiserver", Labels: map[string]string{NameLabel: "x"},
		CreationTimestamp: metav1.Now()}}
	if c := o.Claim("x", "u-x", d, true); c.Own() {
		t.Fatal("a Deployment with the name label and no proof is taken as evidence that the tenant ran")
	}
	o.Prove("x", "u-x", d)
	d.Spec.Replicas = ptr.To[int32](5)
	if c := o.Claim("x", "u-x", d, false); !c.Own() {
		t.Fatalf("the tenant's own Deployment, scaled: Claim = %+v", c)
	}
	if c := o.Claim("x", "u-y", d, false); c.Own() {
		t.Fatal("the Deployment of an earlier tenant of that name is taken as the new one's")
	}
	// Kinds the operator does not prove are judged by ClaimOf alone.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{NameLabel: "x"}}}
	if !o.Claim("x", "u-x", cm, false).Own() {
		t.Fatal("a ConfigMap kept for the tenant is not its own")
	}
}

// A Retain mark is checked from the metadata alone: it binds the keyspace
// to the Secret's namespace, name and tenant.
func TestOwnership_RetainMarksAreProvenFromTheirMetadata(t *testing.T) {
	since := time.Now().Add(-time.Hour)
	o := testOwnership(t, 1, since)
	mark := func() *metav1.PartialObjectMetadata {
		s := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "x-ca", CreationTimestamp: metav1.Now(),
			Labels:      map[string]string{NameLabel: "x", RetainedDataLabel: "true"},
			Annotations: map[string]string{RetainedKeyspaceAnnotation: `{"addresses":["etcd:2379"],"prefix":"/tenants/a/x"}`}}}
		o.ProveMark(s)
		return s
	}
	if s := mark(); !o.MarkProven(s) || !o.MarkTrusted(s) {
		t.Fatal("the operator's own mark is not proven")
	}
	for name, change := range map[string]func(*metav1.PartialObjectMetadata){
		"moved to another keyspace": func(s *metav1.PartialObjectMetadata) {
			s.Annotations[RetainedKeyspaceAnnotation] = `{"addresses":["etcd:2379"],"prefix":"/tenants/b"}`
		},
		"copied to another namespace": func(s *metav1.PartialObjectMetadata) { s.Namespace = "b" },
		"given to another tenant":     func(s *metav1.PartialObjectMetadata) { s.Labels[NameLabel] = "y" },
		"unproven":                    func(s *metav1.PartialObjectMetadata) { delete(s.Annotations, MarkProofAnnotation) },
	} {
		s := mark()
		change(s)
		if o.MarkProven(s) || o.MarkTrusted(s) {
			t.Errorf("a mark %s is proven", name)
		}
	}
	legacy := mark()
	delete(legacy.Annotations, MarkProofAnnotation)
	legacy.CreationTimestamp = metav1.NewTime(since.Add(-time.Minute))
	if !o.MarkTrusted(legacy) || o.MarkProven(legacy) {
		t.Error("a mark written before the key is not trusted as before, or is taken as proven")
	}
}

// BenchmarkOwnership_ClaimOfASecret measures the check a pass makes of each
// Secret it reads as key material (a CA Secret of three keys, 4 KiB): the
// MAC over its data, against the proof it carries.
func BenchmarkOwnership_ClaimOfASecret(b *testing.B) {
	o, err := NewOwnership(make([]byte, OwnershipKeyBytes), time.Now().Add(-time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod-ca", Labels: map[string]string{NameLabel: "prod"}, CreationTimestamp: metav1.Now(),
			Annotations: map[string]string{RotationStateAnnotation: `{"phase":"Stable"}`}},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": make([]byte, 1200), "tls.key": make([]byte, 1700), CABundleKey: make([]byte, 1200)},
	}
	o.Prove("prod", "u", s)
	b.ReportAllocs()
	for b.Loop() {
		if !o.Claim("prod", "u", s, false).Own() {
			b.Fatal("not own")
		}
	}
}
