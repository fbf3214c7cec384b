package pki

import (
	"bytes"
	"crypto/x509"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestNextCAPhase(t *testing.T) {
	ca := mustCA(t, "kubernetes", 100*day, now)
	renewAt := RenewAt(ca.Cert(), 80)
	policy := CARotationPolicy{RenewalPercent: 80, Overlap: 7 * day}
	stable := RotationState{Phase: PhaseStable, Since: now, SignerSince: now, RolledOutAt: now}
	tests := []struct {
		name            string
		state           RotationState
		signer          *x509.Certificate
		at              time.Time
		rolloutComplete bool
		want            RotationState
		wantActions     []Action
	}{
		{
			name: "first observation adopts the signer", state: RotationState{}, signer: ca.Cert(), at: now, rolloutComplete: true,
			want: RotationState{Phase: PhaseStable, Since: now, SignerSince: now},
		},
		{
			name: "stable before the renewal time", state: stable, signer: ca.Cert(), at: renewAt.Add(-time.Second), rolloutComplete: true,
			want: stable,
		},
		{
			name: "stable records when its rollout completed", state: RotationState{Phase: PhaseStable, Since: now}, signer: ca.Cert(), at: now.Add(time.Hour), rolloutComplete: true,
			want: RotationState{Phase: PhaseStable, Since: now, RolledOutAt: now.Add(time.Hour)},
		},
		{
			name: "renewal time reached: trust a new CA", state: stable, signer: ca.Cert(), at: renewAt, rolloutComplete: true,
			want:        RotationState{Phase: PhaseTrustNew, Since: renewAt, SignerSince: now, OldNotAfter: ca.Cert().NotAfter},
			wantActions: []Action{ActionGenerate, ActionPublishTrust},
		},
		{
			name: "renewal time reached during a rollout: wait", state: stable, signer: ca.Cert(), at: renewAt, rolloutComplete: false,
			want: stable,
		},
		{
			name: "no signer yet: nothing to rotate", state: stable, signer: nil, at: renewAt, rolloutComplete: true,
			want: stable,
		},
		{
			name:  "new CA not yet trusted everywhere: wait",
			state: RotationState{Phase: PhaseTrustNew, Since: renewAt, OldNotAfter: ca.Cert().NotAfter}, signer: ca.Cert(), at: renewAt.Add(day), rolloutComplete: false,
			want: RotationState{Phase: PhaseTrustNew, Since: renewAt, OldNotAfter: ca.Cert().NotAfter},
		},
		{
			name:  "new CA trusted everywhere: sign with it",
			state: RotationState{Phase: PhaseTrustNew, Since: renewAt, OldNotAfter: ca.Cert().NotAfter}, signer: ca.Cert(), at: renewAt.Add(day), rolloutComplete: true,
			want:        RotationState{Phase: PhaseSignWithNew, Since: renewAt.Add(day), SignerSince: renewAt.Add(day), OldNotAfter: ca.Cert().NotAfter},
			wantActions: []Action{ActionSwitchSigner, ActionReissueLeaves},
		},
		{
			name:  "reissued leaves rolling out: wait",
			state: RotationState{Phase: PhaseSignWithNew, Since: renewAt, OldNotAfter: ca.Cert().NotAfter}, at: renewAt.Add(30 * day), rolloutComplete: false,
			want: RotationState{Phase: PhaseSignWithNew, Since: renewAt, OldNotAfter: ca.Cert().NotAfter},
		},
		{
			name:  "reissued leaves rolled out: the overlap starts",
			state: RotationState{Phase: PhaseSignWithNew, Since: renewAt, OldNotAfter: ca.Cert().NotAfter}, at: renewAt.Add(day), rolloutComplete: true,
			want: RotationState{Phase: PhaseSignWithNew, Since: renewAt, RolledOutAt: renewAt.Add(day), OldNotAfter: ca.Cert().NotAfter},
		},
		{
			name:  "overlap not over: keep the old CA",
			state: RotationState{Phase: PhaseSignWithNew, Since: renewAt, RolledOutAt: renewAt.Add(day), OldNotAfter: ca.Cert().NotAfter}, at: renewAt.Add(8*day - time.Second), rolloutComplete: true,
			want: RotationState{Phase: PhaseSignWithNew, Since: renewAt, RolledOutAt: renewAt.Add(day), OldNotAfter: ca.Cert().NotAfter},
		},
		{
			name:  "overlap over: prune the old CA",
			state: RotationState{Phase: PhaseSignWithNew, Since: renewAt, RolledOutAt: renewAt.Add(day), OldNotAfter: ca.Cert().NotAfter}, at: renewAt.Add(8 * day), rolloutComplete: true,
			want:        RotationState{Phase: PhasePruneOld, Since: renewAt.Add(8 * day)},
			wantActions: []Action{ActionDropOld, ActionPublishTrust},
		},
		{
			name:  "overlap over but something is rolling out: wait",
			state: RotationState{Phase: PhaseSignWithNew, Since: renewAt, RolledOutAt: renewAt.Add(day), OldNotAfter: ca.Cert().NotAfter}, at: renewAt.Add(9 * day), rolloutComplete: false,
			want: RotationState{Phase: PhaseSignWithNew, Since: renewAt, RolledOutAt: renewAt.Add(day), OldNotAfter: ca.Cert().NotAfter},
		},
		{
			name:  "old CA expired before the overlap ended: prune it",
			state: RotationState{Phase: PhaseSignWithNew, Since: renewAt, RolledOutAt: renewAt.Add(day), OldNotAfter: renewAt.Add(2 * day)}, at: renewAt.Add(3 * day), rolloutComplete: true,
			want:        RotationState{Phase: PhasePruneOld, Since: renewAt.Add(3 * day)},
			wantActions: []Action{ActionDropOld, ActionPublishTrust},
		},
		{
			name:  "pruning rolling out: wait",
			state: RotationState{Phase: PhasePruneOld, Since: renewAt}, at: renewAt.Add(day), rolloutComplete: false,
			want: RotationState{Phase: PhasePruneOld, Since: renewAt},
		},
		{
			name:  "pruning rolled out: stable again",
			state: RotationState{Phase: PhasePruneOld, Since: renewAt, SignerSince: now}, at: renewAt.Add(day), rolloutComplete: true,
			want: RotationState{Phase: PhaseStable, Since: renewAt.Add(day), SignerSince: now},
		},
		{
			name:  "unknown phase: do nothing",
			state: RotationState{Phase: "Rotating", Since: now}, signer: ca.Cert(), at: renewAt, rolloutComplete: true,
			want: RotationState{Phase: "Rotating", Since: now, RolledOutAt: renewAt},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, actions := NextCAPhase(tt.state, tt.signer, tt.at, tt.rolloutComplete, policy)
			if got != tt.want {
				t.Errorf("state = %+v\nwant    %+v", got, tt.want)
			}
			if !slices.Equal(actions, tt.wantActions) {
				t.Errorf("actions = %v, want %v", actions, tt.wantActions)
			}
		})
	}
}

func TestNextServiceAccountKeyPhase(t *testing.T) {
	policy := ServiceAccountKeyRotationPolicy{RotateEvery: 90 * day, MaxTokenLifetime: 48 * time.Hour, Overlap: day}
	born := now
	due := born.Add(90 * day)
	tests := []struct {
		name            string
		state           RotationState
		policy          ServiceAccountKeyRotationPolicy
		at              time.Time
		rolloutComplete bool
		want            RotationState
		wantActions     []Action
	}{
		{
			name: "first observation dates the key", state: RotationState{}, policy: policy, at: born, rolloutComplete: true,
			want: RotationState{Phase: PhaseStable, Since: born, SignerSince: born},
		},
		{
			name: "key younger than RotateEvery", state: RotationState{Phase: PhaseStable, Since: born, SignerSince: born, RolledOutAt: born}, policy: policy,
			at: due.Add(-time.Second), rolloutComplete: true,
			want: RotationState{Phase: PhaseStable, Since: born, SignerSince: born, RolledOutAt: born},
		},
		{
			name: "key RotateEvery old: trust a new key", state: RotationState{Phase: PhaseStable, Since: born, SignerSince: born, RolledOutAt: born}, policy: policy,
			at: due, rolloutComplete: true,
			want:        RotationState{Phase: PhaseTrustNew, Since: due, SignerSince: born},
			wantActions: []Action{ActionGenerate, ActionPublishTrust},
		},
		{
			name: "no scheduled rotation", state: RotationState{Phase: PhaseStable, Since: born, SignerSince: born, RolledOutAt: born}, policy: ServiceAccountKeyRotationPolicy{},
			at: due.Add(10 * year), rolloutComplete: true,
			want: RotationState{Phase: PhaseStable, Since: born, SignerSince: born, RolledOutAt: born},
		},
		{
			name: "new key trusted everywhere: sign with it, no leaves to reissue", state: RotationState{Phase: PhaseTrustNew, Since: due, SignerSince: born}, policy: policy,
			at: due.Add(time.Hour), rolloutComplete: true,
			want:        RotationState{Phase: PhaseSignWithNew, Since: due.Add(time.Hour), SignerSince: due.Add(time.Hour)},
			wantActions: []Action{ActionSwitchSigner},
		},
		{
			name: "old tokens may still be valid: keep the old public key", state: RotationState{Phase: PhaseSignWithNew, Since: due, SignerSince: due, RolledOutAt: due}, policy: policy,
			at: due.Add(48*time.Hour - time.Second), rolloutComplete: true,
			want: RotationState{Phase: PhaseSignWithNew, Since: due, SignerSince: due, RolledOutAt: due},
		},
		{
			name: "max token lifetime passed: drop the old public key", state: RotationState{Phase: PhaseSignWithNew, Since: due, SignerSince: due, RolledOutAt: due}, policy: policy,
			at: due.Add(48 * time.Hour), rolloutComplete: true,
			want:        RotationState{Phase: PhasePruneOld, Since: due.Add(48 * time.Hour), SignerSince: due},
			wantActions: []Action{ActionDropOld, ActionPublishTrust},
		},
		{
			name: "a longer overlap wins over the token lifetime", state: RotationState{Phase: PhaseSignWithNew, Since: due, SignerSince: due, RolledOutAt: due},
			policy: ServiceAccountKeyRotationPolicy{RotateEvery: 90 * day, MaxTokenLifetime: time.Hour, Overlap: 7 * day},
			at:     due.Add(48 * time.Hour), rolloutComplete: true,
			want: RotationState{Phase: PhaseSignWithNew, Since: due, SignerSince: due, RolledOutAt: due},
		},
		{
			name: "the new key's age counts from when it started signing", state: RotationState{Phase: PhaseStable, Since: due.Add(3 * day), SignerSince: due, RolledOutAt: due.Add(3 * day)}, policy: policy,
			at: due.Add(90*day - time.Second), rolloutComplete: true,
			want: RotationState{Phase: PhaseStable, Since: due.Add(3 * day), SignerSince: due, RolledOutAt: due.Add(3 * day)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, actions := NextServiceAccountKeyPhase(tt.state, tt.at, tt.rolloutComplete, tt.policy)
			if got != tt.want {
				t.Errorf("state = %+v\nwant    %+v", got, tt.want)
			}
			if !slices.Equal(actions, tt.wantActions) {
				t.Errorf("actions = %v, want %v", actions, tt.wantActions)
			}
		})
	}
}

func TestRotationStateAnnotation(t *testing.T) {
	state := RotationState{Phase: PhaseSignWithNew, Since: now, RolledOutAt: now.Add(time.Hour), SignerSince: now, OldNotAfter: now.Add(year)}
	annotation, err := state.Annotation()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseRotationState(annotation)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Since.Equal(state.Since) || got.Phase != state.Phase || !got.RolledOutAt.Equal(state.RolledOutAt) ||
		!got.SignerSince.Equal(state.SignerSince) || !got.OldNotAfter.Equal(state.OldNotAfter) {
		t.Errorf("round trip: %+v, want %+v", got, state)
	}
	stable, err := RotationState{Phase: PhaseStable, Since: now}.Annotation()
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"phase":"Stable","since":"2026-03-01T12:00:00Z"}`; stable != want {
		t.Errorf("annotation %s, want %s (unset times omitted)", stable, want)
	}
	if got, err := ParseRotationState(""); err != nil || got != (RotationState{}) {
		t.Errorf("no annotation: %+v, %v; want the zero state", got, err)
	}
	for _, bad := range []string{`{"phase":"Rotating"}`, `{}`, `not json`} {
		if _, err := ParseRotationState(bad); err == nil {
			t.Errorf("ParseRotationState(%s): no error", bad)
		}
	}
}

// TestCARotationNeverBreaksClients drives NextCAPhase day by day as a
// controller would, with consumers that take three days to roll out each
// change, and checks at every step what a user would notice: the serving
// certificate in use verifies with the CA bundle the clients hold (also the
// one they held before the last rollout, for clients that lag), and the
// admin certificate handed out before the rotation keeps working until the
// overlap is over.
func TestCARotationNeverBreaksClients(t *testing.T) {
	const caValidity = 2 * year
	const rolloutTime = 3 * day
	policy := CARotationPolicy{RenewalPercent: 80, Overlap: 30 * day}
	servingCfg := ServingCertConfig([]string{"kubernetes"}, nil)

	signer := mustCA(t, "kubernetes", caValidity, now)
	var next, old *KeyPair
	serving := mustCert(t, signer, servingCfg, caValidity, now)
	handedOutAdmin := mustCert(t, signer, AdminCertConfig(), caValidity, now)

	desired := struct {
		bundle  []byte
		serving *KeyPair
	}{TrustBundle(now, signer.Cert()), serving}
	published, previous := desired, desired

	var state RotationState
	var phases []RotationPhase
	var prunedAt, switchedAt, changedAt time.Time
	start := RenewAt(signer.Cert(), 80).Add(-3 * day)
	state, _ = NextCAPhase(state, signer.Cert(), start, true, policy)
	for at := start; at.Before(start.Add(120 * day)); at = at.Add(day) {
		// Consumers run what was published; every leaf in use must verify.
		for name, bundle := range map[string][]byte{"current": published.bundle, "previous": previous.bundle} {
			if err := verify(t, bundle, published.serving.Cert(), at, x509.ExtKeyUsageServerAuth, "kubernetes"); err != nil {
				t.Fatalf("%s, phase %s: the serving certificate does not verify with the %s bundle of the clients: %v", at.Format(time.DateOnly), state.Phase, name, err)
			}
		}
		adminErr := verify(t, published.bundle, handedOutAdmin.Cert(), at, x509.ExtKeyUsageClientAuth, "")
		if prunedAt.IsZero() && adminErr != nil {
			t.Fatalf("%s, phase %s: the admin kubeconfig handed out before the rotation stopped working before the old CA was pruned: %v", at.Format(time.DateOnly), state.Phase, adminErr)
		}

		rolloutComplete := bytes.Equal(published.bundle, desired.bundle) && published.serving == desired.serving
		var actions []Action
		state, actions = NextCAPhase(state, signer.Cert(), at, rolloutComplete, policy)
		if len(phases) == 0 || phases[len(phases)-1] != state.Phase {
			phases = append(phases, state.Phase)
		}
		for _, action := range actions {
			switch action {
			case ActionGenerate:
				if next == nil {
					next = mustCA(t, "kubernetes", caValidity, at)
				}
			case ActionPublishTrust:
				var cas []*x509.Certificate
				for _, kp := range []*KeyPair{signer, next, old} {
					if kp != nil {
						cas = append(cas, kp.Cert())
					}
				}
				desired.bundle = TrustBundle(at, cas...)
			case ActionSwitchSigner:
				old, signer, next = signer, next, nil
				switchedAt = at
			case ActionReissueLeaves:
				if renew, reason := NeedsRenewal(desired.serving.Cert(), at, 80, servingCfg.Requirements(signer.Cert(), "")); !renew || reason != ReasonIssuerChanged {
					t.Errorf("after the signer switched, NeedsRenewal = %v, %q; want true, IssuerChanged", renew, reason)
				}
				desired.serving = mustCert(t, signer, servingCfg, caValidity, at)
			case ActionDropOld:
				old = nil
				prunedAt = at
			}
		}
		if len(actions) > 0 {
			changedAt = at
		}
		if !at.Before(changedAt.Add(rolloutTime)) && (!bytes.Equal(published.bundle, desired.bundle) || published.serving != desired.serving) {
			previous, published = published, desired
		}
	}

	wantPhases := []RotationPhase{PhaseStable, PhaseTrustNew, PhaseSignWithNew, PhasePruneOld, PhaseStable}
	if !slices.Equal(phases, wantPhases) {
		t.Fatalf("phases %v, want %v", phases, wantPhases)
	}
	if prunedAt.Sub(switchedAt) < policy.Overlap {
		t.Errorf("the old CA was pruned %s after the signer switched, before the %s overlap", prunedAt.Sub(switchedAt), policy.Overlap)
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
