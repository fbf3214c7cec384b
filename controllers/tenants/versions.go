package tenants

import (
	"cmp"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilversion "k8s.io/apimachinery/pkg/util/version"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// versionObservation is which kube-apiserver versions run, from the pods.
type versionObservation struct {
	// running is status.version: the version every apiserver runs, the
	// oldest one while versions are mixed, the last one that ran while no
	// pod runs.
	running string
	// desired is spec.version.
	desired string
	// counts are the pods of each version, oldest first.
	counts []v1alpha1.VersionStatus
}

// upgrading reports whether apiservers still run another version than
// the spec's.
func (v versionObservation) upgrading() bool {
	return v.running != "" && v.desired != "" && v.running != v.desired
}

// upgradedReady counts the ready apiservers of the spec's version.
func (v versionObservation) upgradedReady() int32 {
	for _, c := range v.counts {
		if c.Version == v.desired {
			return c.ReadyReplicas
		}
	}
	return 0
}

// observeVersions counts the pods of each version, by the annotation of
// their template; pods that ended run nothing and do not count. A pod
// without the annotation (made before the operator wrote it) runs what
// status said last. With no pod, the version is that of a
// Deployment whose rollout is done (its pods are not in the cache yet, or
// never are, as in envtest), or else the one that ran last.
func observeVersions(pods []corev1.Pod, d *appsv1.Deployment, lastRunning, desired string) versionObservation {
	obs := versionObservation{desired: desired}
	unknown := lastRunning
	if unknown == "" {
		unknown = desired
	}
	byVersion := map[string]*v1alpha1.VersionStatus{}
	for i := range pods {
		if podEnded(&pods[i]) {
			continue
		}
		version := pods[i].Annotations[apiserver.VersionAnnotation]
		if version == "" {
			version = unknown
		}
		c := byVersion[version]
		if c == nil {
			c = &v1alpha1.VersionStatus{Version: version}
			byVersion[version] = c
		}
		c.Replicas++
		if podReady(&pods[i]) {
			c.ReadyReplicas++
		}
	}
	for _, c := range byVersion {
		obs.counts = append(obs.counts, *c)
	}
	slices.SortFunc(obs.counts, func(a, b v1alpha1.VersionStatus) int { return compareVersions(a.Version, b.Version) })
	switch {
	case len(obs.counts) > 0:
		obs.running = obs.counts[0].Version
	case d != nil && d.Spec.Replicas != nil && *d.Spec.Replicas > 0 && rolloutDone(d):
		obs.running = d.Spec.Template.Annotations[apiserver.VersionAnnotation]
	default:
		obs.running = lastRunning
	}
	return obs
}

// compareVersions orders semantic versions, and anything unparsable
// after them by name.
func compareVersions(a, b string) int {
	va, errA := utilversion.ParseSemantic(a)
	_, errB := utilversion.ParseSemantic(b)
	switch {
	case errA == nil && errB == nil:
		r, _ := va.Compare(b)
		return r
	case errA == nil:
		return -1
	case errB == nil:
		return 1
	}
	return cmp.Compare(a, b)
}

// podEnded: the pod ended and nobody removes it: evicted (Failed), it
// stays listed until garbage collection. A pod being deleted counts until
// it is gone, whatever its phase (kubelet gives it a terminal phase once
// its containers stopped, before the API server removes it).
func podEnded(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && (p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded)
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// upgradeMessage says how far an upgrade is: "upgrading v1.36.4 →
// v1.37.1: 1 of 2 apiservers upgraded".
func upgradeMessage(o observations) string {
	return fmt.Sprintf("upgrading %s → %s: %d of %d apiservers upgraded",
		o.versions.running, o.versions.desired, min(o.versions.upgradedReady(), o.masterCount), o.masterCount)
}
