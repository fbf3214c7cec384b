package controllers

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// +kubebuilder:rbac:groups=apps,resources=replicasets,verbs=list

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
	// A pod that ended and stays (evicted, kept until garbage collection)
	// runs nothing: it neither holds hibernation nor counts as a version.
	p.obs.podsLeft = 0
	for i := range pods.Items {
		if !podEnded(&pods.Items[i]) {
			p.obs.podsLeft++
		}
	}
	p.obs.versions = observeVersions(p.pods, p.obs.deployment, cfg.Status.Version, cfg.Spec.Version)
	return nil
}

// applySecrets renders the PKI Secrets and applies them. Only once they
// are applied are the certificates in place.
func (r *ApiServerConfigReconciler) applySecrets(ctx context.Context, p *pass) error {
	secrets, err := apiserver.DesiredPKISecrets(p.c, p.pki.secrets)
	if err != nil {
		return err
	}
	// Kept as rendered: applying writes the server's answer into secrets.
	p.secrets = make([]*corev1.Secret, len(secrets))
	for i, s := range secrets {
		p.secrets[i] = s.DeepCopy()
	}
	if err := r.applyPKISecrets(ctx, p, secrets); err != nil {
		return err
	}
	p.obs.certsReady = true
	p.obs.certsMessage = fmt.Sprintf("Next renewal at %s", p.pki.nextRenewal.UTC().Format(time.RFC3339))
	return nil
}

// applyPKISecrets applies secrets side by side (they do not depend on each
// other: a new tenant's Deployment comes a few round trips sooner).
func (r *ApiServerConfigReconciler) applyPKISecrets(ctx context.Context, p *pass, secrets []*corev1.Secret) error {
	retained := p.c.Spec.Certificates.PKIRetention == "Retain"
	g, gctx := errgroup.WithContext(ctx)
	for _, s := range secrets {
		// A Secret that Retain keeps gets no owner: deleting the
		// ApiServerConfig leaves it.
		owned := !retained || !apiserver.Retainable(p.cfg.Name, s.Name)
		g.Go(func() error { return r.apply(gctx, p.cfg, s, owned) })
	}
	return g.Wait()
}

// reconcileDeployment applies the apiservers' Deployment; when its rollout
// does not progress, the pods or the Deployment say why.
func (r *ApiServerConfigReconciler) reconcileDeployment(ctx context.Context, p *pass) error {
	if err := r.applyDeployment(ctx, p); err != nil {
		return err
	}
	deploy := p.current
	if p.obs.failure != nil || p.obs.masterCount == 0 || rolloutDone(deploy) || deploy.Status.ObservedGeneration < deploy.Generation {
		return nil
	}
	failure := podFailure(p.pods)
	if failure != nil {
		// Only a failing pod costs the read of the ReplicaSets.
		pods, err := r.currentPods(ctx, deploy, p.pods)
		if err != nil {
			return err
		}
		failure = podFailure(pods)
	}
	p.obs.failure = cmp.Or(failure, rolloutFailure(deploy))
	return nil
}

// applyDeployment renders and applies the Deployment, whose pod template
// carries the hash of the command line and of the files read at start,
// from what the pass rendered; p.current becomes the server's answer.
func (r *ApiServerConfigReconciler) applyDeployment(ctx context.Context, p *pass) error {
	args, err := apiserver.Args(p.c)
	if err != nil {
		return err
	}
	deploy, err := apiserver.DesiredDeployment(p.c, args, apiserver.DeploymentInputs{Objects: p.mountedData(), ImageRepository: r.ImageRepository, EtcdDialerImage: r.EtcdDialerImage})
	if err != nil {
		return err
	}
	if err := r.apply(ctx, p.cfg, deploy, true); err != nil {
		return err
	}
	p.current = deploy
	p.obs.deployment = deploy
	return nil
}

// mountedData finds the data of the objects the pods mount: the operator's
// as this pass rendered them, the users' as the References step read them.
func (p *pass) mountedData() apiserver.ObjectData {
	secrets := append([]*corev1.Secret{p.encryption}, p.secrets...)
	configMaps := []*corev1.ConfigMap{p.configMap}
	for _, s := range p.refs.secrets {
		secrets = append(secrets, s)
	}
	for _, cm := range p.refs.configMaps {
		configMaps = append(configMaps, cm)
	}
	return apiserver.ObjectsData(secrets, configMaps...)
}

// currentPods are the pods of d's newest ReplicaSet, the one its rollout
// brings up: the failure of a pod of an older one, which the rollout is
// replacing (the image a user just fixed), says nothing of what comes. The
// ReplicaSets are read from the API server, only when a pod fails during a
// rollout. Without any, every pod counts.
func (r *ApiServerConfigReconciler) currentPods(ctx context.Context, d *appsv1.Deployment, pods []corev1.Pod) ([]corev1.Pod, error) {
	sets := &appsv1.ReplicaSetList{}
	if err := r.APIReader.List(ctx, sets, client.InNamespace(d.Namespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
		return nil, fmt.Errorf("listing the ReplicaSets of Deployment %s: %w", d.Name, err)
	}
	newest, revision := "", int64(-1)
	for _, rs := range sets.Items {
		if !metav1.IsControlledBy(&rs, d) {
			continue
		}
		if n, err := strconv.ParseInt(rs.Annotations["deployment.kubernetes.io/revision"], 10, 64); err == nil && n > revision {
			newest, revision = rs.Name, n
		}
	}
	if newest == "" {
		return pods, nil
	}
	var out []corev1.Pod
	for _, pod := range pods {
		if owner := metav1.GetControllerOf(&pod); owner != nil && owner.Name == newest {
			out = append(out, pod)
		}
	}
	return out, nil
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
	st.Endpoint = p.c.Endpoint
	st.AdminKubeconfigSecretName = apiserver.AdminKubeconfigSecretName(p.cfg.Name)
	st.CacheSizing = sizingStatus(st.CacheSizing, p.c.Sizing)
	p.requeueWithin(p.pki.nextRenewal.Sub(r.Clock.Now()))
	return nil
}
