package tenants

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/rotation"
)

// kstatusOf is what GitOps tools (Flux, Argo CD's kstatus users) compute
// for cfg.
func kstatusOf(t *testing.T, cfg *v1alpha1.ApiServerConfig) *kstatus.Result {
	t.Helper()
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := kstatus.Compute(&unstructured.Unstructured{Object: u})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// deployment is a Deployment with want replicas of which ready are ready,
// on its current template when current is true.
func deployment(want, ready int32, current bool) *appsv1.Deployment {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: 2}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(want)}}
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: want, UpdatedReplicas: want, ReadyReplicas: ready, AvailableReplicas: ready}
	if !current {
		d.Status.ObservedGeneration = 1
		d.Status.UpdatedReplicas = 0
	}
	return d
}

func TestConditions(t *testing.T) {
	now := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	healthy := observations{generation: 3, masterCount: 3, etcdChecked: true, certsReady: true, deployment: deployment(3, 3, true),
		now: now, stallAfter: DefaultStallAfter, podsLeft: 3}
	failing := func(reason string, since time.Duration) *envFailure {
		return &envFailure{reason: reason, message: "the cause", since: now.Add(-since)}
	}
	type want map[string]string // condition type -> "Status/Reason"
	cases := []struct {
		name string
		mod  func(o *observations)
		want want
		// kstatus is what GitOps tools compute; message, when set, is a
		// part of Ready's message.
		kstatus kstatus.Status
		message string
		// progressing, when set, is a part of Progressing's message.
		progressing string
	}{{
		name: "converged",
		mod:  func(*observations) {},
		want: want{"Ready": "True/Reconciled", "Reconciling": "False/Reconciled", "Stalled": "False/Reconciled", "Available": "True/Reconciled",
			"Progressing": "False/Reconciled", "Degraded": "False/Reconciled", "EtcdAvailable": "True/EtcdReachable", "CertificatesReady": "True/CertificatesIssued"},
		kstatus: kstatus.CurrentStatus,
	}, {
		name:    "rolling out",
		mod:     func(o *observations) { o.deployment = deployment(3, 2, false) },
		want:    want{"Ready": "False/Progressing", "Reconciling": "True/Progressing", "Available": "True/Reconciled", "Progressing": "True/Progressing", "Degraded": "False/Reconciled"},
		kstatus: kstatus.InProgressStatus, message: "2 of 3 apiservers ready",
	}, {
		name: "a surge never counts more apiservers than wanted",
		mod: func(o *observations) {
			o.deployment = deployment(3, 3, true)
			o.deployment.Status.ReadyReplicas, o.deployment.Status.Replicas, o.deployment.Status.UpdatedReplicas = 4, 4, 2
		},
		want:    want{"Ready": "False/Progressing", "Available": "True/Reconciled"},
		kstatus: kstatus.InProgressStatus, message: "3 of 3 apiservers ready, 2 of 3 on the current configuration",
	}, {
		name:    "no apiserver ready yet",
		mod:     func(o *observations) { o.deployment = deployment(3, 0, true) },
		want:    want{"Ready": "False/Progressing", "Available": "False/ReplicasNotReady", "Reconciling": "True/Progressing"},
		kstatus: kstatus.InProgressStatus, message: "0 of 3 apiservers ready",
	}, {
		name: "rollout stuck",
		mod: func(o *observations) {
			o.deployment = deployment(3, 1, true)
			o.deployment.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: "False", Reason: "ProgressDeadlineExceeded",
				Message: `ReplicaSet "t-apiserver-5d" has timed out progressing.`, LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}}
			o.failure = rolloutFailure(o.deployment)
		},
		want:    want{"Ready": "False/ReplicasNotReady", "Degraded": "True/ReplicasNotReady", "Available": "True/Reconciled", "Stalled": "True/ReplicasNotReady"},
		kstatus: kstatus.FailedStatus, message: `The apiservers' rollout stopped progressing: ReplicaSet "t-apiserver-5d" has timed out progressing; 1 of 3 apiservers ready`,
	}, {
		name:    "invalid spec stalls and does not pretend to reconcile",
		mod:     func(o *observations) { o.invalid = errors.New("spec.extraArgs[0].name: unknown flag") },
		want:    want{"Ready": "False/InvalidSpec", "Stalled": "True/InvalidSpec", "Reconciling": "False/Reconciled"},
		kstatus: kstatus.FailedStatus,
	}, {
		name:    "a failed step degrades",
		mod:     func(o *observations) { o.stepErr, o.failedStep = errors.New("conflict"), "Deployment" },
		want:    want{"Ready": "False/ReconcileError", "Degraded": "True/ReconcileError", "Reconciling": "True/ReconcileError"},
		kstatus: kstatus.InProgressStatus,
	}, {
		name:    "etcd unreachable",
		mod:     func(o *observations) { o.etcdErr = errors.New("etcd https://e:2379 did not answer") },
		want:    want{"Ready": "False/EtcdUnreachable", "EtcdAvailable": "False/EtcdUnreachable"},
		kstatus: kstatus.InProgressStatus,
	}, {
		name:    "hibernated is ready on purpose",
		mod:     func(o *observations) { o.masterCount = 0; o.deployment = deployment(0, 0, true); o.podsLeft = 0 },
		want:    want{"Ready": "True/Hibernated", "Available": "False/Hibernated", "Reconciling": "False/Reconciled"},
		kstatus: kstatus.CurrentStatus,
	}, {
		name: "hibernating is not ready while an apiserver pod is left",
		mod: func(o *observations) {
			o.masterCount = 0
			o.deployment = deployment(0, 0, true)
			o.podsLeft = 1
		},
		want:    want{"Ready": "False/Progressing", "Reconciling": "True/Progressing"},
		kstatus: kstatus.InProgressStatus, message: "hibernating: 1 apiserver pods still running",
	}, {
		name: "hibernated with etcd down is not ready",
		mod: func(o *observations) {
			o.masterCount = 0
			o.deployment = deployment(0, 0, true)
			o.etcdErr = errors.New("down")
		},
		want:    want{"Ready": "False/EtcdUnreachable"},
		kstatus: kstatus.InProgressStatus,
	}, {
		name: "an environment failure within its grace period is in progress",
		mod: func(o *observations) {
			o.failure = failing(v1alpha1.ReasonPodUnschedulable, DefaultStallAfter-time.Second)
			o.deployment = deployment(3, 2, false)
		},
		want:    want{"Ready": "False/PodUnschedulable", "Stalled": "False/Reconciled", "Reconciling": "True/PodUnschedulable", "Degraded": "True/PodUnschedulable"},
		kstatus: kstatus.InProgressStatus, message: "the cause; 2 of 3 apiservers ready",
	}, {
		name: "an environment failure past its grace period stalls",
		mod: func(o *observations) {
			o.failure = failing(v1alpha1.ReasonReferenceMissing, DefaultStallAfter)
			o.certsReady, o.etcdChecked = false, false
		},
		want:    want{"Ready": "False/ReferenceMissing", "Stalled": "True/ReferenceMissing", "Reconciling": "False/Reconciled", "Degraded": "True/ReferenceMissing"},
		kstatus: kstatus.FailedStatus, message: "the cause",
	}, {
		name: "etcd unreachable past the grace period stalls, and says since when",
		mod: func(o *observations) {
			o.etcdErr = errors.New("etcd https://e:2379 did not answer")
			o.failure = failing(v1alpha1.ReasonEtcdUnreachable, time.Hour)
		},
		want:    want{"Ready": "False/EtcdUnreachable", "Stalled": "True/EtcdUnreachable", "EtcdAvailable": "False/EtcdUnreachable"},
		kstatus: kstatus.FailedStatus,
	}, {
		name: "an upgrade half way: one apiserver of each version",
		mod: func(o *observations) {
			o.masterCount, o.podsLeft = 2, 3
			o.deployment = deployment(2, 2, false)
			o.versions = versionObservation{running: "v1.36.4", desired: "v1.37.1", counts: []v1alpha1.VersionStatus{
				{Version: "v1.36.4", Replicas: 2, ReadyReplicas: 2}, {Version: "v1.37.1", Replicas: 1, ReadyReplicas: 1}}}
		},
		want:    want{"Ready": "False/Progressing", "Reconciling": "True/Progressing", "Available": "True/Reconciled", "Progressing": "True/Upgrading", "Degraded": "False/Reconciled"},
		kstatus: kstatus.InProgressStatus, message: "upgrading v1.36.4 → v1.37.1: 1 of 2 apiservers upgraded",
		progressing: "Upgrading v1.36.4 → v1.37.1: 1 of 2 apiservers upgraded",
	}, {
		name: "an upgrade is not done while an old apiserver still shuts down",
		mod: func(o *observations) {
			o.masterCount, o.podsLeft = 2, 3
			o.deployment = deployment(2, 2, true)
			o.versions = versionObservation{running: "v1.36.4", desired: "v1.37.1", counts: []v1alpha1.VersionStatus{
				{Version: "v1.36.4", Replicas: 1, ReadyReplicas: 0}, {Version: "v1.37.1", Replicas: 2, ReadyReplicas: 2}}}
		},
		want:    want{"Ready": "False/Progressing", "Progressing": "True/Upgrading"},
		kstatus: kstatus.InProgressStatus, message: "upgrading v1.36.4 → v1.37.1: 2 of 2 apiservers upgraded",
	}, {
		name: "an upgrade held by the pre-flight, within the stall period and the quiet period",
		mod: func(o *observations) {
			o.versions = versionObservation{running: "v1.36.4", desired: "v1.37.1", counts: []v1alpha1.VersionStatus{{Version: "v1.36.4", Replicas: 3, ReadyReplicas: 3}}}
			o.hold = &envFailure{reason: v1alpha1.ReasonRemovedAPIsInUse, message: "upgrade v1.36.4 → v1.37.1 held: the calls", since: now.Add(-DefaultStallAfter), grace: 10 * time.Minute}
		},
		want: want{"Ready": "False/RemovedAPIsInUse", "Reconciling": "True/RemovedAPIsInUse", "Stalled": "False/Reconciled", "Degraded": "True/RemovedAPIsInUse",
			"Progressing": "False/RemovedAPIsInUse", "Available": "True/Reconciled"},
		kstatus: kstatus.InProgressStatus, message: "upgrade v1.36.4 → v1.37.1 held: the calls", progressing: "Upgrade v1.36.4 → v1.37.1 held: the calls",
	}, {
		name: "an upgrade held past the stall period and the quiet period stalls",
		mod: func(o *observations) {
			o.versions = versionObservation{running: "v1.36.4", desired: "v1.37.1", counts: []v1alpha1.VersionStatus{{Version: "v1.36.4", Replicas: 3, ReadyReplicas: 3}}}
			o.hold = &envFailure{reason: v1alpha1.ReasonRemovedAPIsInUse, message: "the calls", since: now.Add(-DefaultStallAfter - 10*time.Minute), grace: 10 * time.Minute}
		},
		want:    want{"Ready": "False/RemovedAPIsInUse", "Stalled": "True/RemovedAPIsInUse", "Degraded": "True/RemovedAPIsInUse"},
		kstatus: kstatus.FailedStatus,
	}, {
		name: "an environment failure during a held upgrade is what Degraded and Ready name",
		mod: func(o *observations) {
			o.versions = versionObservation{running: "v1.36.4", desired: "v1.37.1", counts: []v1alpha1.VersionStatus{{Version: "v1.36.4", Replicas: 3, ReadyReplicas: 3}}}
			o.hold = &envFailure{reason: v1alpha1.ReasonRemovedAPIsInUse, message: "the calls", since: now, grace: 10 * time.Minute}
			o.etcdErr = errors.New("etcd https://e:2379 did not answer")
			o.failure = failing(v1alpha1.ReasonEtcdUnreachable, time.Minute)
		},
		want:    want{"Ready": "False/EtcdUnreachable", "Degraded": "True/EtcdUnreachable", "Progressing": "False/RemovedAPIsInUse", "Stalled": "False/Reconciled"},
		kstatus: kstatus.InProgressStatus,
	}, {
		name: "a hibernated tenant's upgrade waits for it to wake",
		mod: func(o *observations) {
			o.masterCount, o.podsLeft = 0, 0
			o.deployment = deployment(0, 0, true)
			o.versions = versionObservation{running: "v1.36.4", desired: "v1.37.1"}
		},
		want:    want{"Ready": "True/Hibernated", "Progressing": "False/Reconciled", "Available": "False/Hibernated"},
		kstatus: kstatus.CurrentStatus, message: "the upgrade v1.36.4 → v1.37.1 happens when it wakes",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := healthy
			o.deployment = healthy.deployment.DeepCopy()
			tc.mod(&o)
			got := map[string]string{}
			for _, c := range conditions(o) {
				got[c.Type] = string(c.Status) + "/" + c.Reason
				if c.ObservedGeneration != o.generation {
					t.Errorf("%s has observedGeneration %d, want %d", c.Type, c.ObservedGeneration, o.generation)
				}
			}
			for typ, w := range tc.want {
				if got[typ] != w {
					t.Errorf("%s is %s, want %s", typ, got[typ], w)
				}
			}
			ready := meta.FindStatusCondition(conditions(o), v1alpha1.ConditionReady)
			if !strings.Contains(ready.Message, tc.message) {
				t.Errorf("Ready says %q, want it to say %q", ready.Message, tc.message)
			}
			if p := meta.FindStatusCondition(conditions(o), v1alpha1.ConditionProgressing); !strings.Contains(p.Message, tc.progressing) {
				t.Errorf("Progressing says %q, want it to say %q", p.Message, tc.progressing)
			}
			if o.failure != nil {
				if d := meta.FindStatusCondition(conditions(o), v1alpha1.ConditionDegraded); !d.LastTransitionTime.Time.Equal(o.failure.since) {
					t.Errorf("Degraded's lastTransitionTime is %s, want the failure's start %s", d.LastTransitionTime, o.failure.since)
				}
			}
			cfg := &v1alpha1.ApiServerConfig{ObjectMeta: metav1.ObjectMeta{Name: "t", Generation: o.generation}}
			cfg.Status.ObservedGeneration = o.generation
			cfg.Status.Conditions = conditions(o)
			if res := kstatusOf(t, cfg); res.Status != tc.kstatus {
				t.Errorf("kstatus computes %s (%s), want %s", res.Status, res.Message, tc.kstatus)
			}
		})
	}
	if len(conditions(healthy)) != 9 {
		t.Fatalf("want the 9 documented condition types, got %d", len(conditions(healthy)))
	}
}

func TestKstatusBeforeTheFirstStatus(t *testing.T) {
	// A new object reads observedGeneration 0 (the CRD's default) until
	// the operator's first status: in progress, never healthy.
	cfg := &v1alpha1.ApiServerConfig{ObjectMeta: metav1.ObjectMeta{Name: "t", Generation: 1}}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(u, int64(0), "status", "observedGeneration"); err != nil {
		t.Fatal(err)
	}
	res, err := kstatus.Compute(&unstructured.Unstructured{Object: u})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != kstatus.InProgressStatus {
		t.Fatalf("kstatus computes %s for a new object, want InProgress", res.Status)
	}
}

func pod(name string, mod func(p *corev1.Pod)) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Date(2026, 11, 23, 5, 0, 0, 0, time.UTC))}}
	mod(&p)
	return p
}

func TestPodFailure(t *testing.T) {
	notReadySince := metav1.NewTime(time.Date(2026, 11, 23, 5, 10, 0, 0, time.UTC))
	notReady := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: notReadySince}
	waiting := func(reason, message string) func(p *corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{notReady}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "kube-apiserver", Image: "r/kube-apiserver:v1.37.1", RestartCount: 4,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1,
					Message: "I1123 starting\nE1123 error line one\n\nF1123 failed to reach etcd\n"}}}}
		}
	}
	cases := []struct {
		name   string
		pods   []corev1.Pod
		reason string
		since  time.Time
		says   string
	}{{
		name: "running and starting pods are no failure",
		pods: []corev1.Pod{pod("a", func(*corev1.Pod) {}), pod("b", waiting("ContainerCreating", ""))},
	}, {
		name: "unschedulable, since the scheduler said so",
		pods: []corev1.Pod{pod("a", func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
				Message: "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.", LastTransitionTime: notReadySince}}
		})},
		reason: v1alpha1.ReasonPodUnschedulable, since: notReadySince.Time, says: "Pod a cannot be scheduled: 0/1 nodes are available",
	}, {
		name:   "image pull",
		pods:   []corev1.Pod{pod("a", waiting("ImagePullBackOff", "Back-off pulling image"))},
		reason: v1alpha1.ReasonImagePullFailed, since: notReadySince.Time, says: "Pod a cannot pull image r/kube-apiserver:v1.37.1: ImagePullBackOff: Back-off pulling image",
	}, {
		name:   "crash loop, with the end of the log",
		pods:   []corev1.Pod{pod("a", waiting("CrashLoopBackOff", "back-off 40s"))},
		reason: v1alpha1.ReasonCrashLoop, since: notReadySince.Time,
		says: "Pod a: container kube-apiserver is in CrashLoopBackOff (restarted 4 times); it last exited with code 1: " +
			"I1123 starting | E1123 error line one | F1123 failed to reach etcd",
	}, {
		name: "a pod being deleted does not count; the first by name does",
		pods: []corev1.Pod{
			pod("c", waiting("ErrImagePull", "")),
			pod("a", func(p *corev1.Pod) { waiting("CrashLoopBackOff", "")(p); p.DeletionTimestamp = &notReadySince }),
			pod("b", waiting("CreateContainerConfigError", `secret "x" not found`)),
		},
		reason: v1alpha1.ReasonCrashLoop, since: notReadySince.Time, says: "Pod b: container kube-apiserver is in CreateContainerConfigError",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := podFailure(tc.pods)
			if tc.reason == "" {
				if f != nil {
					t.Fatalf("failure %+v, want none", f)
				}
				return
			}
			if f == nil {
				t.Fatalf("no failure, want %s", tc.reason)
			}
			if f.reason != tc.reason || !f.since.Equal(tc.since) || !strings.Contains(f.message, tc.says) {
				t.Fatalf("failure %s since %s: %q; want %s since %s saying %q", f.reason, f.since, f.message, tc.reason, tc.since, tc.says)
			}
		})
	}
}

// TestEncryptedCondition: Encrypted is True only while every value of the
// encrypted resources is known to be encrypted.
func TestEncryptedCondition(t *testing.T) {
	k1 := apiserver.EncryptionKey{Name: "key-1-a", Provider: v1alpha1.EncryptionSecretbox}
	k2 := apiserver.EncryptionKey{Name: "key-2-b", Provider: v1alpha1.EncryptionSecretbox}
	plain := apiserver.EncryptionKey{Name: "identity", Provider: v1alpha1.EncryptionIdentity}
	layout := func(k apiserver.EncryptionKey, r ...string) apiserver.EncryptionLayout {
		return apiserver.EncryptionLayout{Key: k, Resources: r}
	}
	proven := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		obs    *encryptionObservation
		status metav1.ConditionStatus
		reason string
	}{
		{"the user's configuration", &encryptionObservation{userManaged: true}, metav1.ConditionUnknown, v1alpha1.ReasonUserManaged},
		{"proven at rest", &encryptionObservation{phase: rotation.Stable, current: layout(k1, "secrets"), provenAt: &proven}, metav1.ConditionTrue, v1alpha1.ReasonEncryptionProven},
		{"rotating between two keys", &encryptionObservation{phase: rotation.SignWithNew, current: layout(k2, "secrets")}, metav1.ConditionTrue, v1alpha1.ReasonRotationInProgress},
		{"turning on", &encryptionObservation{phase: rotation.SignWithNew, current: layout(k1, "secrets"), incomplete: true}, metav1.ConditionFalse, v1alpha1.ReasonReencrypting},
		{"turning on, the key only decrypting", &encryptionObservation{phase: rotation.TrustNew, current: layout(plain, "secrets"), incomplete: true}, metav1.ConditionFalse, v1alpha1.ReasonReencrypting},
		{"decrypting", &encryptionObservation{phase: rotation.SignWithNew, current: layout(plain, "secrets")}, metav1.ConditionFalse, v1alpha1.ReasonReencrypting},
		{"off", &encryptionObservation{phase: rotation.Stable, current: layout(plain, "secrets")}, metav1.ConditionFalse, v1alpha1.ReasonEncryptionDisabled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := encryptedCondition(observations{generation: 2, encryption: tc.obs})
			if c.Status != tc.status || c.Reason != tc.reason || c.ObservedGeneration != 2 {
				t.Errorf("Encrypted = %s/%s (%q), want %s/%s", c.Status, c.Reason, c.Message, tc.status, tc.reason)
			}
		})
	}
	if !apiserver.EncryptionIncomplete(layout(k1, "secrets"), layout(k2, "secrets", "configmaps")) || apiserver.EncryptionIncomplete(layout(k1, "secrets", "configmaps"), layout(k2, "secrets")) {
		t.Error("adding a resource leaves its values plain until they are rewritten; removing one does not")
	}
}

// TestObserveVersions: status counts the pods of each version by their
// template's annotation, and status.version moves to the new version only
// when no pod of the old one is left, those shutting down included.
func TestObserveVersions(t *testing.T) {
	pod := func(version string, ready, terminating bool) corev1.Pod {
		p := corev1.Pod{}
		if version != "" {
			p.Annotations = map[string]string{apiserver.VersionAnnotation: version}
		}
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
		if terminating {
			p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		}
		return p
	}
	ended := func(p corev1.Pod) corev1.Pod {
		p.Status.Phase = corev1.PodFailed
		p.Status.Reason = "Evicted"
		return p
	}
	done := deployment(2, 2, true)
	done.Spec.Template.Annotations = map[string]string{apiserver.VersionAnnotation: "v1.37.1"}
	cases := []struct {
		name          string
		pods          []corev1.Pod
		d             *appsv1.Deployment
		last, desired string
		running       string
		counts        string
	}{
		{"all old", []corev1.Pod{pod("v1.36.4", true, false), pod("v1.36.4", true, false)}, done, "v1.36.4", "v1.37.1",
			"v1.36.4", "v1.36.4:2/2"},
		{"mixed", []corev1.Pod{pod("v1.37.1", false, false), pod("v1.36.4", true, false), pod("v1.36.4", true, false)}, done, "v1.36.4", "v1.37.1",
			"v1.36.4", "v1.36.4:2/2 v1.37.1:1/0"},
		{"the last old one shutting down", []corev1.Pod{pod("v1.37.1", true, false), pod("v1.36.4", true, true), pod("v1.37.1", true, false)}, done, "v1.36.4", "v1.37.1",
			"v1.36.4", "v1.36.4:1/0 v1.37.1:2/2"},
		{"all new", []corev1.Pod{pod("v1.37.1", true, false), pod("v1.37.1", true, false)}, done, "v1.36.4", "v1.37.1",
			"v1.37.1", "v1.37.1:2/2"},
		{"an evicted old pod runs nothing", []corev1.Pod{pod("v1.37.1", true, false), ended(pod("v1.36.4", false, false)), pod("v1.37.1", true, false)}, done, "v1.36.4", "v1.37.1",
			"v1.37.1", "v1.37.1:2/2"},
		{"an old pod being deleted counts until it is gone, its phase terminal", []corev1.Pod{pod("v1.37.1", true, false), ended(pod("v1.36.4", false, true)), pod("v1.37.1", true, false)}, done, "v1.36.4", "v1.37.1",
			"v1.36.4", "v1.36.4:1/0 v1.37.1:2/2"},
		{"a patch release sorts by version", []corev1.Pod{pod("v1.37.10", true, false), pod("v1.37.9", true, false)}, done, "v1.37.9", "v1.37.10",
			"v1.37.9", "v1.37.9:1/1 v1.37.10:1/1"},
		{"pods from before the annotation run what status said", []corev1.Pod{pod("", true, false), pod("v1.37.1", true, false)}, done, "v1.36.4", "v1.37.1",
			"v1.36.4", "v1.36.4:1/1 v1.37.1:1/1"},
		{"hibernated keeps the version that ran last", nil, deployment(0, 0, true), "v1.36.4", "v1.37.1", "v1.36.4", ""},
		{"a new tenant has no version until a pod runs", nil, deployment(1, 0, false), "", "v1.37.1", "", ""},
		{"no pod in the cache yet, the rollout done", nil, done, "", "v1.37.1", "v1.37.1", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := observeVersions(tc.pods, tc.d, tc.last, tc.desired)
			var counts []string
			for _, c := range got.counts {
				counts = append(counts, fmt.Sprintf("%s:%d/%d", c.Version, c.Replicas, c.ReadyReplicas))
			}
			if got.running != tc.running || strings.Join(counts, " ") != tc.counts {
				t.Errorf("running %q, counts %q; want %q, %q", got.running, strings.Join(counts, " "), tc.running, tc.counts)
			}
		})
	}
}
