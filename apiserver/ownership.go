package apiserver

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ProofAnnotation carries the operator's proof that it wrote an object for
// a tenant: a MAC, under a key only the operator holds (Ownership), of the
// object's kind, namespace and name, the tenant's name and what the
// operator reads from the object as fact. Labels and owner references can
// be written by anyone who can write the object; this cannot be forged
// without the key, nor moved to another name, namespace or tenant, nor
// kept over content someone else wrote.
const ProofAnnotation = "controlplane.apiserver-operator.dev/proof"

// proofVersion starts every proof, so that another way of proving can
// come one day beside this one.
const proofVersion = "v1:"

// OwnershipKeyBytes is the size of a key Ownership accepts at least.
const OwnershipKeyBytes = 32

// MarkProofAnnotation carries the operator's proof of a Retain mark (the
// keyspace a kept Secret names, RetainedKeyspaceAnnotation): a MAC of the
// Secret's namespace and name, the tenant's name and the keyspace, which
// the metadata alone checks (the tenant index holds no data). A mark
// without it binds no one but the namespace it is in.
const MarkProofAnnotation = "controlplane.apiserver-operator.dev/retained-keyspace-proof"

// provenAnnotations are the annotations of a Secret whose values the
// operator takes as facts (where a rotation stands): the proof covers them
// with the data. The Retain mark has a proof of its own
// (MarkProofAnnotation): it is written by a patch, and outlives the next
// apply of the tenant that takes the Secret back.
var provenAnnotations = []string{RotationStateAnnotation, RotationRequestAnnotation}

// Ownership proves and checks that the operator wrote an object: the
// objects that carry what a tenant trusts (every Secret, which holds key
// material, and the Deployment, which the operator takes as evidence that
// the tenant ran and stored data).
type Ownership struct {
	key []byte
	// since is when the key was made: an object created before it was
	// written by a release that proved nothing (see Claim).
	since time.Time
}

// NewOwnership is the ownership of key, made at since.
func NewOwnership(key []byte, since time.Time) (*Ownership, error) {
	if len(key) < OwnershipKeyBytes {
		return nil, fmt.Errorf("the ownership key has %d bytes, want at least %d", len(key), OwnershipKeyBytes)
	}
	return &Ownership{key: slices.Clone(key), since: since}, nil
}

// Since is when the key was made.
func (o *Ownership) Since() time.Time {
	if o == nil {
		return time.Time{}
	}
	return o.since
}

// NeedsProof reports whether obj is of a kind the operator proves: a
// Secret or a Deployment, as full objects (metadata alone cannot be
// checked).
func NeedsProof(obj metav1.Object) bool {
	switch obj.(type) {
	case *corev1.Secret, *appsv1.Deployment:
		return true
	}
	return false
}

// Prove sets obj's proof for the tenant of name tenant and uid; obj must
// hold what it will be written with (see NeedsProof). Other kinds are left
// as they are, and so is everything without a key (nil).
func (o *Ownership) Prove(tenant string, uid types.UID, obj metav1.Object) {
	if o == nil || !NeedsProof(obj) {
		return
	}
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[ProofAnnotation] = o.proof(tenant, uid, obj)
	obj.SetAnnotations(a)
}

// Proven reports whether obj carries a proof that the operator wrote it,
// as it is now, for the tenant of name tenant and uid; never without a key
// (nil).
func (o *Ownership) Proven(tenant string, uid types.UID, obj metav1.Object) bool {
	if o == nil {
		return false
	}
	got := obj.GetAnnotations()[ProofAnnotation]
	return got != "" && hmac.Equal([]byte(got), []byte(o.proof(tenant, uid, obj)))
}

// unprovenHolder is the holder of an object that carries no valid proof.
const unprovenHolder = "no ApiServerConfig: it carries no valid proof that the operator wrote it, as it is now, for this tenant (someone else made it, or changed what it holds; labels and owner references prove nothing, anyone who can write the object writes them)"

// Claim says whose obj is, for the ApiServerConfig name with uid: as
// ClaimOf, and for the kinds NeedsProof names, only with a valid proof.
// legacy lets an object created before the key was made (by a release that
// proved nothing) be judged by ClaimOf alone: the tenant's first passes
// after an upgrade, and a Secret Retain kept before it, are taken back as
// before and proven when next written. Without a key (nil), no object of
// those kinds is anyone's.
func (o *Ownership) Claim(name string, uid types.UID, obj metav1.Object, legacy bool) Claim {
	c := ClaimOf(name, uid, obj)
	if o == nil && c.Own() && NeedsProof(obj) {
		return Claim{Holder: "no ApiServerConfig that can be proven: the operator has no ownership key (--ownership-key-secret)"}
	}
	if !c.Own() || !NeedsProof(obj) || o.Proven(name, uid, obj) {
		return c
	}
	if legacy && obj.GetCreationTimestamp().Time.Before(o.since) {
		return c
	}
	return Claim{Holder: unprovenHolder}
}

// ProveMark sets the proof of s's Retain mark: its RetainedKeyspaceAnnotation
// for the tenant its NameLabel names. Nothing without a key (nil).
func (o *Ownership) ProveMark(s metav1.Object) {
	if o == nil {
		return
	}
	a := s.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[MarkProofAnnotation] = o.markProof(s)
	s.SetAnnotations(a)
}

// MarkProven reports whether s's Retain mark carries the operator's proof;
// never without a key (nil).
func (o *Ownership) MarkProven(s metav1.Object) bool {
	if o == nil {
		return false
	}
	got := s.GetAnnotations()[MarkProofAnnotation]
	return got != "" && hmac.Equal([]byte(got), []byte(o.markProof(s)))
}

// MarkTrusted reports whether s's Retain mark is taken as the word of the
// operator: proven, or written before the key by a release that proved
// nothing.
func (o *Ownership) MarkTrusted(s metav1.Object) bool {
	return o.MarkProven(s) || (o != nil && s.GetCreationTimestamp().Time.Before(o.since))
}

func (o *Ownership) markProof(s metav1.Object) string {
	m := hmac.New(sha256.New, o.key)
	for _, f := range []string{"RetainMark", s.GetNamespace(), s.GetName(), s.GetLabels()[NameLabel], s.GetAnnotations()[RetainedKeyspaceAnnotation]} {
		writeField(m, []byte(f))
	}
	return proofVersion + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// proof is the MAC of what the proof covers.
func (o *Ownership) proof(tenant string, uid types.UID, obj metav1.Object) string {
	m := hmac.New(sha256.New, o.key)
	field := func(s string) { writeField(m, []byte(s)) }
	switch v := obj.(type) {
	case *corev1.Secret:
		field("Secret")
		field(v.Namespace)
		field(v.Name)
		field(tenant)
		field(string(v.Type))
		keys := make([]string, 0, len(v.Data))
		for k := range v.Data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			field(k)
			writeField(m, v.Data[k])
		}
		field("annotations")
		for _, k := range provenAnnotations {
			if val, ok := v.Annotations[k]; ok {
				field(k)
				field(val)
			}
		}
	case *appsv1.Deployment:
		// The Deployment is the tenant's life: bound to its uid, not to
		// a content the deployment controller and scalers change.
		field("Deployment")
		field(v.Namespace)
		field(v.Name)
		field(tenant)
		field(string(uid))
	default:
		return ""
	}
	return proofVersion + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// writeField writes b length-prefixed, so that no two sequences of fields
// write the same bytes.
func writeField(h hash.Hash, b []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	h.Write(n[:])
	h.Write(b)
}
