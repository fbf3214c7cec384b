package controllers

import (
	"errors"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

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
	healthy := observations{generation: 3, masterCount: 3, etcdChecked: true, certsReady: true, deployment: deployment(3, 3, true)}
	type want map[string]string // condition type -> "Status/Reason"
	cases := []struct {
		name string
		mod  func(o *observations)
		want want
	}{{
		name: "converged",
		mod:  func(*observations) {},
		want: want{"Ready": "True/Reconciled", "Reconciling": "False/Reconciled", "Stalled": "False/Reconciled", "Available": "True/Reconciled",
			"Progressing": "False/Reconciled", "Degraded": "False/Reconciled", "EtcdAvailable": "True/EtcdReachable", "CertificatesReady": "True/CertificatesIssued"},
	}, {
		name: "rolling out",
		mod:  func(o *observations) { o.deployment = deployment(3, 2, false) },
		want: want{"Ready": "False/Progressing", "Reconciling": "True/Progressing", "Available": "True/Reconciled", "Progressing": "True/Progressing", "Degraded": "False/Reconciled"},
	}, {
		name: "no apiserver ready yet",
		mod:  func(o *observations) { o.deployment = deployment(3, 0, true) },
		want: want{"Ready": "False/Progressing", "Available": "False/ReplicasNotReady", "Reconciling": "True/Progressing"},
	}, {
		name: "rollout stuck",
		mod: func(o *observations) {
			o.deployment = deployment(3, 1, true)
			o.deployment.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: "False", Reason: "ProgressDeadlineExceeded"}}
		},
		want: want{"Ready": "False/Progressing", "Degraded": "True/ReplicasNotReady", "Available": "True/Reconciled"},
	}, {
		name: "invalid spec stalls and does not pretend to reconcile",
		mod:  func(o *observations) { o.invalid = errors.New("spec.extraArgs[0].name: unknown flag") },
		want: want{"Ready": "False/InvalidSpec", "Stalled": "True/InvalidSpec", "Reconciling": "False/Reconciled"},
	}, {
		name: "a failed step degrades",
		mod:  func(o *observations) { o.stepErr, o.failedStep = errors.New("conflict"), "Deployment" },
		want: want{"Ready": "False/ReconcileError", "Degraded": "True/ReconcileError", "Reconciling": "True/ReconcileError"},
	}, {
		name: "etcd unreachable",
		mod:  func(o *observations) { o.etcdErr = errors.New("etcd https://e:2379 did not answer") },
		want: want{"Ready": "False/EtcdUnreachable", "EtcdAvailable": "False/EtcdUnreachable"},
	}, {
		name: "hibernated is ready on purpose",
		mod:  func(o *observations) { o.masterCount = 0; o.deployment = deployment(0, 0, true) },
		want: want{"Ready": "True/Hibernated", "Available": "False/Hibernated", "Reconciling": "False/Reconciled"},
	}, {
		name: "hibernated with etcd down is not ready",
		mod: func(o *observations) {
			o.masterCount = 0
			o.deployment = deployment(0, 0, true)
			o.etcdErr = errors.New("down")
		},
		want: want{"Ready": "False/EtcdUnreachable"},
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
		})
	}
	if len(conditions(healthy)) != 8 {
		t.Fatalf("want the 8 documented condition types, got %d", len(conditions(healthy)))
	}
}
