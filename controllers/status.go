package controllers

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// observations are what one reconcile pass found and did; each condition
// is a small pure function of them.
type observations struct {
	generation int64
	// masterCount is the desired number of apiservers.
	masterCount int32
	// invalid is set when the spec passed admission but cannot work.
	invalid error
	// stepErr is the first failed step, named by failedStep.
	stepErr    error
	failedStep string
	// etcdErr is set when an etcd server did not answer; etcdChecked tells
	// whether etcd was probed at all in this pass.
	etcdErr     error
	etcdChecked bool
	// certsReady is true when every certificate exists and is current;
	// certsMessage says when the first one is due.
	certsReady   bool
	certsMessage string
	// deployment is the apiserver Deployment as last read or applied; nil
	// when it was not reached.
	deployment *appsv1.Deployment
}

func condition(t string, ok bool, reason, message string, generation int64) metav1.Condition {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	return metav1.Condition{Type: t, Status: status, Reason: reason, Message: message, ObservedGeneration: generation}
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

func readyReplicas(d *appsv1.Deployment) int32 {
	if d == nil {
		return 0
	}
	return d.Status.ReadyReplicas
}

// stalledCondition is True when only a spec change can help.
func stalledCondition(o observations) metav1.Condition {
	if o.invalid != nil {
		return condition(v1alpha1.ConditionStalled, true, v1alpha1.ReasonInvalidSpec, o.invalid.Error(), o.generation)
	}
	return condition(v1alpha1.ConditionStalled, false, v1alpha1.ReasonReconciled, "", o.generation)
}

// etcdCondition says whether every etcd server, overrides included,
// answered.
func etcdCondition(o observations) metav1.Condition {
	switch {
	case o.etcdErr != nil:
		return condition(v1alpha1.ConditionEtcdAvailable, false, v1alpha1.ReasonEtcdUnreachable, o.etcdErr.Error(), o.generation)
	case o.etcdChecked:
		return condition(v1alpha1.ConditionEtcdAvailable, true, v1alpha1.ReasonEtcdReachable, "Every etcd server answered", o.generation)
	}
	return condition(v1alpha1.ConditionEtcdAvailable, false, v1alpha1.ReasonProgressing, "etcd has not been checked yet", o.generation)
}

// certificatesCondition says whether every certificate is in place.
func certificatesCondition(o observations) metav1.Condition {
	if o.certsReady {
		return condition(v1alpha1.ConditionCertificatesReady, true, v1alpha1.ReasonCertificatesIssued, o.certsMessage, o.generation)
	}
	return condition(v1alpha1.ConditionCertificatesReady, false, v1alpha1.ReasonProgressing, "Certificates are not issued yet", o.generation)
}

// availableCondition is True when at least one apiserver serves.
func availableCondition(o observations) metav1.Condition {
	switch ready := readyReplicas(o.deployment); {
	case o.masterCount == 0:
		return condition(v1alpha1.ConditionAvailable, false, v1alpha1.ReasonHibernated, "masterCount is 0: no apiserver runs", o.generation)
	case ready > 0:
		return condition(v1alpha1.ConditionAvailable, true, v1alpha1.ReasonReconciled, fmt.Sprintf("%d of %d apiservers ready", ready, o.masterCount), o.generation)
	default:
		return condition(v1alpha1.ConditionAvailable, false, v1alpha1.ReasonReplicasNotReady, fmt.Sprintf("0 of %d apiservers ready", o.masterCount), o.generation)
	}
}

// progressingCondition is True while a rollout or scaling is under way.
func progressingCondition(o observations) metav1.Condition {
	if o.deployment != nil && !rolloutDone(o.deployment) {
		d := o.deployment
		return condition(v1alpha1.ConditionProgressing, true, v1alpha1.ReasonProgressing,
			fmt.Sprintf("Rolling out: %d updated, %d ready of %d", d.Status.UpdatedReplicas, d.Status.ReadyReplicas, *d.Spec.Replicas), o.generation)
	}
	return condition(v1alpha1.ConditionProgressing, false, v1alpha1.ReasonReconciled, "", o.generation)
}

// degradedCondition is True when a step fails, or when the apiservers'
// rollout stopped making progress (its deadline passed: pods crash or do
// not schedule).
func degradedCondition(o observations) metav1.Condition {
	if o.stepErr != nil {
		return condition(v1alpha1.ConditionDegraded, true, v1alpha1.ReasonReconcileError, fmt.Sprintf("%s: %v", o.failedStep, o.stepErr), o.generation)
	}
	if o.deployment != nil {
		for _, c := range o.deployment.Status.Conditions {
			if c.Type == appsv1.DeploymentProgressing && c.Status == "False" && c.Reason == "ProgressDeadlineExceeded" {
				return condition(v1alpha1.ConditionDegraded, true, v1alpha1.ReasonReplicasNotReady,
					fmt.Sprintf("%d of %d apiservers ready and the rollout stopped progressing: %s", readyReplicas(o.deployment), o.masterCount, c.Message), o.generation)
			}
		}
	}
	return condition(v1alpha1.ConditionDegraded, false, v1alpha1.ReasonReconciled, "", o.generation)
}

// readyCondition is True when the control plane is as the spec says:
// every apiserver ready on the current template, etcd reachable,
// certificates current; or hibernated on purpose.
func readyCondition(o observations) metav1.Condition {
	var why []string
	switch {
	case o.invalid != nil:
		return condition(v1alpha1.ConditionReady, false, v1alpha1.ReasonInvalidSpec, o.invalid.Error(), o.generation)
	case o.stepErr != nil:
		return condition(v1alpha1.ConditionReady, false, v1alpha1.ReasonReconcileError, fmt.Sprintf("%s: %v", o.failedStep, o.stepErr), o.generation)
	}
	if o.etcdErr != nil {
		why = append(why, "etcd unreachable")
	}
	if !o.certsReady {
		why = append(why, "certificates not issued")
	}
	if o.masterCount == 0 && len(why) == 0 {
		return condition(v1alpha1.ConditionReady, true, v1alpha1.ReasonHibernated, "Hibernated: masterCount is 0, certificates and data are kept", o.generation)
	}
	if o.masterCount > 0 && !rolloutDone(o.deployment) {
		why = append(why, fmt.Sprintf("%d of %d apiservers ready", readyReplicas(o.deployment), o.masterCount))
	}
	if len(why) > 0 {
		reason := v1alpha1.ReasonProgressing
		if o.etcdErr != nil {
			reason = v1alpha1.ReasonEtcdUnreachable
		}
		return condition(v1alpha1.ConditionReady, false, reason, strings.Join(why, "; "), o.generation)
	}
	return condition(v1alpha1.ConditionReady, true, v1alpha1.ReasonReconciled, fmt.Sprintf("%d apiservers ready", o.masterCount), o.generation)
}

// reconcilingCondition is True while the operator works toward Ready and is
// not stalled (kstatus: abnormal-true).
func reconcilingCondition(o observations) metav1.Condition {
	ready := readyCondition(o)
	if ready.Status == metav1.ConditionTrue || o.invalid != nil {
		return condition(v1alpha1.ConditionReconciling, false, v1alpha1.ReasonReconciled, "", o.generation)
	}
	return condition(v1alpha1.ConditionReconciling, true, ready.Reason, ready.Message, o.generation)
}

// conditions are every condition of the ApiServerConfig, in a fixed order.
func conditions(o observations) []metav1.Condition {
	return []metav1.Condition{
		readyCondition(o), reconcilingCondition(o), stalledCondition(o), certificatesCondition(o),
		etcdCondition(o), availableCondition(o), progressingCondition(o), degradedCondition(o),
	}
}
