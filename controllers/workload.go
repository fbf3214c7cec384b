package controllers

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// observeWorkload reads what runs now, from the cache: the Deployment and
// its pods. Status tells it even when a later step stops the pass.
func (r *ApiServerConfigReconciler) observeWorkload(ctx context.Context, p *pass) error {
	cfg := p.cfg
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.DeploymentName(cfg.Name)}, p.current); err == nil {
		p.obs.deployment = p.current
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(cfg.Namespace), client.MatchingLabels(apiserver.SelectorLabels(cfg.Name))); err != nil {
		return fmt.Errorf("listing the apiserver pods: %w", err)
	}
	p.pods = pods.Items
	p.obs.podsLeft = len(pods.Items)
	return nil
}

// applySecrets applies the PKI Secrets side by side (they do not depend on
// each other: a new tenant's Deployment comes a few round trips sooner).
// Only once they are applied are the certificates in place.
func (r *ApiServerConfigReconciler) applySecrets(ctx context.Context, p *pass) error {
	retained := p.c.Spec.Certificates.PKIRetention == "Retain"
	g, gctx := errgroup.WithContext(ctx)
	for _, s := range p.secrets {
		// A Secret that Retain keeps gets no owner: deleting the
		// ApiServerConfig leaves it.
		owned := !retained || !apiserver.Retainable(p.cfg.Name, s.Name)
		g.Go(func() error { return r.apply(gctx, p.cfg, s, owned) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	p.obs.certsReady = true
	p.obs.certsMessage = fmt.Sprintf("Next renewal at %s", p.pki.nextRenewal.UTC().Format(time.RFC3339))
	return nil
}

// reconcileDeployment applies the apiservers' Deployment; when its rollout
// does not progress, the pods or the Deployment say why.
func (r *ApiServerConfigReconciler) reconcileDeployment(ctx context.Context, p *pass) error {
	deploy, err := apiserver.DesiredDeployment(p.c, p.args, apiserver.DeploymentInputs{ConfigHash: p.configHash, ImageRepository: r.ImageRepository})
	if err != nil {
		return err
	}
	if err := r.apply(ctx, p.cfg, deploy, true); err != nil {
		return err
	}
	p.current = deploy
	p.obs.deployment = deploy
	if p.obs.failure == nil && p.obs.masterCount > 0 && !rolloutDone(deploy) {
		p.obs.failure = cmp.Or(podFailure(p.pods), rolloutFailure(deploy))
	}
	return nil
}

// reconcileDisruptionBudget keeps a PodDisruptionBudget with more than one
// apiserver, and none otherwise.
func (r *ApiServerConfigReconciler) reconcileDisruptionBudget(ctx context.Context, p *pass) error {
	if pdb := apiserver.DesiredPodDisruptionBudget(p.c); pdb != nil {
		return r.apply(ctx, p.cfg, pdb, true)
	}
	return r.deleteIfOwned(ctx, p.cfg, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: p.cfg.Namespace, Name: apiserver.DeploymentName(p.cfg.Name)}})
}

// reportApplied carries into status what was applied, and comes back when
// the first certificate is due, never by polling.
func (r *ApiServerConfigReconciler) reportApplied(_ context.Context, p *pass) error {
	st := &p.cfg.Status
	st.Replicas = p.current.Status.Replicas
	st.ReadyReplicas = p.current.Status.ReadyReplicas
	st.Selector = apiserver.Selector(p.cfg.Name)
	st.Version = p.c.Spec.Version
	st.Endpoint = p.c.Endpoint
	st.AdminKubeconfigSecretName = apiserver.AdminKubeconfigSecretName(p.cfg.Name)
	st.CacheSizing = sizingStatus(st.CacheSizing, p.c.Sizing)
	p.requeueWithin(p.pki.nextRenewal.Sub(r.Clock.Now()))
	return nil
}
