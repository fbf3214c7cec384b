package tenants

import (
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// DefaultStallAfter is how long an environment failure (a referenced
// Secret or ConfigMap missing, etcd unreachable, an apiserver pod that
// cannot be scheduled, pull its image or stay up) lasts before the
// ApiServerConfig is marked Stalled, which GitOps tools read as failed. It
// is longer than a slow image pull or a kube-apiserver start, and shorter
// than a Deployment's progress deadline (10 minutes).
const DefaultStallAfter = 3 * time.Minute

// envFailure is a cause outside the operator that keeps the apiservers
// from serving as the spec says: retrying does not help, a change of the
// environment or of the spec does.
type envFailure struct {
	// reason is a condition reason of api/v1alpha1.
	reason  string
	message string
	// since is when the cause was first seen.
	since time.Time
	// grace is added to the stall period: a cause that may go away by
	// itself after it (a held upgrade's quiet period) stalls only past it.
	grace time.Duration
	// atOnce: the cause never goes away by itself (a name conflict), so it
	// stalls as soon as it is seen.
	atOnce bool
}

// stalled reports whether f has lasted stallAfter (and its grace) at now.
func (f *envFailure) stalled(now time.Time, stallAfter time.Duration) bool {
	return f != nil && (f.atOnce || now.Sub(f.since) >= stallAfter+f.grace)
}

// failingSince is when the cause reason was first seen: the
// lastTransitionTime of the Degraded condition it set in an earlier pass,
// or now.
func failingSince(conditions []metav1.Condition, reason string, now time.Time) time.Time {
	if c := meta.FindStatusCondition(conditions, v1alpha1.ConditionDegraded); c != nil &&
		c.Status == metav1.ConditionTrue && c.Reason == reason && !c.LastTransitionTime.IsZero() {
		return c.LastTransitionTime.Time
	}
	return now.Truncate(time.Second) // as the API server keeps it
}

// missingReference says that an object the spec names, or a key of it,
// does not exist.
type missingReference struct {
	ref       apiserver.Reference
	namespace string
	// keys are the missing keys; none when the object itself is missing.
	keys []string
}

func (e *missingReference) Error() string {
	if len(e.keys) == 0 {
		return fmt.Sprintf("%s %s/%s named by %s does not exist: create it with the keys %s",
			e.ref.Kind, e.namespace, e.ref.Name, e.ref.Field, strings.Join(e.ref.Keys, ", "))
	}
	return fmt.Sprintf("%s %s/%s named by %s has no key %s", e.ref.Kind, e.namespace, e.ref.Name, e.ref.Field, strings.Join(e.keys, ", "))
}

// invalidReference is a key of a user's object that holds something the
// pods may not be given: an issuer's CA that is not PEM certificates,
// which kube-apiserver would refuse to start with, or a webhook
// kubeconfig that reads files or runs commands.
type invalidReference struct {
	ref       apiserver.Reference
	namespace string
	key       string
	// err says what is wrong with the key and what to do.
	err error
}

func (e *invalidReference) Error() string {
	return fmt.Sprintf("%s %s/%s named by %s: key %s: %v", e.ref.Kind, e.namespace, e.ref.Name, e.ref.Field, e.key, e.err)
}

// imagePullReasons are the waiting reasons of a container whose image
// cannot be pulled.
var imagePullReasons = []string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}

// containerFailReasons are the waiting reasons of a container that keeps
// exiting or cannot be created.
var containerFailReasons = []string{"CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError", "RunContainerError"}

// podFailure is the first reason, in the order of the pods' names, that an
// apiserver pod cannot become ready by itself: it cannot be scheduled, pull
// its image, or keep its container running. Pods being deleted do not
// count.
func podFailure(pods []corev1.Pod) *envFailure {
	sorted := slices.Clone(pods)
	slices.SortFunc(sorted, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for i := range sorted {
		p := &sorted[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		if f := podFailureOf(p); f != nil {
			return f
		}
	}
	return nil
}

func podFailureOf(p *corev1.Pod) *envFailure {
	// since is when the pod stopped being (or never was) ready.
	since := p.CreationTimestamp.Time
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue && !c.LastTransitionTime.IsZero() {
			since = c.LastTransitionTime.Time
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			at := p.CreationTimestamp.Time
			if !c.LastTransitionTime.IsZero() {
				at = c.LastTransitionTime.Time
			}
			return &envFailure{reason: v1alpha1.ReasonPodUnschedulable, since: at,
				message: fmt.Sprintf("Pod %s cannot be scheduled: %s", p.Name, c.Message)}
		}
	}
	for _, s := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		w := s.State.Waiting
		if w == nil {
			continue
		}
		switch {
		case slices.Contains(imagePullReasons, w.Reason):
			return &envFailure{reason: v1alpha1.ReasonImagePullFailed, since: since,
				message: fmt.Sprintf("Pod %s cannot pull image %s: %s: %s", p.Name, s.Image, w.Reason, w.Message)}
		case slices.Contains(containerFailReasons, w.Reason):
			msg := fmt.Sprintf("Pod %s: container %s is in %s (restarted %d times)", p.Name, s.Name, w.Reason, s.RestartCount)
			if t := s.LastTerminationState.Terminated; t != nil {
				msg += fmt.Sprintf("; it last exited with code %d", t.ExitCode)
				if last := lastLines(t.Message, 3); last != "" {
					msg += ": " + last
				}
			} else if w.Message != "" {
				msg += ": " + w.Message
			}
			return &envFailure{reason: v1alpha1.ReasonCrashLoop, since: since, message: msg}
		}
	}
	return nil
}

// rolloutFailure is the Deployment's own verdict that its rollout stopped
// progressing (its progress deadline passed) when the pods named no cause.
func rolloutFailure(d *appsv1.Deployment) *envFailure {
	if d == nil {
		return nil
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded" {
			return &envFailure{reason: v1alpha1.ReasonReplicasNotReady, since: c.LastTransitionTime.Time,
				message: "The apiservers' rollout stopped progressing: " + strings.TrimSuffix(c.Message, ".")}
		}
	}
	return nil
}

// lastLines is the last n non-empty lines of s, joined by " | ", at most
// 512 bytes: a termination message is the end of the container's log.
func lastLines(s string, n int) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	out := strings.Join(lines[max(0, len(lines)-n):], " | ")
	if len(out) > 512 {
		out = "..." + out[len(out)-509:]
	}
	return out
}
