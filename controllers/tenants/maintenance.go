package tenants

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
	"github.com/apiserver-operator/apiserver-operator/apiserver/rotation"
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
	p.wakeForWindows()
	return nil
}

// waitForWindow reports whether disruptive work the operator starts by
// itself (what) waits: outside spec.maintenance's windows, or, in one,
// while the tenant's apiservers roll out (waking up, scaling, another
// change), so that one roll does not start over another. It records what
// waits, for status. The window's opening brings a pass; the end of a
// rollout does too (the Deployment's watch), so nothing polls. A
// hibernated tenant has no pod to roll: nothing waits for it.
func (p *pass) waitForWindow(what string) bool {
	m := &p.maint
	if !m.configured || p.obs.masterCount == 0 {
		return false
	}
	rolling := p.current.ResourceVersion != "" && !rolloutDone(p.current)
	if m.at.Open && !rolling {
		return false
	}
	if m.at.Open {
		what += " (in the open window, once the apiservers' rollout is done)"
	}
	m.pending = append(m.pending, what)
	return true
}

// wakeForWindows brings a pass when the next window opens and when the
// open one closes, so that status.maintenance stays true and what waits
// starts on time.
func (p *pass) wakeForWindows() {
	m := p.maint
	if !m.configured {
		return
	}
	if !m.at.Next.IsZero() {
		p.requeueWithin(m.at.Next.Sub(p.now) + time.Second)
	}
	if m.at.Open {
		p.requeueWithin(m.at.Closes.Sub(p.now) + time.Second)
	}
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
// spec (but for the fields no pod reads: its maintenance windows, its
// deletion policy, its restore, its admin credentials), the sizing in force, and the content of
// the files kube-apiserver reads only at start (its key material, the
// users' files, the configuration files rendered from them: what the pod
// template's config hash covers, without the command line). Files it
// re-reads (the serving certificate, the CA bundles) are left out, and so
// is the rest of the operator's rendering (flags, probes, images).
func (p *pass) deploymentInputs() (string, error) {
	spec := p.cfg.Spec.DeepCopy()
	spec.Maintenance, spec.DeletionPolicy, spec.Restore, spec.AdminCredentials = nil, "", nil, v1alpha1.AdminCredentialsSpec{}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return "", fmt.Errorf("hashing the spec: %w", err)
	}
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
	_, _ = fmt.Fprintf(h, "spec %d\n", len(specJSON))
	_, _ = h.Write(specJSON)
	_, _ = fmt.Fprintf(h, "\nfiles %s\n", files)
	if s := p.cfg.Status.CacheSizing; s != nil && s.SizedForNodes != nil && s.SizedForPods != nil {
		_, _ = fmt.Fprintf(h, "sized %d %d\n", *s.SizedForNodes, *s.SizedForPods)
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// rotationsUnderWay reports whether a rotation is between phases or asked
// for and not started: its next phase waits for the rollout of what the
// pass renders, so an operator's template is not held then (it rolls
// with the rotation's).
func (p *pass) rotationsUnderWay() bool {
	states := []struct {
		s       rotation.State
		request string
	}{
		{p.pki.secrets.ServiceAccountKeyRotation, p.cfg.Annotations[v1alpha1.RotateServiceAccountKeyAnnotation]},
	}
	if p.pki.rotatesCA {
		states = append(states, struct {
			s       rotation.State
			request string
		}{p.pki.secrets.CARotation, p.cfg.Annotations[v1alpha1.RotateCAAnnotation]})
	}
	if p.enc != nil {
		states = append(states, struct {
			s       rotation.State
			request string
		}{p.enc.state, p.cfg.Annotations[v1alpha1.RotateEncryptionKeyAnnotation]})
	}
	if revoke := p.cfg.Annotations[v1alpha1.RevokeCAAnnotation]; p.pki.rotatesCA && revoke != "" && revoke != p.pki.secrets.CARotation.Distrusted {
		return true
	}
	for _, st := range states {
		if (st.s.Phase != "" && st.s.Phase != rotation.Stable) || (st.request != "" && st.request != st.s.Request) {
			return true
		}
	}
	return p.enc != nil && p.enc.hibernated
}

// operatorTemplateWaits reports whether the Deployment keeps its template
// for now: the rendered one differs from the one that runs although the
// tenant's inputs did not change (an operator upgrade or setting), and no
// window is open. It is never held while the running template has not
// rolled out (the operator's new one may be the fix), while a rotation is
// under way or asked for, or while an upgrade is held. It notes on the
// desired ConfigMap what the template that will run was rendered from.
func (r *Reconciler) operatorTemplateWaits(ctx context.Context, p *pass) (bool, error) {
	wantTemplate, err := templateHash(p.desired.Deployment)
	if err != nil {
		return false, err
	}
	inputs, err := p.deploymentInputs()
	if err != nil {
		return false, err
	}
	record := map[string]string{templateHashAnnotation: wantTemplate, inputsAnnotation: inputs}
	defer func() {
		cm := p.desired.ConfigMap
		if cm.Annotations == nil {
			cm.Annotations = map[string]string{}
		}
		maps.Copy(cm.Annotations, record)
	}()
	if p.current.ResourceVersion == "" {
		return false, nil
	}
	live := &corev1.ConfigMap{}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(p.desired.ConfigMap), live); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	ran := live.Annotations
	if p.held {
		// The Deployment keeps the template that runs: so does the record.
		record[templateHashAnnotation], record[inputsAnnotation] = ran[templateHashAnnotation], ran[inputsAnnotation]
		return false, nil
	}
	if p.templateKept || ran[templateHashAnnotation] == "" || ran[inputsAnnotation] != inputs || ran[templateHashAnnotation] == wantTemplate ||
		!rolloutDone(p.current) || p.rotationsUnderWay() {
		return false, nil
	}
	if !p.waitForWindow("the pod template of the operator's current release and settings") {
		return false, nil
	}
	record[templateHashAnnotation] = ran[templateHashAnnotation]
	return true, nil
}
