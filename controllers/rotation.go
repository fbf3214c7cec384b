package controllers

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
)

// Annotations of the CA and service-account Secrets that carry the progress
// of their rotation across reconciles and operator restarts.
const (
	rotationStateAnnotation   = "controlplane.apiserver-operator.dev/rotation"
	rotationTriggerAnnotation = "controlplane.apiserver-operator.dev/rotation-trigger"
)

// keepUntilExpiry is the overlap of a CA rotation: longer than any CA lives,
// so that a retired CA leaves the bundle when it expires.
const keepUntilExpiry = 200 * 365 * 24 * time.Hour

// defaultCATrustPropagation is the least time a new CA is trusted before it
// signs: kube-apiserver re-reads its client CA bundle about every minute,
// and clients holding the admin kubeconfig need a moment to fetch it again.
const defaultCATrustPropagation = 2 * time.Minute

// rotationNames in status.
const (
	caRotationName             = "ca"
	serviceAccountRotationName = "service-account-key"
)

// rotationInputs are what both rotations read.
type rotationInputs struct {
	cfg *v1alpha1.ApiServerConfig
	c   *apiserver.Completed
	now time.Time
	// rolloutComplete is true when the Deployment runs, on every replica,
	// the template that matches the Secrets as they are before this pass.
	rolloutComplete bool
	// existing are the operator's Secrets as they are, by name.
	existing map[string]*corev1.Secret
	// caTrustPropagation is the least time in the TrustNew phase of a CA.
	caTrustPropagation time.Duration
}

// rotationResult says what a rotation changed.
type rotationResult struct {
	status  v1alpha1.RotationStatus
	actions []pki.Action
	// wakeAt is when the rotation may move without any event: the end of
	// a wait; zero when only a rollout or a request can move it.
	wakeAt time.Time
}

// reconcileRotations moves the CA and service-account key rotations, one
// phase at a time and only once the pods run what the previous phase
// published, then renders what the pods will run: their flags, Secrets and
// the hash that rolls them when a file they read only at start changes.
func (r *ApiServerConfigReconciler) reconcileRotations(ctx context.Context, p *pass) error {
	var err error
	if p.args, err = apiserver.Args(p.c); err != nil {
		return err
	}
	hash, err := p.podHash()
	if err != nil {
		return err
	}
	rolledOut := rolloutDone(p.current) && p.current.Spec.Template.Annotations[apiserver.ConfigHashAnnotation] == hash
	wait, err := r.rotate(ctx, p.cfg, p.c, p.pki, p.now, rolledOut)
	if err != nil {
		return err
	}
	if wait > 0 {
		p.requeueWithin(wait)
	}
	p.configHash, err = p.podHash()
	return err
}

// podHash renders the PKI Secrets as they stand and hashes the flags and
// every file the pods read.
func (p *pass) podHash() (string, error) {
	var err error
	if p.secrets, err = apiserver.DesiredPKISecrets(p.c, p.pki.secrets); err != nil {
		return "", err
	}
	return apiserver.ConfigHash(p.args, apiserver.PodFiles(p.c, p.secrets, p.configMap, p.encryption, p.etcd.files)), nil
}

func loadRotation(s *corev1.Secret) (pki.RotationState, string, error) {
	if s == nil {
		return pki.RotationState{}, "", nil
	}
	state, err := pki.ParseRotationState(s.Annotations[rotationStateAnnotation])
	if err != nil {
		return pki.RotationState{}, "", fmt.Errorf("reading the rotation state of Secret %s (fix or remove its %s annotation): %w", s.Name, rotationStateAnnotation, err)
	}
	return state, s.Annotations[rotationTriggerAnnotation], nil
}

func rotationStatus(name string, s pki.RotationState) v1alpha1.RotationStatus {
	st := v1alpha1.RotationStatus{Name: name, Phase: string(s.Phase)}
	if !s.Since.IsZero() {
		st.Since = &metav1.Time{Time: s.Since.UTC().Truncate(time.Second)}
	}
	return st
}

func (p *pkiResult) annotate(secret string, state pki.RotationState, trigger string) error {
	value, err := state.Annotation()
	if err != nil {
		return err
	}
	if p.secrets.Annotations == nil {
		p.secrets.Annotations = map[string]map[string]string{}
	}
	a := map[string]string{rotationStateAnnotation: value}
	if trigger != "" {
		a[rotationTriggerAnnotation] = trigger
	}
	p.secrets.Annotations[secret] = a
	return nil
}

// rotateServiceAccountKey advances the rotation of the service-account
// signing key by at most one phase (pki.NextServiceAccountKeyPhase): a new
// key is first trusted by every apiserver, then signs, and the old public
// key is dropped once the overlap passed, so no token fails on the way.
func rotateServiceAccountKey(in rotationInputs, p *pkiResult) (rotationResult, error) {
	name := apiserver.ServiceAccountSecretName(in.cfg.Name)
	state, handled, err := loadRotation(in.existing[name])
	if err != nil {
		return rotationResult{}, err
	}
	certs := in.c.Spec.Certificates
	policy := pki.ServiceAccountKeyRotationPolicy{Overlap: certs.RotationOverlap.Duration}
	if d := in.c.Spec.Authentication.ServiceAccount.MaxTokenExpiration; d != nil {
		policy.MaxTokenLifetime = d.Duration
	}
	if certs.ServiceAccountKeyRotationPeriod != nil {
		policy.RotateEvery = certs.ServiceAccountKeyRotationPeriod.Duration
	}
	trigger := in.cfg.Annotations[v1alpha1.RotateServiceAccountKeyAnnotation]
	requested := trigger != "" && trigger != handled && state.Phase == pki.PhaseStable
	if requested {
		policy.RotateEvery = time.Nanosecond // due now
	}
	next, actions := pki.NextServiceAccountKeyPhase(state, in.now, in.rolloutComplete, policy)
	if requested && next.Phase == pki.PhaseTrustNew {
		handled = trigger
	}

	s := &p.secrets
	if existing := in.existing[name]; existing != nil {
		s.ServiceAccountNextSigningKey = existing.Data[apiserver.ServiceAccountNextKeyKey]
	}
	for _, a := range actions {
		switch a {
		case pki.ActionGenerate:
			if len(s.ServiceAccountNextSigningKey) == 0 {
				key, err := pki.NewServiceAccountKey(certs.KeyAlgorithm)
				if err != nil {
					return rotationResult{}, fmt.Errorf("generating the next service-account key: %w", err)
				}
				if s.ServiceAccountNextSigningKey, err = key.PrivateKeyPEM(); err != nil {
					return rotationResult{}, fmt.Errorf("encoding the next service-account key: %w", err)
				}
			}
		case pki.ActionSwitchSigner:
			if len(s.ServiceAccountNextSigningKey) == 0 {
				return rotationResult{}, fmt.Errorf("switching the service-account signer: Secret %s lost its next key; restart the rotation", name)
			}
			s.ServiceAccountSigningKey, s.ServiceAccountNextSigningKey = s.ServiceAccountNextSigningKey, nil
		case pki.ActionPublishTrust:
			var keys []crypto.PublicKey
			for _, pem := range [][]byte{s.ServiceAccountNextSigningKey, s.ServiceAccountSigningKey} {
				if len(pem) == 0 {
					continue
				}
				k, err := pki.ParseServiceAccountKey(pem)
				if err != nil {
					return rotationResult{}, fmt.Errorf("reading a service-account key of Secret %s: %w", name, err)
				}
				keys = append(keys, k.Public())
			}
			if s.ServiceAccountPublicKeys, err = pki.PublicKeysPEM(keys...); err != nil {
				return rotationResult{}, fmt.Errorf("publishing the service-account public keys: %w", err)
			}
		case pki.ActionDropOld:
			// PublishTrust, which follows, publishes the signing key only.
		}
	}
	if err := p.annotate(name, next, handled); err != nil {
		return rotationResult{}, err
	}
	res := rotationResult{status: rotationStatus(serviceAccountRotationName, next), actions: actions}
	switch {
	case next.Phase == pki.PhaseSignWithNew && !next.RolledOutAt.IsZero():
		res.wakeAt = next.RolledOutAt.Add(max(policy.Overlap, policy.MaxTokenLifetime))
	case next.Phase == pki.PhaseStable && policy.RotateEvery > 0 && !next.SignerSince.IsZero():
		res.wakeAt = next.SignerSince.Add(policy.RotateEvery)
	}
	return res, nil
}

// rotateCA advances the rotation of the cluster CA by at most one phase
// (pki.NextCAPhase), when the CA reaches its renewal time or on request: the
// new CA is trusted next to the old one, then signs (every leaf is reissued
// by the next pass, since its issuer changed), and the old CA stays in the
// trust bundle until it expires.
func rotateCA(in rotationInputs, p *pkiResult) (rotationResult, error) {
	name := apiserver.CASecretName(in.cfg.Name)
	if in.c.Spec.Certificates.CASecretName != "" {
		// The user's CA is the user's to rotate.
		return rotationResult{status: v1alpha1.RotationStatus{Name: caRotationName, Phase: string(pki.PhaseStable)}}, nil
	}
	state, handled, err := loadRotation(in.existing[name])
	if err != nil {
		return rotationResult{}, err
	}
	certs := in.c.Spec.Certificates
	// Old CAs stay trusted until they expire, as library-go does.
	policy := pki.CARotationPolicy{RenewalPercent: certs.RenewalPercent, Overlap: keepUntilExpiry}
	signer := p.secrets.CA.Cert()
	trigger := in.cfg.Annotations[v1alpha1.RotateCAAnnotation]
	requested := trigger != "" && trigger != handled && state.Phase == pki.PhaseStable
	policy.Now = requested
	rolloutComplete := in.rolloutComplete
	if state.Phase == pki.PhaseTrustNew && in.now.Sub(state.Since) < in.caTrustPropagation {
		rolloutComplete = false
	}
	next, actions := pki.NextCAPhase(state, signer, in.now, rolloutComplete, policy)
	if requested && next.Phase == pki.PhaseTrustNew {
		handled = trigger
	}

	s := &p.secrets
	var nextCA *pki.KeyPair
	if existing := in.existing[name]; existing != nil && len(existing.Data[apiserver.NextCertKey]) > 0 {
		if nextCA, err = pki.ParseKeyPair(existing.Data[apiserver.NextCertKey], existing.Data[apiserver.NextKeyKey]); err != nil {
			return rotationResult{}, fmt.Errorf("reading the next CA of Secret %s: %w", name, err)
		}
	}
	for _, a := range actions {
		switch a {
		case pki.ActionGenerate:
			if nextCA == nil {
				if nextCA, err = pki.NewSelfSignedCA("kubernetes", certs.KeyAlgorithm, certs.CAValidity.Duration, in.now); err != nil {
					return rotationResult{}, fmt.Errorf("generating the next CA: %w", err)
				}
			}
		case pki.ActionSwitchSigner:
			if nextCA == nil {
				return rotationResult{}, fmt.Errorf("switching the CA: Secret %s lost its next CA; restart the rotation", name)
			}
			s.CA, nextCA = nextCA, nil
		case pki.ActionPublishTrust, pki.ActionReissueLeaves, pki.ActionDropOld:
			// The bundle is computed below from what is trusted; leaves
			// are reissued by the next pass (their issuer changed).
		}
	}
	trusted := []*x509.Certificate{s.CA.Cert()}
	if nextCA != nil {
		trusted = append(trusted, nextCA.Cert())
	}
	if next.Phase != pki.PhasePruneOld && next.Phase != pki.PhaseStable {
		// Keep the CAs the bundle trusted (the old signer among them).
		trusted = append(trusted, p.trustedCAs...)
	}
	s.CABundle = pki.TrustBundle(in.now, trusted...)
	s.NextCA = nextCA
	if err := p.annotate(name, next, handled); err != nil {
		return rotationResult{}, err
	}
	res := rotationResult{status: rotationStatus(caRotationName, next), actions: actions}
	switch next.Phase {
	case pki.PhaseTrustNew:
		res.wakeAt = next.Since.Add(in.caTrustPropagation)
	case pki.PhaseSignWithNew:
		res.wakeAt = next.OldNotAfter
	case pki.PhaseStable:
		res.wakeAt = pki.RenewAt(signer, certs.RenewalPercent)
	}
	return res, nil
}

// rotate advances the CA and service-account key rotations and reports
// their phases in status. It returns how soon to come back for them: at
// once after an action (the leaves of a new CA are issued by the next
// pass), at the end of a wait, or 0 when only the Deployment's rollout,
// which its watch reports, can move them.
func (r *ApiServerConfigReconciler) rotate(ctx context.Context, cfg *v1alpha1.ApiServerConfig, c *apiserver.Completed, p *pkiResult, now time.Time, rolledOut bool) (time.Duration, error) {
	in := rotationInputs{cfg: cfg, c: c, now: now, rolloutComplete: rolledOut, existing: map[string]*corev1.Secret{},
		caTrustPropagation: r.CATrustPropagation}
	if in.caTrustPropagation == 0 {
		in.caTrustPropagation = defaultCATrustPropagation
	}
	for _, name := range []string{apiserver.CASecretName(cfg.Name), apiserver.ServiceAccountSecretName(cfg.Name)} {
		s := &corev1.Secret{}
		if err := (ownSecrets{r}).Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: name}, s); err == nil {
			in.existing[name] = s
		} else if !apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("reading Secret %s/%s: %w", cfg.Namespace, name, err)
		}
	}
	ca, err := rotateCA(in, p)
	if err != nil {
		return 0, err
	}
	sa, err := rotateServiceAccountKey(in, p)
	if err != nil {
		return 0, err
	}
	cfg.Status.Rotations = []v1alpha1.RotationStatus{ca.status, sa.status}
	for _, res := range []rotationResult{ca, sa} {
		if len(res.actions) > 0 {
			r.event(cfg, corev1.EventTypeNormal, "Rotation", "Rotate", "Rotation of the %s entered phase %s", res.status.Name, res.status.Phase)
		}
	}
	if len(ca.actions)+len(sa.actions) > 0 {
		return rotationRequeue, nil
	}
	var wait time.Duration
	for _, at := range []time.Time{ca.wakeAt, sa.wakeAt} {
		if !at.IsZero() {
			wait = minPositive(wait, at.Sub(now))
		}
	}
	return wait, nil
}
