package tenants

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/utils/ptr"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/admission"
	"github.com/apiserver-operator/apiserver-operator/apiserver/rotation"
)

// rotationPass is a pass over a tenant whose Deployment runs everywhere
// (rolledOut) or not, with stand-in material, both rotations Stable for
// an hour, and the service-account key's rotation asked for: what the
// Rotation step sees, without a cluster.
func rotationPass(t *testing.T, rolledOut bool) *pass {
	t.Helper()
	now := time.Now()
	cfg := &v1alpha1.ApiServerConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "t", UID: "uid",
			Annotations: map[string]string{v1alpha1.RotateServiceAccountKeyAnnotation: "1"}},
		Spec: v1alpha1.ApiServerConfigSpec{Etcd: v1alpha1.EtcdSpec{Servers: []string{"https://etcd:2379"}}},
	}
	c, err := apiserver.Complete(cfg, apiserver.Inputs{})
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := admission.StandIns(c)
	if err != nil {
		t.Fatal(err)
	}
	stable := rotation.State{Phase: rotation.Stable, Since: now.Add(-time.Hour), SignerSince: now.Add(-time.Hour)}
	m.PKI.CARotation, m.PKI.ServiceAccountKeyRotation = stable, stable
	p := &pass{cfg: cfg, now: now, c: c, refs: &referenced{}, templateKept: rolledOut, rolledOut: rolledOut,
		pki:     &pkiResult{secrets: m.PKI, rotatesCA: true, trustedServiceAccountKeys: m.PKI.ServiceAccountPublicKeys},
		current: &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1)}}}
	return p
}

func TestReconcileRotations_ActOnTheMaterialThenRenderAgain(t *testing.T) {
	r := &Reconciler{}
	p := rotationPass(t, true)
	if err := r.reconcileRotations(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if got := p.pki.secrets.ServiceAccountKeyRotation.Phase; got != rotation.TrustNew {
		t.Fatalf("the asked rotation is %s, want TrustNew", got)
	}
	if p.pki.secrets.CARotation.Phase != rotation.Stable {
		t.Fatalf("the CA's rotation moved (%s) though nothing asked for it", p.pki.secrets.CARotation.Phase)
	}
	if len(p.pki.secrets.ServiceAccountNextSigningKey) == 0 {
		t.Fatal("TrustNew was entered without generating the next key")
	}
	// The objects were rendered again from the moved material: the
	// Secret holds the next key, and the published keys trust both.
	if p.desired == nil {
		t.Fatal("a move left the objects as rendered before it")
	}
	var sa map[string][]byte
	for _, s := range p.desired.Secrets {
		if s.Name == apiserver.ServiceAccountSecretName("t") {
			sa = s.Data
		}
	}
	if len(sa[apiserver.ServiceAccountNextKeyKey]) == 0 {
		t.Fatal("the rendered service-account Secret lacks the next key")
	}
	keys, err := keyutil.ParsePublicKeysPEM(sa[apiserver.ServiceAccountPublicKeysKey])
	if err != nil || len(keys) != 2 {
		t.Fatalf("the rendered public keys are %d (%v), want the signing key's and the next one's", len(keys), err)
	}
	if p.requeue != rotationRequeue {
		t.Fatalf("after a move the next pass comes in %v, want %v", p.requeue, rotationRequeue)
	}
	if st := p.cfg.Status.Rotations; len(st) != 3 || st[1].Phase != string(rotation.TrustNew) {
		t.Fatalf("status reports %+v", st)
	}
}

func TestReconcileRotations_WaitForWhatRunsEverywhere(t *testing.T) {
	r := &Reconciler{}
	p := rotationPass(t, false)
	before := p.pki.secrets
	if err := r.reconcileRotations(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if p.pki.secrets.ServiceAccountKeyRotation != before.ServiceAccountKeyRotation || len(p.pki.secrets.ServiceAccountNextSigningKey) != 0 {
		t.Fatal("a rotation moved while the Deployment did not run what the pass rendered everywhere")
	}
	if p.desired != nil {
		t.Fatal("the objects were rendered again though nothing moved")
	}
}

// With spec.konnectivity, a retired service-account key verifies tokens
// for at least the agents' token lifetime, whatever rotationOverlap says:
// an agent that reconnects after the switch presents a token the old key
// may have signed, and kubelet renews it only at 80 % of its hour.
func TestServiceAccountKeyRotation_KeepsTheOldKeyForTheAgentsTokens(t *testing.T) {
	r := &Reconciler{}
	var sa rotator
	for _, rot := range r.rotators() {
		if rot.kind.Name == rotation.ServiceAccountKey.Name {
			sa = rot
		}
	}
	for _, tt := range []struct {
		konnectivity bool
		want         time.Duration
	}{{false, time.Minute}, {true, apiserver.KonnectivityAgentTokenLifetime}} {
		p := rotationPass(t, true)
		p.cfg.Spec.Certificates.RotationOverlap = &metav1.Duration{Duration: time.Minute}
		if tt.konnectivity {
			p.cfg.Spec.Konnectivity = &v1alpha1.KonnectivitySpec{Port: apiserver.DefaultKonnectivityPort}
			p.cfg.Spec.Serving.ExternalHostname = "api.example.com"
		}
		c, err := apiserver.Complete(p.cfg, apiserver.Inputs{})
		if err != nil {
			t.Fatal(err)
		}
		p.c = c
		if got := sa.inputs(p, p.pki.secrets.ServiceAccountKeyRotation).Overlap; got != tt.want {
			t.Errorf("konnectivity %v, rotationOverlap 1m: the retired key is trusted for %s, want %s", tt.konnectivity, got, tt.want)
		}
	}
}
