package tenants

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/rotation"
)

// paused reports whether the platform paused the tenant
// (v1alpha1.PausedAnnotation).
func paused(cfg *v1alpha1.ApiServerConfig) bool {
	return cfg.Annotations[v1alpha1.PausedAnnotation] == "true"
}

// reportPaused is the whole pass of a paused tenant: it writes nothing but
// the Paused condition, which lists what waits for the tenant to be
// resumed. status.observedGeneration stays at the generation last
// reconciled, so that kstatus (Flux, Argo CD) shows a change made during
// the pause as not yet applied. It comes back when a certificate renewal
// comes due, to say so.
func (r *Reconciler) reportPaused(ctx context.Context, cfg *v1alpha1.ApiServerConfig) (time.Duration, error) {
	now := r.Clock.Now()
	waiting, next := r.waitingWhilePaused(ctx, cfg, now)
	msg := fmt.Sprintf("Paused by the annotation %s=true: the operator writes nothing for this tenant until it is removed", v1alpha1.PausedAnnotation)
	if len(waiting) == 0 {
		msg += "; nothing waits"
	} else {
		msg += "; waiting: " + strings.Join(waiting, "; ")
	}
	before := cfg.DeepCopy()
	wasPaused := meta.IsStatusConditionTrue(cfg.Status.Conditions, v1alpha1.ConditionPaused)
	meta.SetStatusCondition(&cfg.Status.Conditions, v1alpha1.NewCondition(v1alpha1.ConditionPaused, true, v1alpha1.ReasonPaused, msg, cfg.Generation))
	requeue := time.Duration(0)
	if !next.IsZero() {
		requeue = next.Sub(now) + time.Second
	}
	if apiequality.Semantic.DeepEqual(before.Status, cfg.Status) {
		return requeue, nil
	}
	if err := r.Client.Status().Patch(ctx, cfg, client.MergeFrom(before)); err != nil {
		return 0, fmt.Errorf("saying in status that the tenant is paused: %w", err)
	}
	r.remember(before.ResourceVersion, cfg)
	if !wasPaused {
		r.event(cfg, corev1.EventTypeNormal, v1alpha1.ReasonPaused, "Pause", "Paused: the operator writes nothing for this tenant until the annotation %s is removed", v1alpha1.PausedAnnotation)
	}
	return requeue, nil
}

// waitingWhilePaused lists what a pass would do for a paused tenant, as
// far as its status and the Secrets that record the rotations say, and
// when the next certificate renewal comes due (zero: none is ahead).
func (r *Reconciler) waitingWhilePaused(ctx context.Context, cfg *v1alpha1.ApiServerConfig, now time.Time) (waiting []string, next time.Time) {
	if !cfg.DeletionTimestamp.IsZero() {
		waiting = append(waiting, "the deletion of the tenant (its finalizer stays)")
	}
	if g := cfg.Status.ObservedGeneration; g != cfg.Generation {
		waiting = append(waiting, fmt.Sprintf("generation %d of the spec (status describes generation %d)", cfg.Generation, g))
	}
	for _, rot := range []struct {
		kind       rotation.Kind
		annotation string
		secret     string
	}{
		{rotation.CA, v1alpha1.RotateCAAnnotation, apiserver.CASecretName(cfg.Name)},
		{rotation.ServiceAccountKey, v1alpha1.RotateServiceAccountKeyAnnotation, apiserver.ServiceAccountSecretName(cfg.Name)},
		{rotation.EncryptionKey, v1alpha1.RotateEncryptionKeyAnnotation, apiserver.EncryptionSecretName(cfg.Name)},
	} {
		request := cfg.Annotations[rot.annotation]
		if request == "" {
			continue
		}
		holder := &corev1.Secret{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: rot.secret}, holder); err != nil {
			continue // nothing to rotate yet, or not readable: a pass after the pause says
		}
		if state, err := apiserver.RotationStateOf(rot.kind, holder); err == nil && state.Request != request {
			waiting = append(waiting, fmt.Sprintf("the %s rotation requested by %s=%s", rot.kind.Name, rot.annotation, request))
		}
	}
	if revoke := cfg.Annotations[v1alpha1.RevokeCAAnnotation]; revoke != "" && cfg.Spec.Certificates.CASecretName == "" {
		holder := &corev1.Secret{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.CASecretName(cfg.Name)}, holder); err == nil {
			if state, err := apiserver.RotationStateOf(rotation.CA, holder); err == nil && state.Distrusted != revoke {
				waiting = append(waiting, fmt.Sprintf("the revocation of the CA's certificates requested by %s=%s", v1alpha1.RevokeCAAnnotation, revoke))
			}
		}
	}
	for _, rs := range cfg.Status.Rotations {
		if rs.Phase != "" && rs.Phase != string(rotation.Stable) {
			waiting = append(waiting, fmt.Sprintf("the %s rotation, held in phase %s", rs.Name, rs.Phase))
		}
	}
	// CAs are not renewed by a pass (the CA rotation above is how the
	// cluster CA is replaced; a user's CA is the user's).
	cas := []string{apiserver.CASecretName(cfg.Name), apiserver.FrontProxyCASecretName(cfg.Name), apiserver.KonnectivityCASecretName(cfg.Name), cfg.Spec.Certificates.CASecretName}
	for _, c := range cfg.Status.Certificates {
		if c.RenewAfter == nil || slices.Contains(cas, c.Name) {
			continue
		}
		if at := c.RenewAfter.Time; !at.After(now) {
			waiting = append(waiting, fmt.Sprintf("the renewal of the %s certificate (due since %s, expires %s)",
				c.Name, at.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339)))
		} else if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return slices.Clip(waiting), next
}

// clearPaused removes the Paused condition of a tenant resumed while it is
// being deleted (the deletion writes no other status).
func (r *Reconciler) clearPaused(ctx context.Context, cfg *v1alpha1.ApiServerConfig) error {
	if meta.FindStatusCondition(cfg.Status.Conditions, v1alpha1.ConditionPaused) == nil {
		return nil
	}
	before := cfg.DeepCopy()
	meta.RemoveStatusCondition(&cfg.Status.Conditions, v1alpha1.ConditionPaused)
	if err := r.Client.Status().Patch(ctx, cfg, client.MergeFrom(before)); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("saying in status that the tenant is no longer paused: %w", err))
	}
	r.remember(before.ResourceVersion, cfg)
	r.event(cfg, corev1.EventTypeNormal, v1alpha1.ReasonResumed, "Resume", "Resumed: the deletion goes on")
	return nil
}
