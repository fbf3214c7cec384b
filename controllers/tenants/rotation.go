package tenants

import (
	"cmp"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
	"github.com/apiserver-operator/apiserver-operator/apiserver/rotation"
)

// keepUntilExpiry is the overlap of a CA rotation: longer than any CA lives,
// so that a retired CA leaves the bundle when it expires.
const keepUntilExpiry = 200 * 365 * 24 * time.Hour

// DefaultCATrustPropagation is the least time a new CA is trusted before it
// signs (--ca-trust-propagation): kubelet writes the new bundle into the
// apiserver pods at its next sync of them (every minute by default),
// kube-apiserver re-reads its client CA bundle about every minute, and
// clients holding the admin kubeconfig need a moment to fetch it again.
const DefaultCATrustPropagation = 2 * time.Minute

// rotator runs one rotation.Kind on the pass's material: where its state
// lives, what it waits for and what its actions change. A new rotation is
// a new rotator in rotators.
type rotator struct {
	kind rotation.Kind
	// state is where the material keeps the rotation's state; nil when the
	// operator does not rotate this signer for cfg (a user's CA).
	state func(p *pass) *rotation.State
	// inputs are the rotation's inputs besides the time and the rollout.
	inputs func(p *pass, s rotation.State) rotation.Inputs
	// act performs an action on the material.
	act func(p *pass, a rotation.Action) error
	// bySpec, when set, says that a rotation that is due was asked for by
	// the spec (a new encryption layout), not by the signer's age.
	bySpec func(p *pass) bool
}

// dueByAge reports whether a rotation would start now only because its
// signer is due by age (not asked for by an annotation or the spec), and
// its signer does not expire before the next window and a margin: the
// start that spec.maintenance's windows govern.
func (rot rotator) dueByAge(p *pass, s rotation.State, in rotation.Inputs) bool {
	if s.Phase != rotation.Stable || in.DueAt.IsZero() || p.now.Before(in.DueAt) || (in.Request != "" && in.Request != s.Request) || (in.Distrust != "" && in.Distrust != s.Distrusted) {
		return false
	}
	if rot.bySpec != nil && rot.bySpec(p) {
		return false
	}
	return in.SignerNotAfter.IsZero() || p.maint.at.Next.IsZero() || p.maint.at.Next.Add(expiryMargin).Before(in.SignerNotAfter)
}

func (r *Reconciler) rotators() []rotator {
	return []rotator{
		{
			kind: rotation.CA,
			state: func(p *pass) *rotation.State {
				if !p.pki.rotatesCA {
					return nil
				}
				return &p.pki.secrets.CARotation
			},
			inputs: func(p *pass, _ rotation.State) rotation.Inputs {
				signer := p.pki.secrets.CA.Cert()
				return rotation.Inputs{
					DueAt:          pki.RenewAt(signer, p.c.Spec.Certificates.RenewalPercent),
					SignerNotAfter: signer.NotAfter,
					Request:        p.cfg.Annotations[v1alpha1.RotateCAAnnotation],
					Propagation:    cmp.Or(r.CATrustPropagation, DefaultCATrustPropagation),
					Distrust:       p.cfg.Annotations[v1alpha1.RevokeCAAnnotation],
					// Old CAs stay trusted until they expire, as library-go does.
					Overlap: keepUntilExpiry,
				}
			},
			act: actOnCA,
		},
		{
			kind:  rotation.ServiceAccountKey,
			state: func(p *pass) *rotation.State { return &p.pki.secrets.ServiceAccountKeyRotation },
			inputs: func(p *pass, s rotation.State) rotation.Inputs {
				certs := p.c.Spec.Certificates
				in := rotation.Inputs{
					Request: p.cfg.Annotations[v1alpha1.RotateServiceAccountKeyAnnotation],
					// Tokens the old key signed verify until they expire.
					Overlap: certs.RotationOverlap.Duration,
				}
				if d := p.c.Spec.Authentication.ServiceAccount.MaxTokenExpiration; d != nil {
					in.Overlap = max(in.Overlap, d.Duration)
				}
				if p.c.Spec.Konnectivity != nil {
					// The konnectivity agents reconnect with their bound
					// token, which the old key may have signed.
					in.Overlap = max(in.Overlap, apiserver.KonnectivityAgentTokenLifetime)
				}
				if every := certs.ServiceAccountKeyRotationPeriod; every != nil && every.Duration > 0 && !s.SignerSince.IsZero() {
					in.DueAt = s.SignerSince.Add(every.Duration)
				}
				return in
			},
			act: actOnServiceAccountKey,
		},
		r.encryptionRotator(),
	}
}

// actOnCA: a new CA is generated beside the signer, then signs; the leaves
// follow by their renewal, which sees their issuer changed.
func actOnCA(p *pass, a rotation.Action) error {
	s := &p.pki.secrets
	certs := p.c.Spec.Certificates
	switch a {
	case rotation.Generate:
		if s.NextCA == nil {
			next, err := pki.NewSelfSignedCA("kubernetes", certs.KeyAlgorithm, certs.CAValidity.Duration, p.now)
			if err != nil {
				return fmt.Errorf("generating the next CA: %w", err)
			}
			s.NextCA = next
		}
	case rotation.SwitchSigner:
		if s.NextCA == nil {
			return fmt.Errorf("switching the CA: Secret %s lost its next CA; restart the rotation", apiserver.CASecretName(p.cfg.Name))
		}
		p.pki.trustedCAs = append(p.pki.trustedCAs, s.CA.Cert())
		s.CA, s.NextCA = s.NextCA, nil
	}
	return nil
}

// actOnServiceAccountKey: a new key is generated beside the signing key,
// then signs; the old public key stays trusted through the overlap.
func actOnServiceAccountKey(p *pass, a rotation.Action) error {
	s := &p.pki.secrets
	switch a {
	case rotation.Generate:
		if len(s.ServiceAccountNextSigningKey) == 0 {
			key, err := pki.NewServiceAccountKey(p.c.Spec.Certificates.KeyAlgorithm)
			if err != nil {
				return fmt.Errorf("generating the next service-account key: %w", err)
			}
			if s.ServiceAccountNextSigningKey, err = key.PrivateKeyPEM(); err != nil {
				return fmt.Errorf("encoding the next service-account key: %w", err)
			}
		}
	case rotation.SwitchSigner:
		if len(s.ServiceAccountNextSigningKey) == 0 {
			return fmt.Errorf("switching the service-account signer: Secret %s lost its next key; restart the rotation", apiserver.ServiceAccountSecretName(p.cfg.Name))
		}
		// What the signing key signed verifies while the old phase trusts.
		p.pki.trustedServiceAccountKeys = append(append([]byte{}, p.pki.trustedServiceAccountKeys...), s.ServiceAccountPublicKeys...)
		s.ServiceAccountSigningKey, s.ServiceAccountNextSigningKey = s.ServiceAccountNextSigningKey, nil
	}
	return nil
}

// podsGoneRequeue is how soon a pass looks again for the old pods that
// still shut down after a rollout.
const podsGoneRequeue = 2 * time.Second

// podsRunTemplate reports whether every apiserver runs the Deployment's
// template: the Deployment rolled out, and no pod of an older template is
// left, shutting down ones included (they keep serving through their
// shutdown delay, with the configuration they started with).
func podsRunTemplate(p *pass) bool {
	if !rolloutDone(p.current) {
		return false
	}
	want := p.current.Spec.Template.Annotations[apiserver.ConfigHashAnnotation]
	for _, pod := range p.pods {
		if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
			continue // not running (evicted)
		}
		if pod.DeletionTimestamp != nil || pod.Annotations[apiserver.ConfigHashAnnotation] != want {
			return false
		}
	}
	return true
}

// reconcileRotations lets each rotation move, by one phase at most, and
// only once every apiserver runs what the pass rendered, which holds
// everything the previous phase published. A move acts on the material
// only; the objects are then rendered again from it, and the Apply step
// writes each of them once.
func (r *Reconciler) reconcileRotations(_ context.Context, p *pass) error {
	if p.held {
		return nil // the Deployment keeps the template of before the upgrade
	}
	if p.templateKept && rolloutDone(p.current) && !p.rolledOut {
		p.requeueWithin(podsGoneRequeue) // the pods' deletion brings a pass too
	}
	var statuses []v1alpha1.RotationStatus
	moved := false
	for _, rot := range r.rotators() {
		state := rot.state(p)
		if state == nil {
			statuses = append(statuses, v1alpha1.RotationStatus{Name: rot.kind.Name, Phase: string(rotation.Stable)})
			continue
		}
		in := rot.inputs(p, *state)
		in.Now, in.RolledOut = p.now, p.rolledOut
		if rot.dueByAge(p, *state, in) && p.waitForWindow(fmt.Sprintf("the %s rotation, due since %s", rot.kind.Name, in.DueAt.UTC().Format(time.RFC3339))) {
			in.DueAt = time.Time{}
		}
		next, actions := rot.kind.Next(*state, in)
		for _, a := range actions {
			if err := rot.act(p, a); err != nil {
				return fmt.Errorf("rotating the %s: %w", rot.kind.Name, err)
			}
		}
		if len(actions) > 0 {
			r.event(p.cfg, corev1.EventTypeNormal, "Rotation", "Rotate", "Rotation of the %s entered phase %s", rot.kind.Name, next.Phase)
		}
		switch at := rot.kind.WakeAt(next, in); {
		case next != *state:
			// The next phase may wait for no rollout (a CA bundle is
			// re-read, the Deployment does not change) and the Secrets'
			// own events may not come (Retain leaves them without an
			// owner): come back to look.
			p.requeueWithin(rotationRequeue)
		case at.After(p.now):
			// A wait that already holds waits for a rollout, which the
			// Deployment's watch reports.
			p.requeueWithin(at.Sub(p.now))
		}
		moved = moved || next != *state
		*state = next
		st := rotationStatus(rot.kind.Name, next)
		if rot.kind.Name == rotation.EncryptionKey.Name && next.Phase != rotation.Stable {
			st.Message = p.enc.progress
		}
		statuses = append(statuses, st)
	}
	p.cfg.Status.Rotations = statuses
	p.obs.encryption = p.encryptionObservation()
	// Only a move or a proof changes the encryption material (a proof
	// records when it held).
	if !moved && (p.enc == nil || !p.enc.proven) {
		return nil
	}
	p.enc.dropUntrusted()
	if moved {
		if err := p.pki.publishTrust(p.now); err != nil {
			return err
		}
	}
	// The pods start rolling out what the move changed in this pass.
	return r.render(p)
}

func rotationStatus(name string, s rotation.State) v1alpha1.RotationStatus {
	st := v1alpha1.RotationStatus{Name: name, Phase: string(s.Phase)}
	if !s.Since.IsZero() {
		st.Since = &metav1.Time{Time: s.Since.UTC().Truncate(time.Second)}
	}
	return st
}
