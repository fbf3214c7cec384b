package tenants

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/rotation"
)

// encryptionPass is the operator-managed encryption as a pass sees it: the
// material in the encryption Secret, where its rotation stands and what
// this pass found in etcd.
type encryptionPass struct {
	keys  apiserver.EncryptionKeys
	state rotation.State
	// proven: this pass found every stored value of the encrypted
	// resources written with keys.Current's key.
	proven bool
	// progress says what the rotation waits for, for status.
	progress string
	// hibernated: a rotation is due but no apiserver runs to carry it.
	hibernated bool
}

// reencryptSlice bounds the time a pass spends rewriting objects; the next
// pass follows at once and goes on where etcd says it stopped.
const reencryptSlice = 5 * time.Second

// loadEncryption reads the encryption material and where its rotation
// stands, or creates the first key. A new key starts encrypting at once,
// with identity as the old layout: what the tenant stored before (a tenant
// that had no encryption, or an etcd that already holds data) is rewritten
// and proven like after any rotation, before the rotation rests.
func (r *Reconciler) loadEncryption(ctx context.Context, p *pass) error {
	p.enc = nil
	provider, _ := apiserver.EncryptionTarget(p.c.Spec.Encryption)
	if provider == "" {
		return nil // the user's own EncryptionConfiguration
	}
	name := apiserver.EncryptionSecretName(p.cfg.Name)
	request := p.cfg.Annotations[v1alpha1.RotateEncryptionKeyAnnotation]
	existing := &corev1.Secret{}
	err := ownSecrets{r, p.cfg}.Get(ctx, ctrl.ObjectKey{Namespace: p.cfg.Namespace, Name: name}, existing)
	switch {
	case err == nil && len(existing.Data[apiserver.EncryptionKeysKey]) > 0:
		legacy := apiserver.EncryptionLayout{Key: apiserver.EncryptionKey{Provider: provider}, Resources: p.c.Spec.Encryption.Resources}
		if len(legacy.Resources) == 0 {
			legacy.Resources = []string{"secrets"} // what releases before layouts encrypted
		}
		keys, err := apiserver.ParseEncryptionKeys(existing.Data[apiserver.EncryptionKeysKey], legacy)
		if err != nil {
			return fmt.Errorf("reading the encryption keys of Secret %s/%s (restore it from a backup: data encrypted with a lost key is lost): %w", p.cfg.Namespace, name, err)
		}
		state, err := apiserver.RotationStateOf(rotation.EncryptionKey, existing)
		if err != nil {
			return err
		}
		if state.Phase == "" {
			// Written before the key rotated: prove what it encrypted.
			state = rotation.State{Phase: rotation.SignWithNew, Since: p.now, SignerSince: p.now, Request: request}
		}
		p.enc = &encryptionPass{keys: keys, state: state}
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("reading Secret %s/%s: %w", p.cfg.Namespace, name, err)
	default:
		// A Deployment that exists runs apiservers without encryption.
		keys, phase, err := apiserver.NewEncryptionKeys(p.c.Spec.Encryption, p.current.UID != "")
		if err != nil {
			return err
		}
		p.enc = &encryptionPass{keys: keys, state: rotation.State{Phase: phase, Since: p.now, SignerSince: p.now, Request: request}}
	}
	return nil
}

// encryptionRotator runs rotation.EncryptionKey on the pass's material.
func (r *Reconciler) encryptionRotator() rotator {
	return rotator{
		kind: rotation.EncryptionKey,
		state: func(p *pass) *rotation.State {
			if p.enc == nil {
				return nil
			}
			return &p.enc.state
		},
		inputs: func(p *pass, s rotation.State) rotation.Inputs {
			e := p.c.Spec.Encryption
			in := rotation.Inputs{Request: p.cfg.Annotations[v1alpha1.RotateEncryptionKeyAnnotation], Proven: p.enc.proven}
			provider, resources := apiserver.EncryptionTarget(e)
			period := apiserver.DefaultEncryptionRotationPeriod
			if e.RotationPeriod != nil {
				period = e.RotationPeriod.Duration
			}
			switch {
			case !p.enc.keys.Current.Matches(provider, resources):
				in.DueAt = p.now // the spec asks for another layout
			case period > 0 && provider != v1alpha1.EncryptionIdentity && !s.SignerSince.IsZero():
				in.DueAt = s.SignerSince.Add(period)
			}
			if s.Phase == rotation.Stable && *p.c.Spec.MasterCount == 0 {
				// Nothing could rewrite what the old key encrypted: the
				// rotation starts when the tenant wakes.
				due := (in.Request != "" && in.Request != s.Request) || (!in.DueAt.IsZero() && !p.now.Before(in.DueAt))
				p.enc.hibernated = due
				in.Request, in.DueAt = s.Request, time.Time{}
			}
			return in
		},
		bySpec: func(p *pass) bool {
			provider, resources := apiserver.EncryptionTarget(p.c.Spec.Encryption)
			return !p.enc.keys.Current.Matches(provider, resources)
		},
		act: func(p *pass, a rotation.Action) error {
			m := &p.enc.keys
			switch a {
			case rotation.Generate:
				if m.Next == nil {
					provider, resources := apiserver.EncryptionTarget(p.c.Spec.Encryption)
					key, err := apiserver.NewEncryptionKey(provider, m.NextKeyName())
					if err != nil {
						return err
					}
					m.Next = &apiserver.EncryptionLayout{Key: key, Resources: resources}
				}
			case rotation.SwitchSigner:
				if m.Next == nil {
					return fmt.Errorf("switching the encryption key: Secret %s lost its next key; restart the rotation", apiserver.EncryptionSecretName(p.cfg.Name))
				}
				old := m.Current
				m.Current, m.Old, m.Next, m.ProvenAt = *m.Next, &old, nil, nil
			}
			return nil
		},
	}
}

// encryptionObservation is what the Encrypted condition needs.
func (p *pass) encryptionObservation() *encryptionObservation {
	if p.enc == nil {
		return &encryptionObservation{userManaged: true}
	}
	k := p.enc.keys
	current := k.Current
	current.Key.Secret = nil
	incomplete := false
	switch {
	case k.Next != nil:
		incomplete = apiserver.EncryptionIncomplete(k.Current, *k.Next)
	case k.Old != nil:
		incomplete = apiserver.EncryptionIncomplete(*k.Old, k.Current)
	}
	return &encryptionObservation{
		phase: p.enc.state.Phase, current: current, provenAt: k.ProvenAt, progress: p.enc.progress, postponed: p.enc.hibernated,
		incomplete: incomplete,
	}
}

// dropUntrusted drops the layouts the rotation's phase no longer decrypts
// with.
func (e *encryptionPass) dropUntrusted() {
	if e != nil && !rotation.EncryptionKey.TrustsOld(e.state.Phase) {
		e.keys.Old = nil
	}
}
