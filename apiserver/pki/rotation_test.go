package pki

import (
	"bytes"
	"crypto/x509"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/util/keyutil"

	"github.com/apiserver-operator/apiserver-operator/apiserver/rotation"
)

// TestCARotationNeverBreaksClients drives rotation.CA day by day as the
// controller does, with the bundle composed by CATrust, consumers that take
// three days to roll out each change and leaves renewed when NeedsRenewal
// says so; at every step it checks what a user would notice: the serving
// certificate in use verifies with the CA bundle the clients hold (also
// the one they held before the last rollout, for clients that lag), and
// the admin certificate handed out before the rotation keeps working until
// the old CA is pruned.
func TestCARotationNeverBreaksClients(t *testing.T) {
	const caValidity = 2 * year
	const rolloutTime = 3 * day
	const overlap = 30 * day
	servingCfg := ServingCertConfig([]string{"kubernetes"}, nil)

	signer := mustCA(t, "kubernetes", caValidity, now)
	var next *KeyPair
	var trusted []*x509.Certificate
	serving := mustCert(t, signer, servingCfg, caValidity, now)
	handedOutAdmin := mustCert(t, signer, AdminCertConfig(), caValidity, now)

	type material struct {
		bundle  []byte
		serving *KeyPair
	}
	desired := material{CATrust(now, signer.Cert(), nil, nil, false), serving}
	published, previous := desired, desired

	var state rotation.State
	var phases []rotation.Phase
	var prunedAt, switchedAt, changedAt time.Time
	start := RenewAt(signer.Cert(), 80).Add(-3 * day)
	for at := start; at.Before(start.Add(120 * day)); at = at.Add(day) {
		for name, bundle := range map[string][]byte{"current": published.bundle, "previous": previous.bundle} {
			if err := verify(t, bundle, published.serving.Cert(), at, x509.ExtKeyUsageServerAuth, "kubernetes"); err != nil {
				t.Fatalf("%s, phase %s: the serving certificate does not verify with the %s bundle of the clients: %v", at.Format(time.DateOnly), state.Phase, name, err)
			}
		}
		adminErr := verify(t, published.bundle, handedOutAdmin.Cert(), at, x509.ExtKeyUsageClientAuth, "")
		if prunedAt.IsZero() && adminErr != nil {
			t.Fatalf("%s, phase %s: the admin kubeconfig handed out before the rotation stopped working before the old CA was pruned: %v", at.Format(time.DateOnly), state.Phase, adminErr)
		}

		rolledOut := bytes.Equal(published.bundle, desired.bundle) && published.serving == desired.serving
		in := rotation.Inputs{Now: at, RolledOut: rolledOut, DueAt: RenewAt(signer.Cert(), 80), SignerNotAfter: signer.Cert().NotAfter,
			Propagation: 2 * time.Minute, Overlap: overlap}
		before := state.Phase
		var actions []rotation.Action
		state, actions = rotation.CA.Next(state, in)
		if len(phases) == 0 || phases[len(phases)-1] != state.Phase {
			phases = append(phases, state.Phase)
		}
		for _, a := range actions {
			switch a {
			case rotation.Generate:
				if next == nil {
					next = mustCA(t, "kubernetes", caValidity, at)
				}
			case rotation.SwitchSigner:
				trusted = append(trusted, signer.Cert())
				signer, next = next, nil
				switchedAt = at
			}
		}
		if before == rotation.SignWithNew && state.Phase == rotation.PruneOld {
			prunedAt = at
		}
		// What the controller does on every pass: compose the bundle and
		// renew the leaves that need it.
		var nextCert *x509.Certificate
		if next != nil {
			nextCert = next.Cert()
		}
		bundle := CATrust(at, signer.Cert(), nextCert, append(trusted, bundleOf(t, desired.bundle)...), rotation.CA.TrustsOld(state.Phase))
		if renew, _ := NeedsRenewal(desired.serving.Cert(), at, 80, servingCfg.Requirements(signer.Cert(), "")); renew {
			desired.serving = mustCert(t, signer, servingCfg, caValidity, at)
		}
		if !bytes.Equal(bundle, desired.bundle) || len(actions) > 0 {
			desired.bundle = bundle
			changedAt = at
		}
		if !at.Before(changedAt.Add(rolloutTime)) && (!bytes.Equal(published.bundle, desired.bundle) || published.serving != desired.serving) {
			previous, published = published, desired
		}
	}

	wantPhases := []rotation.Phase{rotation.Stable, rotation.TrustNew, rotation.SignWithNew, rotation.PruneOld, rotation.Stable}
	if !slices.Equal(phases, wantPhases) {
		t.Fatalf("phases %v, want %v", phases, wantPhases)
	}
	if prunedAt.Sub(switchedAt) < overlap {
		t.Errorf("the old CA was pruned %s after the signer switched, before the %s overlap", prunedAt.Sub(switchedAt), overlap)
	}
	if got := bundleOf(t, published.bundle); len(got) != 1 || !got[0].Equal(signer.Cert()) {
		t.Errorf("after the rotation the bundle holds %d CAs, want only the new one", len(got))
	}
	if !strings.HasPrefix(signer.Cert().Subject.CommonName, "kubernetes@") || signer.Cert().Equal(handedOutAdmin.Cert()) {
		t.Error("the signer did not change")
	}
	if err := verify(t, published.bundle, handedOutAdmin.Cert(), prunedAt.Add(2*day), x509.ExtKeyUsageClientAuth, ""); err == nil {
		t.Error("the old admin certificate still works after the old CA was pruned")
	}
}

func TestServiceAccountTrust(t *testing.T) {
	pem := func(k *ServiceAccountKey) []byte {
		out, err := k.PrivateKeyPEM()
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	oldKey, err := NewServiceAccountKey("")
	if err != nil {
		t.Fatal(err)
	}
	newKey, err := NewServiceAccountKey("")
	if err != nil {
		t.Fatal(err)
	}
	published, err := PublicKeysPEM(newKey.Public(), oldKey.Public())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name                    string
		signing, next, previous []byte
		keep                    bool
		want                    []*ServiceAccountKey
	}{
		{"stable: the signing key only", pem(oldKey), nil, published, false, []*ServiceAccountKey{oldKey}},
		{"trusting a new key: new first, then the signing key", pem(oldKey), pem(newKey), nil, true, []*ServiceAccountKey{newKey, oldKey}},
		{"signing with the new key: the old one kept from the previous bundle", pem(newKey), nil, published, true, []*ServiceAccountKey{newKey, oldKey}},
		{"pruning: the old one dropped", pem(newKey), nil, published, false, []*ServiceAccountKey{newKey}},
	}
	for _, tt := range tests {
		got, err := ServiceAccountTrust(tt.signing, tt.next, tt.previous, tt.keep)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		keys, err := keyutil.ParsePublicKeysPEM(got)
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) != len(tt.want) {
			t.Fatalf("%s: %d keys, want %d", tt.name, len(keys), len(tt.want))
		}
		for i, k := range tt.want {
			if !publicKeysEqual(keys[i], k.Public()) {
				t.Errorf("%s: key %d is not the expected one", tt.name, i)
			}
		}
	}
	if _, err := ServiceAccountTrust([]byte("not a key"), nil, nil, false); err == nil {
		t.Error("a signing key that does not parse: no error")
	}
}
