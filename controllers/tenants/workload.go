package tenants

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/ownership"
)

// +kubebuilder:rbac:groups=apps,resources=replicasets,verbs=get;list;watch

// observeWorkload reads what runs now, from the cache: the Deployment and
// its pods. Status tells it even when a later step stops the pass.
func (r *Reconciler) observeWorkload(ctx context.Context, p *pass) error {
	cfg := p.cfg
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.DeploymentName(cfg.Name)}, p.current); err == nil {
		if err := r.claim(cfg, p.current); err != nil {
			p.current = &appsv1.Deployment{}
			return err
		}
		p.obs.deployment = p.current
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	pods, err := r.tenantPods(ctx, cfg, p.current)
	if err != nil {
		return err
	}
	p.pods = pods
	// A pod that ended and stays (evicted, kept until garbage collection)
	// runs nothing: it neither holds hibernation nor counts as a version.
	p.obs.podsLeft = 0
	for i := range pods {
		if !podEnded(&pods[i]) {
			p.obs.podsLeft++
		}
	}
	p.obs.versions = observeVersions(p.pods, p.obs.deployment, cfg.Status.Version, cfg.Spec.Version)
	return nil
}

// proveLeftovers proves, once, the Secrets of the tenant's names that a
// release before proofs wrote and that this pass does not write (applied
// lists those it wrote): the keys of a feature turned off (encryption the
// user took over, a datastore it left), which would otherwise be taken
// for someone else's when the feature comes back. Each is read from the
// cache (the operator's labels) and proven over that version (an
// optimistic lock: a stale one fails the pass, which is retried), so that
// the proof covers what it holds.
func (r *Reconciler) proveLeftovers(ctx context.Context, cfg *v1alpha1.ApiServerConfig, applied []*corev1.Secret) error {
	written := map[string]bool{}
	for _, s := range applied {
		written[s.Name] = true
	}
	for _, o := range apiserver.OwnedSecrets(cfg.Name) {
		if written[o.Name] {
			continue
		}
		s := &corev1.Secret{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: o.Name}, s); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("reading Secret %s/%s to prove it: %w", cfg.Namespace, o.Name, err)
		}
		if r.Ownership.Proven(cfg.Name, cfg.UID, s) || !ownership.Claim(r.Ownership, cfg, s).Own() {
			continue // proven already, or not the tenant's: left as it is
		}
		patch := client.MergeFromWithOptions(s.DeepCopy(), client.MergeFromWithOptimisticLock{})
		r.Ownership.Prove(cfg.Name, cfg.UID, s)
		if err := r.Client.Patch(ctx, s, patch); err != nil {
			return fmt.Errorf("proving Secret %s/%s, written before proofs: %w", cfg.Namespace, o.Name, err)
		}
	}
	return nil
}

// tenantPods are the apiserver pods of the tenant's Deployment d (its
// own, proven: see claim): those with its labels whose controller is a
// ReplicaSet that d controls. A pod with the labels and another owner, or
// none, is someone else's: its status is not the tenant's, and the
// operator reads nothing from it (audit counters, konnectivity servers,
// metrics). None without a Deployment.
func (r *Reconciler) tenantPods(ctx context.Context, cfg *v1alpha1.ApiServerConfig, d *appsv1.Deployment) ([]corev1.Pod, error) {
	if d == nil || d.UID == "" {
		return nil, nil
	}
	sets := &metav1.PartialObjectMetadataList{}
	sets.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("ReplicaSetList"))
	if err := r.Client.List(ctx, sets, client.InNamespace(cfg.Namespace), client.MatchingLabels(apiserver.SelectorLabels(cfg.Name))); err != nil {
		return nil, fmt.Errorf("listing the ReplicaSets of the apiservers: %w", err)
	}
	ours := map[types.UID]bool{}
	for i := range sets.Items {
		if metav1.IsControlledBy(&sets.Items[i], d) {
			ours[sets.Items[i].UID] = true
		}
	}
	if len(ours) == 0 {
		return nil, nil
	}
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(cfg.Namespace), client.MatchingLabels(apiserver.SelectorLabels(cfg.Name))); err != nil {
		return nil, fmt.Errorf("listing the apiserver pods: %w", err)
	}
	return slices.DeleteFunc(pods.Items, func(pod corev1.Pod) bool {
		owner := metav1.GetControllerOfNoCopy(&pod)
		return owner == nil || owner.Kind != "ReplicaSet" || !ours[owner.UID]
	}), nil
}

// renderObjects renders every object the tenant gets from the pass's
// material, and finds whether the Deployment it renders is the one that
// runs everywhere: what the rotations and the re-encryption wait for.
func (r *Reconciler) renderObjects(_ context.Context, p *pass) error {
	if err := r.render(p); err != nil {
		return err
	}
	hash, err := objectHash(p.desired.Deployment)
	if err != nil {
		return err
	}
	p.templateKept = p.current.Annotations[appliedHashAnnotation] == hash
	p.rolledOut = p.templateKept && podsRunTemplate(p)
	return nil
}

// render renders every object from the pass's material: the one call of
// the builder in a pass, but for a rotation that moved.
func (r *Reconciler) render(p *pass) error {
	m := apiserver.Material{PKI: p.pki.secrets}
	if p.enc != nil {
		m.Encryption = &apiserver.EncryptionMaterial{Keys: p.enc.keys, State: p.enc.state}
	}
	desired, err := apiserver.Desired(p.c, m, apiserver.Environment{
		IssuerCAs: p.issuerCAs, Referenced: p.referencedData(), ImageRepository: r.ImageRepository, EtcdDialerImage: r.EtcdDialerImage,
		KonnectivityServerImage: r.KonnectivityServerImage, KonnectivityAgentImage: r.KonnectivityAgentImage, Egress: r.TenantEgress})
	if err != nil {
		return err
	}
	p.desired = desired
	return nil
}

// referencedData finds the data of the users' objects the pods mount, as
// the References step read them.
func (p *pass) referencedData() apiserver.ObjectData {
	var secrets []*corev1.Secret
	var configMaps []*corev1.ConfigMap
	for _, s := range p.refs.secrets {
		secrets = append(secrets, s)
	}
	for _, cm := range p.refs.configMaps {
		configMaps = append(configMaps, cm)
	}
	return apiserver.ObjectsData(secrets, configMaps...)
}

// applyObjects applies what the pass rendered, each object once: the
// ConfigMap, the Secrets (the pods mount them) and the NetworkPolicy first,
// then the Deployment and its budget, unless an upgrade is held. When the rollout
// does not progress, the pods or the Deployment say why. The Service was
// applied by its own step.
func (r *Reconciler) applyObjects(ctx context.Context, p *pass) error {
	d := p.desired
	// A template that only the operator changed keeps until a window; the
	// ConfigMap records what the running template was rendered from.
	waits, err := r.operatorTemplateWaits(ctx, p)
	if err != nil {
		return err
	}
	if err := r.apply(ctx, p.cfg, d.ConfigMap); err != nil {
		return err
	}
	if err := r.applyEach(ctx, p.cfg, d.Secrets); err != nil {
		return err
	}
	// Before the pods: an apiserver never runs without the isolation its
	// spec asks for.
	if d.NetworkPolicy != nil {
		if err := r.apply(ctx, p.cfg, d.NetworkPolicy); err != nil {
			return err
		}
		p.cfg.Status.NetworkPolicy = apiserver.DesiredNetworkPolicyStatus(p.c)
	} else {
		if err := r.deleteIfOwned(ctx, p.cfg, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: p.cfg.Namespace, Name: apiserver.NetworkPolicyName(p.cfg.Name)}}); err != nil {
			return err
		}
		p.cfg.Status.NetworkPolicy = nil
	}
	p.obs.certsReady = true
	p.obs.certsMessage = fmt.Sprintf("Next renewal at %s", p.pki.nextRenewal.UTC().Format(time.RFC3339))
	if p.held {
		p.done = true // the Deployment keeps its template
		return nil
	}
	if !waits {
		if err := r.apply(ctx, p.cfg, d.Deployment); err != nil {
			return err
		}
		p.current, p.obs.deployment = d.Deployment, d.Deployment
		// The Secrets and the Deployment were all written with their
		// proof, and so are those of its names this pass did not write:
		// nothing written before proofs is taken any more.
		if !p.cfg.Status.ObjectsProven && r.Ownership != nil {
			if err := r.proveLeftovers(ctx, p.cfg, d.Secrets); err != nil {
				return err
			}
			p.cfg.Status.ObjectsProven = true
		}
	}
	if d.PodDisruptionBudget != nil {
		if err := r.apply(ctx, p.cfg, d.PodDisruptionBudget); err != nil {
			return err
		}
	} else if err := r.deleteIfOwned(ctx, p.cfg, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: p.cfg.Namespace, Name: apiserver.DeploymentName(p.cfg.Name)}}); err != nil {
		return err
	}
	// The agents' manifests, for the platform to apply in the tenant:
	// after the workload, which a name taken by someone else's ConfigMap
	// must not hold up.
	if d.KonnectivityAgent != nil {
		if err := r.apply(ctx, p.cfg, d.KonnectivityAgent); err != nil {
			return err
		}
	} else if err := r.deleteIfOwned(ctx, p.cfg, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: p.cfg.Namespace, Name: apiserver.KonnectivityAgentConfigMapName(p.cfg.Name)}}); err != nil {
		return err
	}
	// Without spec.konnectivity, its server's certificates go once no pod
	// mounts them: a client certificate of the tenant's CA kept for
	// nothing is one more to leak (reads of the informer's cache).
	if p.c.Spec.Konnectivity == nil && p.templateKept && p.rolledOut {
		for _, name := range apiserver.KonnectivitySecretNames(p.cfg.Name) {
			if err := r.deleteIfOwned(ctx, p.cfg, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: p.cfg.Namespace, Name: name}}); err != nil {
				return err
			}
		}
	}
	// A tenant that publishes no admin kubeconfig has none left behind:
	// nothing mounts it, so it goes at once.
	if !apiserver.PublishesAdminKubeconfig(p.c) {
		if err := r.deleteIfOwned(ctx, p.cfg, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: p.cfg.Namespace, Name: apiserver.AdminKubeconfigSecretName(p.cfg.Name)}}); err != nil {
			return err
		}
	}
	// Without spec.authorization.authorizers, the Secret of the chain goes
	// once no pod mounts it: it holds copies of the webhooks' credentials.
	if len(p.c.Spec.Authorization.Authorizers) == 0 && p.templateKept && p.rolledOut {
		if err := r.deleteIfOwned(ctx, p.cfg, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: p.cfg.Namespace, Name: apiserver.AuthorizationSecretName(p.cfg.Name)}}); err != nil {
			return err
		}
	}
	return r.observeRollout(ctx, p)
}

// applyEach applies secrets side by side (they do not depend on each
// other: a new tenant's Deployment comes a few round trips sooner).
func (r *Reconciler) applyEach(ctx context.Context, cfg *v1alpha1.ApiServerConfig, secrets []*corev1.Secret) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, s := range secrets {
		g.Go(func() error { return r.apply(gctx, cfg, s) })
	}
	return g.Wait()
}

// observeRollout finds, when the Deployment's rollout does not progress,
// what the pods or the Deployment say about why.
func (r *Reconciler) observeRollout(ctx context.Context, p *pass) error {
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

// currentPods are the pods of d's newest ReplicaSet, the one its rollout
// brings up: the failure of a pod of an older one, which the rollout is
// replacing (the image a user just fixed), says nothing of what comes. The
// ReplicaSets are read from the API server, only when a pod fails during a
// rollout. Without any, every pod counts.
func (r *Reconciler) currentPods(ctx context.Context, d *appsv1.Deployment, pods []corev1.Pod) ([]corev1.Pod, error) {
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

// reportApplied carries into status what was applied, and comes back when
// the first certificate is due, never by polling.
func (r *Reconciler) reportApplied(_ context.Context, p *pass) error {
	st := &p.cfg.Status
	st.Replicas = p.current.Status.Replicas
	st.ReadyReplicas = p.current.Status.ReadyReplicas
	st.Selector = apiserver.Selector(p.cfg.Name)
	st.Endpoint = p.c.Endpoint
	st.AdminKubeconfigSecretName = ""
	if apiserver.PublishesAdminKubeconfig(p.c) {
		st.AdminKubeconfigSecretName = apiserver.AdminKubeconfigSecretName(p.cfg.Name)
	}
	st.CacheSizing = sizingStatus(st.CacheSizing, p.c.Sizing)
	st.Maintenance = p.maintenanceStatus()
	p.requeueWithin(p.pki.nextRenewal.Sub(r.Clock.Now()))
	return nil
}
