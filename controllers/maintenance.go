package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// maintenanceGate is where a pass stands in spec.maintenance's windows, and
// what operator-initiated disruptive work it found waiting for one.
type maintenanceGate struct {
	// configured: the spec has windows; without them nothing waits.
	configured bool
	at         apiserver.MaintenanceTime
	pending    []string
}

// expiryMargin: a rotation whose signer would expire within it of the next
// window starts at once rather than wait for it.
const expiryMargin = 7 * 24 * time.Hour

// placeInMaintenance finds where the pass stands in the tenant's windows.
func (p *pass) placeInMaintenance() error {
	m := p.cfg.Spec.Maintenance
	if m == nil || len(m.Windows) == 0 {
		p.maint = maintenanceGate{}
		return nil
	}
	at, err := apiserver.MaintenanceAt(m, p.now)
	if err != nil {
		return err
	}
	p.maint = maintenanceGate{configured: true, at: at}
	return nil
}

// waitForWindow reports whether disruptive work the operator starts by
// itself (what) waits: outside the maintenance windows, or while the
// tenant is hibernated or its apiservers roll out. It records what waits,
// for status, and brings a pass when the next window opens.
func (p *pass) waitForWindow(what string) bool {
	m := &p.maint
	if !m.configured {
		return false
	}
	busy := p.obs.masterCount == 0 || (p.current.ResourceVersion != "" && !rolloutDone(p.current))
	if m.at.Open && !busy {
		return false
	}
	if m.at.Open {
		what += " (in the open window, once the apiservers are settled)"
		p.requeueWithin(podsGoneRequeue)
	} else {
		p.requeueWithin(m.at.Next.Sub(p.now))
	}
	m.pending = append(m.pending, what)
	return true
}

// maintenanceStatus is status.maintenance as the pass found it.
func (p *pass) maintenanceStatus() *v1alpha1.MaintenanceStatus {
	m := p.maint
	if !m.configured {
		return nil
	}
	next := m.at.Next
	if m.at.Open {
		next = m.at.Opened
	}
	return &v1alpha1.MaintenanceStatus{NextWindow: &metav1.Time{Time: next.UTC()}, Open: m.at.Open, Pending: slices.Clip(m.pending)}
}

// Annotations of the operator's ConfigMap that say from what the running
// pod template was rendered: a template that differs only because the
// operator was upgraded (or its settings changed) waits for a maintenance
// window, while a change of the tenant's own inputs applies at once. They
// are on the ConfigMap, not the Deployment, whose every annotation change
// is a new generation (annotations are copied to its ReplicaSets).
const (
	// templateHashAnnotation is the hash of the pod template as rendered.
	templateHashAnnotation = "controlplane.apiserver-operator.dev/template-hash"
	// inputsAnnotation is the hash of the tenant's inputs it was rendered
	// from (see deploymentInputs).
	inputsAnnotation = "controlplane.apiserver-operator.dev/template-inputs"
)

// templateHash hashes the pod template as rendered.
func templateHash(d *appsv1.Deployment) (string, error) {
	template, err := json.Marshal(d.Spec.Template)
	if err != nil {
		return "", fmt.Errorf("hashing the pod template: %w", err)
	}
	sum := sha256.Sum256(template)
	return hex.EncodeToString(sum[:])[:32], nil
}

// deploymentInputs hashes what the tenant decides, not the operator: the
// spec's generation, the sizing in force, and the content of the files
// kube-apiserver reads only at start (its key material, the users' files,
// the configuration files rendered from them: what the pod template's
// config hash covers, without the command line). Files it re-reads (the
// serving certificate, the CA bundles) are left out, and so is the rest of
// the operator's rendering (flags, probes, images).
func (p *pass) deploymentInputs() string {
	secrets := slices.Clone(p.desired.Secrets)
	configMaps := []*corev1.ConfigMap{p.desired.ConfigMap}
	for _, name := range slices.Sorted(maps.Keys(p.refs.secrets)) {
		secrets = append(secrets, p.refs.secrets[name])
	}
	for _, name := range slices.Sorted(maps.Keys(p.refs.configMaps)) {
		configMaps = append(configMaps, p.refs.configMaps[name])
	}
	files := apiserver.ConfigHash(p.c, nil, apiserver.PodFiles(p.c, apiserver.ObjectsData(secrets, configMaps...)))
	h := sha256.New()
	// Writes to a hash.Hash never fail.
	_, _ = fmt.Fprintf(h, "generation %d\nfiles %s\n", p.cfg.Generation, files)
	if s := p.cfg.Status.CacheSizing; s != nil && s.SizedForNodes != nil && s.SizedForPods != nil {
		_, _ = fmt.Fprintf(h, "sized %d %d\n", *s.SizedForNodes, *s.SizedForPods)
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// operatorTemplateWaits reports whether the Deployment keeps its template
// for now: the rendered one differs from the one that runs although the
// tenant's inputs did not change (an operator upgrade or setting), and no
// window is open. It notes on the desired ConfigMap what the template that
// will run was rendered from.
func (r *ApiServerConfigReconciler) operatorTemplateWaits(ctx context.Context, p *pass) (bool, error) {
	wantTemplate, err := templateHash(p.desired.Deployment)
	if err != nil {
		return false, err
	}
	record := map[string]string{templateHashAnnotation: wantTemplate, inputsAnnotation: p.deploymentInputs()}
	defer func() {
		cm := p.desired.ConfigMap
		if cm.Annotations == nil {
			cm.Annotations = map[string]string{}
		}
		maps.Copy(cm.Annotations, record)
	}()
	if p.current.ResourceVersion == "" || p.templateKept {
		return false, nil
	}
	live := &corev1.ConfigMap{}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(p.desired.ConfigMap), live); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	ran := live.Annotations
	if ran[templateHashAnnotation] == "" || ran[inputsAnnotation] != record[inputsAnnotation] || ran[templateHashAnnotation] == wantTemplate {
		return false, nil
	}
	if !p.waitForWindow("the pod template of the operator's current release and settings") {
		return false, nil
	}
	record[templateHashAnnotation] = ran[templateHashAnnotation]
	return true, nil
}
