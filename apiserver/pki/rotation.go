package pki

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"time"
)

// RotationPhase is the step a rotation of a CA, or of the service-account
// signing key, has reached. A rotation goes Stable -> TrustNew ->
// SignWithNew -> PruneOld -> Stable, one step at a time, and each step
// waits until what the previous one published has rolled out to every
// consumer.
type RotationPhase string

// The phases of a rotation.
const (
	// PhaseStable: one CA (or key) is trusted and signs.
	PhaseStable RotationPhase = "Stable"
	// PhaseTrustNew: a new CA (or key) has been generated and is trusted
	// beside the old one; the old one still signs.
	PhaseTrustNew RotationPhase = "TrustNew"
	// PhaseSignWithNew: the new CA (or key) signs; the old one is still
	// trusted so that what it signed keeps working during the overlap.
	PhaseSignWithNew RotationPhase = "SignWithNew"
	// PhasePruneOld: the old CA (or key) is no longer trusted; the rotation
	// ends once that has rolled out.
	PhasePruneOld RotationPhase = "PruneOld"
)

// Action is a change a controller makes when a rotation enters a phase.
// Actions must be idempotent on the controller's side (Generate keeps a new
// CA or key that already exists), because a failed reconcile repeats them.
type Action string

// The actions of a rotation, in the order a controller performs them.
const (
	// ActionGenerate: generate the new CA (or key) and store it beside the
	// current one, which keeps signing.
	ActionGenerate Action = "Generate"
	// ActionPublishTrust: publish what is trusted now, newest first: the CA
	// bundle (TrustBundle) or the public keys of
	// --service-account-key-file (PublicKeysPEM), and roll it out.
	ActionPublishTrust Action = "PublishTrust"
	// ActionSwitchSigner: sign with the new CA (or key) from now on.
	ActionSwitchSigner Action = "SwitchSigner"
	// ActionReissueLeaves: issue every leaf certificate again with the new
	// CA (CA rotation only).
	ActionReissueLeaves Action = "ReissueLeaves"
	// ActionDropOld: delete the old CA (or key): it is no longer trusted.
	ActionDropOld Action = "DropOld"
)

// RotationState is the progress of one rotation, small enough to persist
// as JSON in an annotation of the Secret that holds the CA or key (see
// Annotation and ParseRotationState). The zero value means "never observed":
// the first call to NextCAPhase or NextServiceAccountKeyPhase adopts the
// current signer as Stable.
type RotationState struct {
	// Phase is the current phase.
	Phase RotationPhase `json:"phase"`
	// Since is when Phase was entered.
	Since time.Time `json:"since,omitzero"`
	// RolledOutAt is when the rollout of what Phase published was first
	// observed complete; the overlap before pruning counts from there.
	RolledOutAt time.Time `json:"rolledOutAt,omitzero"`
	// SignerSince is when the current signer started signing (the age of
	// a service-account key).
	SignerSince time.Time `json:"signerSince,omitzero"`
	// OldNotAfter is when the CA being retired expires; past it, the old
	// CA is pruned without waiting for the overlap. Zero for keys.
	OldNotAfter time.Time `json:"oldNotAfter,omitzero"`
}

// Annotation encodes the state as JSON for a Secret annotation.
func (s RotationState) Annotation() (string, error) {
	out, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("encoding rotation state: %w", err)
	}
	return string(out), nil
}

// ParseRotationState decodes an annotation written by Annotation. The
// empty string is the zero state (no rotation observed yet); an unknown
// phase is an error, so that a damaged annotation stops the rotation
// instead of restarting it.
func ParseRotationState(annotation string) (RotationState, error) {
	var s RotationState
	if annotation == "" {
		return s, nil
	}
	if err := json.Unmarshal([]byte(annotation), &s); err != nil {
		return RotationState{}, fmt.Errorf("decoding rotation state: %w", err)
	}
	switch s.Phase {
	case PhaseStable, PhaseTrustNew, PhaseSignWithNew, PhasePruneOld:
		return s, nil
	default:
		return RotationState{}, fmt.Errorf("decoding rotation state: unknown phase %q", s.Phase)
	}
}

// CARotationPolicy configures the rotation of a CA.
type CARotationPolicy struct {
	// RenewalPercent of the CA's validity at which rotation starts (see
	// RenewAt); 0 means DefaultRenewalPercent.
	RenewalPercent int32
	// Overlap is how long the old CA stays trusted after every leaf has
	// been reissued by the new one, for certificates handed out of the
	// cluster (such as the admin kubeconfig) to be replaced. The old CA is
	// pruned earlier if it expires.
	Overlap time.Duration
	// Now starts a rotation from Stable at once, whatever the CA's age
	// (a rotation an administrator asked for).
	Now bool
}

// NextCAPhase advances the rotation of a CA by at most one phase and
// returns the new state with the actions that enter it. signer is the CA
// that signs leaves now (the old one until SwitchSigner is done).
// rolloutComplete must be true only when every consumer runs what the
// current phase published (the apiserver pods roll out the Secrets as they
// are now, including the changes of the last actions); no transition
// happens without it.
//
//   - Stable -> TrustNew once now reaches RenewAt(signer, RenewalPercent):
//     Generate, PublishTrust (old and new).
//   - TrustNew -> SignWithNew: SwitchSigner, ReissueLeaves.
//   - SignWithNew -> PruneOld once Overlap has passed since the reissued
//     leaves rolled out, or the old CA expired: DropOld, PublishTrust (new
//     only).
//   - PruneOld -> Stable: nothing to do.
//
// Call it on every reconcile, perform the actions in order, then persist
// the returned state whenever it differs from the one passed in (it also
// records when a rollout completed). A nil signer in Stable does nothing:
// issuing the first CA is not a rotation.
func NextCAPhase(state RotationState, signer *x509.Certificate, now time.Time, rolloutComplete bool, policy CARotationPolicy) (RotationState, []Action) {
	in := rotationInput{
		now:             now,
		rolloutComplete: rolloutComplete,
		overlap:         policy.Overlap,
		reissueLeaves:   true,
	}
	if signer != nil {
		in.due = policy.Now || !now.Before(RenewAt(signer, policy.RenewalPercent))
		in.signerNotAfter = signer.NotAfter
	}
	return advance(state, in)
}

// ServiceAccountKeyRotationPolicy configures the rotation of the
// service-account signing key.
type ServiceAccountKeyRotationPolicy struct {
	// RotateEvery is the age at which the signing key is replaced; 0 never
	// starts a rotation.
	RotateEvery time.Duration
	// MaxTokenLifetime is the longest a token signed by the old key can
	// stay valid (--service-account-max-token-expiration, or a year when
	// --service-account-extend-token-expiration is on). The old public key
	// is kept at least this long.
	MaxTokenLifetime time.Duration
	// Overlap is how long the old public key stays in
	// --service-account-key-file after the new key signs everywhere; the
	// larger of Overlap and MaxTokenLifetime applies.
	Overlap time.Duration
}

// NextServiceAccountKeyPhase advances the rotation of the service-account
// signing key by at most one phase, as NextCAPhase does for a CA: a new key
// is first trusted (its public key added to --service-account-key-file on
// every apiserver), then signs (--service-account-signing-key-file), and
// the old public key is dropped once the overlap has passed since the new
// key signs everywhere. Tokens signed by a dropped key stop working, legacy
// Secret-based tokens included, which never expire.
//
//   - Stable -> TrustNew once the signing key is RotateEvery old:
//     Generate, PublishTrust (new and old public keys).
//   - TrustNew -> SignWithNew: SwitchSigner.
//   - SignWithNew -> PruneOld once max(Overlap, MaxTokenLifetime) has
//     passed since that rolled out: DropOld, PublishTrust (new only).
//   - PruneOld -> Stable: nothing to do.
//
// rolloutComplete has the meaning it has for NextCAPhase; kube-apiserver
// reads its service-account keys only at start, so each phase needs a
// rollout of the pods.
func NextServiceAccountKeyPhase(state RotationState, now time.Time, rolloutComplete bool, policy ServiceAccountKeyRotationPolicy) (RotationState, []Action) {
	in := rotationInput{
		now:             now,
		rolloutComplete: rolloutComplete,
		overlap:         max(policy.Overlap, policy.MaxTokenLifetime),
	}
	if policy.RotateEvery > 0 && !state.SignerSince.IsZero() {
		in.due = !now.Before(state.SignerSince.Add(policy.RotateEvery))
	}
	return advance(state, in)
}

// rotationInput is what advance needs beyond the persisted state.
type rotationInput struct {
	now             time.Time
	rolloutComplete bool
	// due: the signer has reached the age at which rotation starts.
	due bool
	// signerNotAfter: expiry of the signer, remembered as OldNotAfter.
	signerNotAfter time.Time
	overlap        time.Duration
	reissueLeaves  bool
}

// advance is the state machine shared by CA and key rotation.
func advance(s RotationState, in rotationInput) (RotationState, []Action) {
	now := in.now
	if s.Phase == "" {
		return RotationState{Phase: PhaseStable, Since: now, SignerSince: now}, nil
	}
	if !in.rolloutComplete {
		return s, nil
	}
	if s.RolledOutAt.IsZero() {
		s.RolledOutAt = now
	}
	switch s.Phase {
	case PhaseStable:
		if !in.due {
			return s, nil
		}
		next := enter(s, PhaseTrustNew, now)
		next.OldNotAfter = in.signerNotAfter
		return next, []Action{ActionGenerate, ActionPublishTrust}
	case PhaseTrustNew:
		next := enter(s, PhaseSignWithNew, now)
		next.SignerSince = now
		if in.reissueLeaves {
			return next, []Action{ActionSwitchSigner, ActionReissueLeaves}
		}
		return next, []Action{ActionSwitchSigner}
	case PhaseSignWithNew:
		overlapPassed := !now.Before(s.RolledOutAt.Add(in.overlap))
		oldExpired := !s.OldNotAfter.IsZero() && now.After(s.OldNotAfter)
		if !overlapPassed && !oldExpired {
			return s, nil
		}
		next := enter(s, PhasePruneOld, now)
		next.OldNotAfter = time.Time{}
		return next, []Action{ActionDropOld, ActionPublishTrust}
	case PhasePruneOld:
		return enter(s, PhaseStable, now), nil
	default:
		// ParseRotationState refuses unknown phases; do nothing rather
		// than guess where a damaged rotation stands.
		return s, nil
	}
}

// enter moves s to phase at now.
func enter(s RotationState, phase RotationPhase, now time.Time) RotationState {
	s.Phase = phase
	s.Since = now
	s.RolledOutAt = time.Time{}
	return s
}
