// Package rotation replaces a signer (a CA, the service-account signing
// key) without a failed request: the replacement goes through phases, each
// of which waits until every consumer runs what the one before published.
//
// A Kind is the rotation as data: its phases, what each waits for, which
// actions enter the next one and whether the signer being replaced is still
// trusted there. Next is the one state machine every kind runs; a new kind
// of rotation is a new table, not new code. The package is pure: callers
// persist State (see Encode and Kind.Parse), perform the Actions and roll
// out what changed.
package rotation

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Phase is where a rotation stands.
type Phase string

// The phases of the signer rotations.
const (
	// Stable: one signer is trusted and signs.
	Stable Phase = "Stable"
	// TrustNew: a new signer has been generated and is trusted beside the
	// old one, which still signs.
	TrustNew Phase = "TrustNew"
	// SignWithNew: the new signer signs; the old one is still trusted so
	// that what it signed keeps working during the overlap.
	SignWithNew Phase = "SignWithNew"
	// PruneOld: the old signer is no longer trusted; the rotation ends
	// once that has rolled out.
	PruneOld Phase = "PruneOld"
)

// Action is a change of the material the caller makes when a rotation
// enters a phase. Actions must be idempotent on the caller's side (Generate
// keeps a new signer that already exists), because a failed pass repeats
// them. What is trusted is not an action: it follows from the phase
// (Kind.TrustsOld), so that one function owns each trust bundle.
type Action string

// The actions, in the order a caller performs them.
const (
	// Generate a new signer and keep it beside the current one, which
	// keeps signing.
	Generate Action = "Generate"
	// SwitchSigner: the new signer signs from now on; the old one is kept
	// only as trusted. Certificates the old one issued are issued again by
	// the caller's renewal, which sees their issuer changed.
	SwitchSigner Action = "SwitchSigner"
)

// Wait is what a phase waits for, besides the rollout of what it published,
// before the rotation moves on.
type Wait string

// The waits.
const (
	// WaitRollout: nothing more.
	WaitRollout Wait = "Rollout"
	// WaitDue: the signer reached the age at which it is replaced
	// (Inputs.DueAt), or somebody asked for a rotation (Inputs.Request).
	WaitDue Wait = "Due"
	// WaitPropagation: Inputs.Propagation has passed since the phase was
	// entered, for what consumers re-read without a rollout.
	WaitPropagation Wait = "Propagation"
	// WaitOverlap: Inputs.Overlap has passed since what the phase
	// published rolled out, or the old signer expired.
	WaitOverlap Wait = "Overlap"
	// WaitProof: the caller proved that nothing depends on the old signer
	// any more (Inputs.Proven), such as no value in etcd still encrypted
	// with the old key.
	WaitProof Wait = "Proof"
)

// Step is one phase of a Kind.
type Step struct {
	Phase Phase
	// TrustsOld: the signer being replaced is still trusted in this phase.
	TrustsOld bool
	// Wait is what the phase waits for before Next.
	Wait Wait
	// Next is the phase that follows; Actions enter it.
	Next    Phase
	Actions []Action
}

// Kind is a rotation as data: its steps, the first of which is the phase at
// rest.
type Kind struct {
	// Name is the rotation's name in status.
	Name  string
	Steps []Step
}

// signerSteps replace a signer whose consumers may hold what the old one
// signed: trust the new one first, then sign with it, then stop trusting
// the old one once what it signed has had time to be replaced.
func signerSteps() []Step {
	return []Step{
		{Phase: Stable, Wait: WaitDue, Next: TrustNew, Actions: []Action{Generate}},
		// The CA bundle is re-read by kube-apiserver and fetched again by
		// clients without any rollout: Propagation gives them time.
		{Phase: TrustNew, TrustsOld: true, Wait: WaitPropagation, Next: SignWithNew, Actions: []Action{SwitchSigner}},
		{Phase: SignWithNew, TrustsOld: true, Wait: WaitOverlap, Next: PruneOld},
		{Phase: PruneOld, Wait: WaitRollout, Next: Stable},
	}
}

// The kinds of rotation the operator runs.
var (
	// CA rotates the cluster CA: client certificates handed out (the
	// admin kubeconfig) keep working until the old CA leaves the bundle.
	CA = Kind{Name: "ca", Steps: signerSteps()}
	// ServiceAccountKey rotates the service-account signing key: tokens
	// the old key signed verify until the old public key is dropped.
	ServiceAccountKey = Kind{Name: "service-account-key", Steps: signerSteps()}
	// EncryptionKey replaces the key that encrypts resources in etcd (or
	// the set of resources it encrypts): every apiserver can decrypt with
	// the new key before any encrypts with it, and the old key is dropped
	// only once no stored value needs it. The "signer" is the key that
	// encrypts; "trusted" means the apiservers still decrypt with it.
	EncryptionKey = Kind{Name: "encryption-key", Steps: []Step{
		{Phase: Stable, Wait: WaitDue, Next: TrustNew, Actions: []Action{Generate}},
		// Nothing re-reads the encryption configuration without a
		// rollout: once every apiserver decrypts with the new key, one
		// may encrypt with it.
		{Phase: TrustNew, TrustsOld: true, Wait: WaitRollout, Next: SignWithNew, Actions: []Action{SwitchSigner}},
		// Every apiserver encrypts with the new key; the caller rewrites
		// what the old one encrypted and proves it in etcd.
		{Phase: SignWithNew, TrustsOld: true, Wait: WaitProof, Next: PruneOld},
		{Phase: PruneOld, Wait: WaitRollout, Next: Stable},
	}}
)

// State is the progress of one rotation. The zero value means "never
// observed": Next adopts the current signer as the first phase.
type State struct {
	Phase Phase `json:"phase"`
	// Since is when Phase was entered.
	Since time.Time `json:"since,omitzero"`
	// RolledOutAt is when what Phase published was first seen rolled out,
	// recorded only by a phase that waits for an overlap.
	RolledOutAt time.Time `json:"rolledOutAt,omitzero"`
	// SignerSince is when the current signer started signing.
	SignerSince time.Time `json:"signerSince,omitzero"`
	// OldNotAfter is when the signer being replaced expires: past it, the
	// overlap is over. Zero for signers without expiry.
	OldNotAfter time.Time `json:"oldNotAfter,omitzero"`
	// Request is the last request for a rotation that a rotation answered
	// (Inputs.Request); the caller keeps it apart from the JSON.
	Request string `json:"-"`
	// Distrusted is the last request to stop trusting the old signer at
	// once that a rotation answered (Inputs.Distrust).
	Distrusted string `json:"distrusted,omitempty"`
	// Distrusting is the request the rotation under way answers: it
	// started (generated its new signer) after the request came, so that
	// its PruneOld drops every signer trusted when it came.
	Distrusting string `json:"distrusting,omitempty"`
}

// Inputs are what Next needs beside the state.
type Inputs struct {
	Now time.Time
	// RolledOut is true only when every consumer runs what the current
	// phase published; no phase ends without it.
	RolledOut bool
	// DueAt is when the signer must be replaced; zero: never by age.
	DueAt time.Time
	// Request asks for a rotation now when it is set and differs from the
	// last answered one (State.Request). A rotation under way answers none.
	Request string
	// SignerNotAfter is the expiry of the current signer (zero if none).
	SignerNotAfter time.Time
	// Propagation is the least time in a phase that waits for it.
	Propagation time.Duration
	// Overlap is how long the old signer stays trusted after the new one
	// signs everywhere (unless it expires first).
	Overlap time.Duration
	// Proven: nothing depends on the old signer any more (WaitProof).
	Proven bool
	// Distrust asks, when it is set and differs from the last answered
	// one (State.Distrusted), that every signer trusted now stop being
	// trusted: a rotation generates a signer after the request, and as
	// soon as that one signs everywhere the overlap ends, so that what
	// the others issued stops working. From the phase at rest it starts
	// that rotation. A rotation under way when it comes, whose next
	// signer may be as compromised as the old one, ends its overlap at
	// once, and the rotation that answers the request starts after it.
	Distrust string
}

// distrustPending reports whether in asks for a distrust that s has not
// answered yet.
func distrustPending(s State, in Inputs) bool {
	return in.Distrust != "" && in.Distrust != s.Distrusted
}

// Step returns the step of phase p, and false for a phase k does not have.
func (k Kind) Step(p Phase) (Step, bool) {
	i := slices.IndexFunc(k.Steps, func(s Step) bool { return s.Phase == p })
	if i < 0 {
		return Step{}, false
	}
	return k.Steps[i], true
}

// TrustsOld reports whether the signer being replaced is trusted in p.
func (k Kind) TrustsOld(p Phase) bool {
	s, _ := k.Step(p)
	return s.TrustsOld
}

// Next advances the rotation by at most one phase and returns the new state
// with the actions that enter it. Call it on every pass, perform the
// actions in order, then persist the state whenever it changed.
func (k Kind) Next(s State, in Inputs) (State, []Action) {
	now := in.Now
	if s.Phase == "" {
		// A signer seen for the first time is as new as a rotated one: a
		// request already there is answered by it.
		return State{Phase: k.Steps[0].Phase, Since: now, SignerSince: now, Request: in.Request, Distrusted: in.Distrust}, nil
	}
	step, ok := k.Step(s.Phase)
	if !ok || !in.RolledOut {
		// Parse refuses unknown phases: never guess where a damaged
		// rotation stands.
		return s, nil
	}
	if step.Wait == WaitOverlap && s.RolledOutAt.IsZero() {
		s.RolledOutAt = now
	}
	if !k.waited(step, s, in) {
		return s, nil
	}
	next := s
	next.Phase, next.Since, next.RolledOutAt = step.Next, now, time.Time{}
	if s.Phase == k.Steps[0].Phase {
		next.OldNotAfter = in.SignerNotAfter
		if in.Request != s.Request && in.Request != "" {
			next.Request = in.Request
		}
		next.Distrusting = ""
		if distrustPending(s, in) {
			next.Distrusting = in.Distrust
		}
	}
	if slices.Contains(step.Actions, SwitchSigner) {
		next.SignerSince = now
	}
	if !k.TrustsOld(step.Next) {
		next.OldNotAfter = time.Time{}
		if s.Distrusting != "" {
			next.Distrusted, next.Distrusting = s.Distrusting, ""
		}
	}
	return next, slices.Clone(step.Actions)
}

// waited reports whether what step waits for holds.
func (k Kind) waited(step Step, s State, in Inputs) bool {
	now := in.Now
	switch step.Wait {
	case WaitDue:
		return (in.Request != "" && in.Request != s.Request) || (!in.DueAt.IsZero() && !now.Before(in.DueAt)) || distrustPending(s, in)
	case WaitPropagation:
		return !now.Before(s.Since.Add(in.Propagation))
	case WaitOverlap:
		return !now.Before(s.RolledOutAt.Add(in.Overlap)) || (!s.OldNotAfter.IsZero() && now.After(s.OldNotAfter)) || distrustPending(s, in)
	case WaitProof:
		return in.Proven
	default:
		return true
	}
}

// WakeAt is when the rotation can move without any event: the end of the
// current phase's wait. Zero when only a rollout or a request can move it.
func (k Kind) WakeAt(s State, in Inputs) time.Time {
	step, ok := k.Step(s.Phase)
	if !ok {
		return time.Time{}
	}
	switch step.Wait {
	case WaitDue:
		return in.DueAt
	case WaitPropagation:
		return s.Since.Add(in.Propagation)
	case WaitOverlap:
		if s.RolledOutAt.IsZero() {
			return time.Time{}
		}
		if distrustPending(s, in) {
			return s.RolledOutAt
		}
		at := s.RolledOutAt.Add(in.Overlap)
		if !s.OldNotAfter.IsZero() && s.OldNotAfter.Before(at) {
			at = s.OldNotAfter.Add(time.Second)
		}
		return at
	default:
		return time.Time{}
	}
}

// Encode is the state as JSON, for an annotation of the Secret that holds
// the signer; Request is left to the caller.
func (s State) Encode() (string, error) {
	out, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("encoding the rotation state: %w", err)
	}
	return string(out), nil
}

// Parse decodes what Encode wrote. The empty string is the zero state; a
// phase k does not have is an error, so that a damaged state stops the
// rotation instead of restarting it.
func (k Kind) Parse(encoded string) (State, error) {
	var s State
	if encoded == "" {
		return s, nil
	}
	if err := json.Unmarshal([]byte(encoded), &s); err != nil {
		return State{}, fmt.Errorf("decoding the %s rotation state: %w", k.Name, err)
	}
	if _, ok := k.Step(s.Phase); !ok {
		return State{}, fmt.Errorf("decoding the %s rotation state: unknown phase %q", k.Name, s.Phase)
	}
	return s, nil
}
