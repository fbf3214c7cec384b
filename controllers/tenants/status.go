package tenants

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/rotation"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantwatch"
)

// observations are what one reconcile pass found and did; each condition
// is a small pure function of them.
type observations struct {
	generation int64
	// now is when the pass ran; stallAfter is how long an environment
	// failure lasts before it stalls the object.
	now        time.Time
	stallAfter time.Duration
	// masterCount is the desired number of apiservers.
	masterCount int32
	// invalid is set when the spec passed admission but cannot work.
	invalid error
	// stepErr is the first failed step, named by failedStep.
	stepErr    error
	failedStep string
	// failure is the first environment failure the pass found, if any.
	failure *envFailure
	// etcdErr is set when an etcd server did not answer; etcdChecked tells
	// whether etcd was probed at all in this pass.
	etcdErr     error
	etcdChecked bool
	// certsReady is true when every certificate exists and is current;
	// certsMessage says when the first one is due.
	certsReady   bool
	certsMessage string
	// deployment is the apiserver Deployment as last read or applied; nil
	// when there is none.
	deployment *appsv1.Deployment
	// podsLeft counts the apiserver pods that exist, those shutting down
	// included.
	podsLeft int
	// encryption is where encryption at rest stands; nil when the pass
	// did not get to look.
	encryption *encryptionObservation
	// versions are the kube-apiserver versions the pods run.
	versions versionObservation
	// hold is set while the pre-flight holds a minor upgrade: why, since
	// when, and the quiet period as its grace before it stalls.
	hold *envFailure
	// agents is KonnectivityAgentsConnected as decided, with no status
	// when the tenant has no spec.konnectivity (the condition goes); nil
	// when the pass did not get to look.
	agents *tenantwatch.AgentsDecision
	// audit is AuditDelivered as decided, with no status when the tenant
	// has no spec.audit.webhook (the condition goes); nil when the pass
	// did not get to look.
	audit *tenantwatch.AuditDecision
}

// encryptionObservation is what the Encrypted condition reports.
type encryptionObservation struct {
	userManaged bool
	phase       rotation.Phase
	// current is the layout that encrypts (its key's secret left out);
	// incomplete: the rotation adds resources to what is encrypted (or
	// turns encryption on), so some values may still be plain.
	current    apiserver.EncryptionLayout
	incomplete bool
	provenAt   *time.Time
	progress   string
	// postponed: a rotation is due but the tenant is hibernated.
	postponed bool
}

// unobserved reports whether the pass stopped before it looked at what
// condition type t reports: then the condition as last written stands.
func (o observations) unobserved(t string) bool {
	switch t {
	case v1alpha1.ConditionCertificatesReady:
		return !o.certsReady
	case v1alpha1.ConditionEtcdAvailable:
		return !o.etcdChecked
	case v1alpha1.ConditionEncrypted:
		return o.encryption == nil
	case v1alpha1.ConditionKonnectivityAgentsConnected:
		return o.agents == nil
	case v1alpha1.ConditionAuditDelivered:
		return o.audit == nil
	}
	return false
}

// rolloutDone reports whether the Deployment runs its current template
// everywhere, and all its replicas are ready.
func rolloutDone(d *appsv1.Deployment) bool {
	if d == nil || d.Spec.Replicas == nil {
		return false
	}
	want := *d.Spec.Replicas
	s := d.Status
	return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.Replicas == want &&
		s.ReadyReplicas == want && s.AvailableReplicas == want
}

// readyReplicas are the ready apiservers, never more than desired: during
// a surge the Deployment briefly counts one more.
func readyReplicas(d *appsv1.Deployment, desired int32) int32 {
	if d == nil {
		return 0
	}
	return min(d.Status.ReadyReplicas, desired)
}

// stalledCondition is True when only a change of the spec or of the
// environment can help: an invalid spec, or an environment failure that
// lasted the grace period.
func stalledCondition(o observations) metav1.Condition {
	switch {
	case o.invalid != nil:
		return v1alpha1.NewCondition(v1alpha1.ConditionStalled, true, v1alpha1.ReasonInvalidSpec, o.invalid.Error(), o.generation)
	case o.failure.stalled(o.now, o.stallAfter):
		return v1alpha1.NewCondition(v1alpha1.ConditionStalled, true, o.failure.reason,
			fmt.Sprintf("%s (for %s)", o.failure.message, o.now.Sub(o.failure.since).Truncate(time.Second)), o.generation)
	case o.failure == nil && o.hold.stalled(o.now, o.stallAfter):
		return v1alpha1.NewCondition(v1alpha1.ConditionStalled, true, o.hold.reason,
			fmt.Sprintf("%s (held for %s)", o.hold.message, o.now.Sub(o.hold.since).Truncate(time.Second)), o.generation)
	}
	return v1alpha1.NewCondition(v1alpha1.ConditionStalled, false, v1alpha1.ReasonReconciled, "", o.generation)
}

// etcdCondition says whether every etcd server, overrides included,
// answered.
func etcdCondition(o observations) metav1.Condition {
	switch {
	case o.etcdErr != nil:
		return v1alpha1.NewCondition(v1alpha1.ConditionEtcdAvailable, false, v1alpha1.ReasonEtcdUnreachable, o.etcdErr.Error(), o.generation)
	case o.etcdChecked:
		return v1alpha1.NewCondition(v1alpha1.ConditionEtcdAvailable, true, v1alpha1.ReasonEtcdReachable, "Every etcd server answered", o.generation)
	}
	return v1alpha1.NewCondition(v1alpha1.ConditionEtcdAvailable, false, v1alpha1.ReasonProgressing, "etcd has not been checked yet", o.generation)
}

// certificatesCondition says whether every certificate is in place.
func certificatesCondition(o observations) metav1.Condition {
	if o.certsReady {
		return v1alpha1.NewCondition(v1alpha1.ConditionCertificatesReady, true, v1alpha1.ReasonCertificatesIssued, o.certsMessage, o.generation)
	}
	return v1alpha1.NewCondition(v1alpha1.ConditionCertificatesReady, false, v1alpha1.ReasonProgressing, "Certificates are not issued yet", o.generation)
}

// availableCondition is True when at least one apiserver serves.
func availableCondition(o observations) metav1.Condition {
	switch ready := readyReplicas(o.deployment, max(o.masterCount, 1)); {
	case o.masterCount == 0:
		return v1alpha1.NewCondition(v1alpha1.ConditionAvailable, false, v1alpha1.ReasonHibernated, "masterCount is 0: no apiserver runs", o.generation)
	case ready > 0:
		return v1alpha1.NewCondition(v1alpha1.ConditionAvailable, true, v1alpha1.ReasonReconciled, fmt.Sprintf("%d of %d apiservers ready", ready, o.masterCount), o.generation)
	default:
		return v1alpha1.NewCondition(v1alpha1.ConditionAvailable, false, v1alpha1.ReasonReplicasNotReady, fmt.Sprintf("0 of %d apiservers ready", o.masterCount), o.generation)
	}
}

// rolloutMessage says how far the apiservers are, counts capped at the
// desired number.
func rolloutMessage(o observations) string {
	if o.versions.upgrading() {
		return upgradeMessage(o)
	}
	d := o.deployment
	if d == nil {
		return fmt.Sprintf("0 of %d apiservers ready", o.masterCount)
	}
	ready := readyReplicas(d, o.masterCount)
	updated := min(d.Status.UpdatedReplicas, o.masterCount)
	if updated == o.masterCount || d.Status.ObservedGeneration < d.Generation {
		return fmt.Sprintf("%d of %d apiservers ready", ready, o.masterCount)
	}
	return fmt.Sprintf("%d of %d apiservers ready, %d of %d on the current configuration", ready, o.masterCount, updated, o.masterCount)
}

// progressingCondition is True while a rollout or scaling is under way.
func progressingCondition(o observations) metav1.Condition {
	if o.hold != nil {
		return v1alpha1.NewCondition(v1alpha1.ConditionProgressing, false, o.hold.reason, capitalize(o.hold.message), o.generation)
	}
	if o.masterCount > 0 && o.versions.upgrading() {
		return v1alpha1.NewCondition(v1alpha1.ConditionProgressing, true, v1alpha1.ReasonUpgrading, capitalize(upgradeMessage(o)), o.generation)
	}
	if o.deployment != nil && !rolloutDone(o.deployment) {
		return v1alpha1.NewCondition(v1alpha1.ConditionProgressing, true, v1alpha1.ReasonProgressing, "Rolling out: "+rolloutMessage(o), o.generation)
	}
	return v1alpha1.NewCondition(v1alpha1.ConditionProgressing, false, v1alpha1.ReasonReconciled, "", o.generation)
}

// degradedCondition is True when a step fails or an environment failure
// holds (since when it holds is its lastTransitionTime), the apiservers'
// rollout that stopped progressing among them.
func degradedCondition(o observations) metav1.Condition {
	if o.stepErr != nil {
		return v1alpha1.NewCondition(v1alpha1.ConditionDegraded, true, v1alpha1.ReasonReconcileError, fmt.Sprintf("%s: %v", o.failedStep, o.stepErr), o.generation)
	}
	if f := cmp.Or(o.failure, o.hold); f != nil {
		c := v1alpha1.NewCondition(v1alpha1.ConditionDegraded, true, f.reason, f.message, o.generation)
		c.LastTransitionTime = metav1.NewTime(f.since)
		return c
	}
	return v1alpha1.NewCondition(v1alpha1.ConditionDegraded, false, v1alpha1.ReasonReconciled, "", o.generation)
}

// readyCondition is True when the control plane is as the spec says:
// every apiserver ready on the current template, etcd reachable,
// certificates current; or hibernated on purpose, with no apiserver pod
// left.
func readyCondition(o observations) metav1.Condition {
	switch {
	case o.invalid != nil:
		return v1alpha1.NewCondition(v1alpha1.ConditionReady, false, v1alpha1.ReasonInvalidSpec, o.invalid.Error(), o.generation)
	case o.stepErr != nil:
		return v1alpha1.NewCondition(v1alpha1.ConditionReady, false, v1alpha1.ReasonReconcileError, fmt.Sprintf("%s: %v", o.failedStep, o.stepErr), o.generation)
	}
	var why []string
	reason := v1alpha1.ReasonProgressing
	if f := cmp.Or(o.failure, o.hold); f != nil {
		why = append(why, f.message)
		reason = f.reason
	} else if o.etcdErr != nil {
		why = append(why, "etcd unreachable")
		reason = v1alpha1.ReasonEtcdUnreachable
	}
	if !o.certsReady && len(why) == 0 {
		why = append(why, "certificates not issued")
	}
	if o.masterCount == 0 {
		if len(why) == 0 && o.podsLeft == 0 {
			msg := "Hibernated: masterCount is 0, certificates and data are kept"
			if o.versions.upgrading() {
				msg += fmt.Sprintf("; the upgrade %s → %s happens when it wakes", o.versions.running, o.versions.desired)
			}
			return v1alpha1.NewCondition(v1alpha1.ConditionReady, true, v1alpha1.ReasonHibernated, msg, o.generation)
		}
		if o.podsLeft > 0 {
			why = append(why, fmt.Sprintf("hibernating: %d apiserver pods still running", o.podsLeft))
		}
	} else if o.hold == nil && (!rolloutDone(o.deployment) || o.versions.upgrading()) {
		why = append(why, rolloutMessage(o))
	}
	if len(why) > 0 {
		return v1alpha1.NewCondition(v1alpha1.ConditionReady, false, reason, strings.Join(why, "; "), o.generation)
	}
	return v1alpha1.NewCondition(v1alpha1.ConditionReady, true, v1alpha1.ReasonReconciled, fmt.Sprintf("%d apiservers ready", o.masterCount), o.generation)
}

// reconcilingCondition is True while the operator works toward Ready and is
// not stalled (kstatus: abnormal-true).
func reconcilingCondition(o observations) metav1.Condition {
	ready := readyCondition(o)
	if ready.Status == metav1.ConditionTrue || stalledCondition(o).Status == metav1.ConditionTrue {
		return v1alpha1.NewCondition(v1alpha1.ConditionReconciling, false, v1alpha1.ReasonReconciled, "", o.generation)
	}
	return v1alpha1.NewCondition(v1alpha1.ConditionReconciling, true, ready.Reason, ready.Message, o.generation)
}

// encryptedCondition says whether what is stored is encrypted, as far as
// the operator proved it.
func encryptedCondition(o observations) metav1.Condition {
	e := o.encryption
	if e == nil || e.userManaged {
		c := v1alpha1.NewCondition(v1alpha1.ConditionEncrypted, false, v1alpha1.ReasonUserManaged,
			"spec.encryption.configSecretName: the user's EncryptionConfiguration, neither rotated nor proven by the operator", o.generation)
		c.Status = metav1.ConditionUnknown
		return c
	}
	what := fmt.Sprintf("%s encrypted with %s key %s", strings.Join(e.current.Resources, ", "), e.current.Key.Provider, e.current.Key.Name)
	switch {
	case e.incomplete:
		msg := fmt.Sprintf("Encrypting what is stored in plain text (phase %s)", e.phase)
		if e.progress != "" {
			msg += ": " + e.progress
		}
		return v1alpha1.NewCondition(v1alpha1.ConditionEncrypted, false, v1alpha1.ReasonReencrypting, msg, o.generation)
	case e.current.Key.Provider == v1alpha1.EncryptionIdentity && e.phase == rotation.Stable:
		return v1alpha1.NewCondition(v1alpha1.ConditionEncrypted, false, v1alpha1.ReasonEncryptionDisabled, "spec.encryption.provider is identity: resources are stored in plain text", o.generation)
	case e.current.Key.Provider == v1alpha1.EncryptionIdentity:
		return v1alpha1.NewCondition(v1alpha1.ConditionEncrypted, false, v1alpha1.ReasonReencrypting, "Decrypting (spec.encryption.provider is identity): "+e.progress, o.generation)
	case e.phase != rotation.Stable:
		msg := fmt.Sprintf("Rotating the encryption key (phase %s)", e.phase)
		if e.progress != "" {
			msg += ": " + e.progress
		}
		return v1alpha1.NewCondition(v1alpha1.ConditionEncrypted, true, v1alpha1.ReasonRotationInProgress, msg, o.generation)
	}
	msg := what
	if e.provenAt != nil {
		msg += fmt.Sprintf(", every stored value proven in etcd at %s", e.provenAt.UTC().Format(time.RFC3339))
	}
	if e.postponed {
		msg += "; a rotation is due and starts when the tenant wakes (masterCount is 0)"
	}
	return v1alpha1.NewCondition(v1alpha1.ConditionEncrypted, true, v1alpha1.ReasonEncryptionProven, msg, o.generation)
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// conditions are every condition of the ApiServerConfig, in a fixed order.
func conditions(o observations) []metav1.Condition {
	out := []metav1.Condition{
		readyCondition(o), reconcilingCondition(o), stalledCondition(o), certificatesCondition(o),
		etcdCondition(o), availableCondition(o), progressingCondition(o), degradedCondition(o),
		encryptedCondition(o),
	}
	if o.agents != nil && o.agents.Status != "" {
		out = append(out, agentsCondition(*o.agents, o.generation))
	}
	if o.audit != nil && o.audit.Status != "" {
		out = append(out, auditCondition(*o.audit, o.generation))
	}
	return out
}
