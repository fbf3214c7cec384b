package rotation

import (
	"slices"
	"testing"
	"time"
)

var now = time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)

const day = 24 * time.Hour

// TestNext_CA drives the CA's table as the controller feeds it: due at the
// CA's renewal time, trust propagated for a while before the new CA signs,
// the old CA kept until the overlap passed or it expired.
func TestNext_CA(t *testing.T) {
	renewAt := now.Add(80 * day)
	oldNotAfter := now.Add(100 * day)
	base := Inputs{DueAt: renewAt, SignerNotAfter: oldNotAfter, Propagation: 2 * time.Minute, Overlap: 7 * day, RolledOut: true}
	stable := State{Phase: Stable, Since: now, SignerSince: now}
	trustNew := State{Phase: TrustNew, Since: renewAt, SignerSince: now, OldNotAfter: oldNotAfter}
	signing := State{Phase: SignWithNew, Since: renewAt.Add(day), SignerSince: renewAt.Add(day), OldNotAfter: oldNotAfter}
	rolled := signing
	rolled.RolledOutAt = renewAt.Add(2 * day)
	tests := []struct {
		name        string
		state       State
		at          time.Time
		change      func(*Inputs)
		want        State
		wantActions []Action
	}{
		{name: "first observation adopts the signer", at: now, want: stable},
		{name: "first observation answers a request already there", at: now, change: func(in *Inputs) { in.Request = "1" },
			want: State{Phase: Stable, Since: now, SignerSince: now, Request: "1"}},
		{name: "adopted even during a rollout", at: now, change: func(in *Inputs) { in.RolledOut = false }, want: stable},
		{name: "stable before the renewal time", state: stable, at: renewAt.Add(-time.Second), want: stable},
		{name: "renewal time reached: generate and trust a new CA", state: stable, at: renewAt,
			want: State{Phase: TrustNew, Since: renewAt, SignerSince: now, OldNotAfter: oldNotAfter}, wantActions: []Action{Generate}},
		{name: "renewal time reached during a rollout: wait", state: stable, at: renewAt, change: func(in *Inputs) { in.RolledOut = false }, want: stable},
		{name: "a request starts a rotation at once", state: stable, at: now.Add(day), change: func(in *Inputs) { in.Request = "2026-03-02" },
			want:        State{Phase: TrustNew, Since: now.Add(day), SignerSince: now, OldNotAfter: oldNotAfter, Request: "2026-03-02"},
			wantActions: []Action{Generate}},
		{name: "a request already answered starts nothing", state: State{Phase: Stable, Since: now, SignerSince: now, Request: "1"}, at: now.Add(day),
			change: func(in *Inputs) { in.Request = "1" }, want: State{Phase: Stable, Since: now, SignerSince: now, Request: "1"}},
		{name: "a request during a rotation is not answered by it", state: trustNew, at: renewAt.Add(time.Minute), change: func(in *Inputs) { in.Request = "3" }, want: trustNew},
		{name: "new CA trusted for less than the propagation: wait", state: trustNew, at: renewAt.Add(time.Minute), want: trustNew},
		{name: "new CA trusted long enough: sign with it", state: trustNew, at: renewAt.Add(day),
			want: signing, wantActions: []Action{SwitchSigner}},
		{name: "propagation passed but rolling out: wait", state: trustNew, at: renewAt.Add(day), change: func(in *Inputs) { in.RolledOut = false }, want: trustNew},
		{name: "reissued leaves rolling out: wait, the overlap has not started", state: signing, at: renewAt.Add(30 * day),
			change: func(in *Inputs) { in.RolledOut = false }, want: signing},
		{name: "reissued leaves rolled out: the overlap starts", state: signing, at: renewAt.Add(2 * day), want: rolled},
		{name: "overlap not over: keep the old CA", state: rolled, at: renewAt.Add(9*day - time.Second), want: rolled},
		{name: "overlap over: prune the old CA", state: rolled, at: renewAt.Add(9 * day),
			want: State{Phase: PruneOld, Since: renewAt.Add(9 * day), SignerSince: renewAt.Add(day)}},
		{name: "old CA expired before the overlap ended: prune it", state: rolled, at: oldNotAfter.Add(time.Second),
			change: func(in *Inputs) { in.Overlap = 365 * day },
			want:   State{Phase: PruneOld, Since: oldNotAfter.Add(time.Second), SignerSince: renewAt.Add(day)}},
		{name: "pruning rolling out: wait", state: State{Phase: PruneOld, Since: renewAt}, at: renewAt.Add(day),
			change: func(in *Inputs) { in.RolledOut = false }, want: State{Phase: PruneOld, Since: renewAt}},
		{name: "pruning rolled out: stable again", state: State{Phase: PruneOld, Since: renewAt, SignerSince: now}, at: renewAt.Add(day),
			want: State{Phase: Stable, Since: renewAt.Add(day), SignerSince: now}},
		{name: "unknown phase: do nothing", state: State{Phase: "Rotating", Since: now}, at: renewAt, want: State{Phase: "Rotating", Since: now}},

		// Revocation: the old CA stops being trusted as soon as the new
		// one signs everywhere.
		{name: "first observation answers a distrust already there", at: now, change: func(in *Inputs) { in.Distrust = "leak" },
			want: State{Phase: Stable, Since: now, SignerSince: now, Distrusted: "leak"}},
		{name: "a distrust starts a rotation at once, which answers it", state: stable, at: now.Add(day), change: func(in *Inputs) { in.Distrust = "leak" },
			want: State{Phase: TrustNew, Since: now.Add(day), SignerSince: now, OldNotAfter: oldNotAfter, Distrusting: "leak"}, wantActions: []Action{Generate}},
		{name: "a distrust does not shorten the propagation", state: trustNew, at: renewAt.Add(time.Minute), change: func(in *Inputs) { in.Distrust = "leak" }, want: trustNew},
		{name: "a distrust waits for the reissued leaves to roll out", state: signing, at: renewAt.Add(2 * day),
			change: func(in *Inputs) { in.Distrust = "leak"; in.RolledOut = false }, want: signing},
		{name: "the rotation that answers a distrust ends its overlap once its leaves rolled out", state: func() State { s := rolled; s.Distrusting = "leak"; return s }(),
			at: renewAt.Add(2 * day), change: func(in *Inputs) { in.Distrust = "leak" },
			want: State{Phase: PruneOld, Since: renewAt.Add(2 * day), SignerSince: renewAt.Add(day), Distrusted: "leak"}},
		{name: "a distrust during a rotation that started before it ends that overlap, unanswered", state: rolled, at: renewAt.Add(2 * day),
			change: func(in *Inputs) { in.Distrust = "leak" },
			want:   State{Phase: PruneOld, Since: renewAt.Add(2 * day), SignerSince: renewAt.Add(day)}},
		{name: "then the rotation that answers it starts from stable", state: State{Phase: Stable, Since: renewAt.Add(3 * day), SignerSince: renewAt.Add(day)},
			at: renewAt.Add(3 * day), change: func(in *Inputs) { in.Distrust = "leak" },
			want:        State{Phase: TrustNew, Since: renewAt.Add(3 * day), SignerSince: renewAt.Add(day), OldNotAfter: oldNotAfter, Distrusting: "leak"},
			wantActions: []Action{Generate}},
		{name: "a new distrust during the rotation answering another is answered by the next one", state: func() State { s := rolled; s.Distrusting = "leak"; return s }(),
			at: renewAt.Add(2 * day), change: func(in *Inputs) { in.Distrust = "leak-2" },
			want: State{Phase: PruneOld, Since: renewAt.Add(2 * day), SignerSince: renewAt.Add(day), Distrusted: "leak"}},
		{name: "a distrust answered keeps the next rotation's overlap", state: func() State { s := rolled; s.Distrusted = "leak"; return s }(),
			at: renewAt.Add(3 * day), change: func(in *Inputs) { in.Distrust = "leak" }, want: func() State { s := rolled; s.Distrusted = "leak"; return s }()},
		{name: "a distrust answered starts nothing", state: State{Phase: Stable, Since: now, SignerSince: now, Distrusted: "leak"}, at: now.Add(day),
			change: func(in *Inputs) { in.Distrust = "leak" }, want: State{Phase: Stable, Since: now, SignerSince: now, Distrusted: "leak"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := base
			in.Now = tt.at
			if tt.change != nil {
				tt.change(&in)
			}
			got, actions := CA.Next(tt.state, in)
			if got != tt.want {
				t.Errorf("state = %+v\nwant    %+v", got, tt.want)
			}
			if !slices.Equal(actions, tt.wantActions) {
				t.Errorf("actions = %v, want %v", actions, tt.wantActions)
			}
		})
	}
}

// TestNext_ServiceAccountKey: due by the key's age, which counts from when
// it started signing; the old public key kept for the overlap.
func TestNext_ServiceAccountKey(t *testing.T) {
	born := now
	due := born.Add(90 * day)
	in := func(at time.Time, s State, overlap time.Duration) Inputs {
		return Inputs{Now: at, RolledOut: true, DueAt: s.SignerSince.Add(90 * day), Overlap: overlap}
	}
	stable := State{Phase: Stable, Since: born, SignerSince: born}
	switched := State{Phase: SignWithNew, Since: due, SignerSince: due, RolledOutAt: due}
	tests := []struct {
		name        string
		state       State
		in          Inputs
		want        State
		wantActions []Action
	}{
		{name: "key younger than its period", state: stable, in: in(due.Add(-time.Second), stable, day), want: stable},
		{name: "key old enough: trust a new key", state: stable, in: in(due, stable, day),
			want: State{Phase: TrustNew, Since: due, SignerSince: born}, wantActions: []Action{Generate}},
		{name: "no period: never due", state: stable, in: Inputs{Now: due.Add(3650 * day), RolledOut: true}, want: stable},
		{name: "new key trusted everywhere: sign with it (no propagation to wait for)", state: State{Phase: TrustNew, Since: due, SignerSince: born},
			in: in(due.Add(time.Hour), stable, day), want: State{Phase: SignWithNew, Since: due.Add(time.Hour), SignerSince: due.Add(time.Hour)}, wantActions: []Action{SwitchSigner}},
		{name: "old tokens may still be valid: keep the old public key", state: switched, in: in(due.Add(48*time.Hour-time.Second), switched, 48*time.Hour), want: switched},
		{name: "overlap passed: drop the old public key", state: switched, in: in(due.Add(48*time.Hour), switched, 48*time.Hour),
			want: State{Phase: PruneOld, Since: due.Add(48 * time.Hour), SignerSince: due}},
		{name: "the new key's age counts from when it started signing", state: State{Phase: Stable, Since: due.Add(3 * day), SignerSince: due},
			in: in(due.Add(90*day-time.Second), State{SignerSince: due}, day), want: State{Phase: Stable, Since: due.Add(3 * day), SignerSince: due}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, actions := ServiceAccountKey.Next(tt.state, tt.in)
			if got != tt.want {
				t.Errorf("state = %+v\nwant    %+v", got, tt.want)
			}
			if !slices.Equal(actions, tt.wantActions) {
				t.Errorf("actions = %v, want %v", actions, tt.wantActions)
			}
		})
	}
}

// TestNext_EncryptionKey: the new key decrypts everywhere before it
// encrypts anywhere, and the old key stays until the caller proved that no
// stored value needs it, however long that takes.
func TestNext_EncryptionKey(t *testing.T) {
	stable := State{Phase: Stable, Since: now, SignerSince: now}
	reading := State{Phase: TrustNew, Since: now.Add(day), SignerSince: now, Request: "r"}
	writing := State{Phase: SignWithNew, Since: now.Add(day + time.Minute), SignerSince: now.Add(day + time.Minute), Request: "r"}
	tests := []struct {
		name        string
		state       State
		in          Inputs
		want        State
		wantActions []Action
	}{
		{name: "nothing asked", state: stable, in: Inputs{Now: now.Add(day), RolledOut: true}, want: stable},
		{name: "asked: generate a key that only decrypts", state: stable, in: Inputs{Now: now.Add(day), RolledOut: true, Request: "r"},
			want: reading, wantActions: []Action{Generate}},
		{name: "new key not yet everywhere: nobody encrypts with it", state: reading, in: Inputs{Now: now.Add(2 * day)}, want: reading},
		{name: "new key decrypts everywhere: encrypt with it", state: reading, in: Inputs{Now: now.Add(day + time.Minute), RolledOut: true},
			want: writing, wantActions: []Action{SwitchSigner}},
		{name: "no proof: the old key stays, whatever the time", state: writing, in: Inputs{Now: now.Add(3650 * day), RolledOut: true, Overlap: time.Nanosecond}, want: writing},
		{name: "proof but rolling out: wait", state: writing, in: Inputs{Now: now.Add(2 * day), Proven: true}, want: writing},
		{name: "proven: drop the old key", state: writing, in: Inputs{Now: now.Add(2 * day), RolledOut: true, Proven: true},
			want: State{Phase: PruneOld, Since: now.Add(2 * day), SignerSince: now.Add(day + time.Minute), Request: "r"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, actions := EncryptionKey.Next(tt.state, tt.in)
			if got != tt.want {
				t.Errorf("state = %+v\nwant    %+v", got, tt.want)
			}
			if !slices.Equal(actions, tt.wantActions) {
				t.Errorf("actions = %v, want %v", actions, tt.wantActions)
			}
			if at := EncryptionKey.WakeAt(got, tt.in); got.Phase != Stable && !at.IsZero() {
				t.Errorf("%s waits for a rollout or a proof, not a time, but wakes at %v", got.Phase, at)
			}
		})
	}
}

func TestKind_TrustsOld(t *testing.T) {
	for _, k := range []Kind{CA, ServiceAccountKey, EncryptionKey} {
		for phase, want := range map[Phase]bool{Stable: false, TrustNew: true, SignWithNew: true, PruneOld: false, "": false} {
			if got := k.TrustsOld(phase); got != want {
				t.Errorf("%s: TrustsOld(%q) = %v, want %v", k.Name, phase, got, want)
			}
		}
	}
}

func TestKind_WakeAt(t *testing.T) {
	in := Inputs{DueAt: now.Add(80 * day), Propagation: 2 * time.Minute, Overlap: 7 * day}
	tests := []struct {
		name  string
		state State
		want  time.Time
	}{
		{"stable wakes when due", State{Phase: Stable, Since: now}, now.Add(80 * day)},
		{"trust-new wakes when propagated", State{Phase: TrustNew, Since: now}, now.Add(2 * time.Minute)},
		{"sign-with-new waits for a rollout before its overlap", State{Phase: SignWithNew, Since: now}, time.Time{}},
		{"sign-with-new wakes when the overlap is over", State{Phase: SignWithNew, Since: now, RolledOutAt: now.Add(day)}, now.Add(8 * day)},
		{"or just after the old signer expired", State{Phase: SignWithNew, Since: now, RolledOutAt: now.Add(day), OldNotAfter: now.Add(3 * day)}, now.Add(3*day + time.Second)},
		{"prune-old waits for a rollout", State{Phase: PruneOld, Since: now}, time.Time{}},
	}
	distrust := in
	distrust.Distrust = "leak"
	if got, want := CA.WakeAt(State{Phase: SignWithNew, Since: now, RolledOutAt: now.Add(day)}, distrust), now.Add(day); !got.Equal(want) {
		t.Errorf("sign-with-new with a distrust pending: WakeAt = %v, want %v (the rollout)", got, want)
	}
	for _, tt := range tests {
		if got := CA.WakeAt(tt.state, in); !got.Equal(tt.want) {
			t.Errorf("%s: WakeAt = %v, want %v", tt.name, got, tt.want)
		}
		// What wakes the rotation must move it.
		if at := CA.WakeAt(tt.state, in); !at.IsZero() {
			next := in
			next.Now, next.RolledOut = at, true
			if got, _ := CA.Next(tt.state, next); got.Phase == tt.state.Phase {
				t.Errorf("%s: at its wake time the rotation stays in %s", tt.name, got.Phase)
			}
		}
	}
}

func TestKind_Parse(t *testing.T) {
	state := State{Phase: SignWithNew, Since: now, RolledOutAt: now.Add(time.Hour), SignerSince: now, OldNotAfter: now.Add(365 * day), Request: "kept apart"}
	encoded, err := state.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := CA.Parse(encoded)
	if err != nil {
		t.Fatal(err)
	}
	want := state
	want.Request = ""
	if !got.Since.Equal(want.Since) || got.Phase != want.Phase || !got.RolledOutAt.Equal(want.RolledOutAt) ||
		!got.SignerSince.Equal(want.SignerSince) || !got.OldNotAfter.Equal(want.OldNotAfter) || got.Request != "" {
		t.Errorf("round trip: %+v, want %+v", got, want)
	}
	stable, err := State{Phase: Stable, Since: now}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	// The format of the annotations earlier releases wrote.
	if want := `{"phase":"Stable","since":"2026-03-01T12:00:00Z"}`; stable != want {
		t.Errorf("encoded %s, want %s (unset times omitted)", stable, want)
	}
	if got, err := CA.Parse(""); err != nil || got != (State{}) {
		t.Errorf("nothing encoded: %+v, %v; want the zero state", got, err)
	}
	for _, bad := range []string{`{"phase":"Rotating"}`, `{}`, `not json`} {
		if _, err := CA.Parse(bad); err == nil {
			t.Errorf("Parse(%s): no error", bad)
		}
	}
}
