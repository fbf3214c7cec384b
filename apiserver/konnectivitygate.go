package apiserver

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KonnectivityAgentsGate is the readiness gate of the apiserver pods of a
// tenant with spec.konnectivity: the operator opens it once an agent holds
// a tunnel to the pod's konnectivity server, or no server of the tenant
// has one (see the controller's gateKonnectivity). Until then the pod
// takes no request through the tenant's Service, and the agents reach it
// through KonnectivityServiceName, which publishes pods that are not ready.
const KonnectivityAgentsGate corev1.PodConditionType = "controlplane.apiserver-operator.dev/konnectivity-agents"

// KonnectivityServiceName is the Service the agents dial: the
// konnectivity servers of all apiserver pods, ready or not.
func KonnectivityServiceName(name string) string { return name + "-konnectivity" }

// DesiredKonnectivityService is the agents' Service: of the type of the
// tenant's Service, with spec.konnectivity.serviceAnnotations (not the
// tenant Service's), to every apiserver pod's konnectivity server, ready
// or not. An apiserver
// whose gate waits for an agent is not ready: through the tenant's
// Service, which only sends to ready pods, no agent would ever reach it.
// nil without spec.konnectivity.
func DesiredKonnectivityService(c *Completed) *corev1.Service {
	if !usesKonnectivity(c) {
		return nil
	}
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: objectMeta(c, KonnectivityServiceName(c.Name)),
		Spec: corev1.ServiceSpec{
			Type:                     c.Spec.Serving.Service.Type,
			Selector:                 SelectorLabels(c.Name),
			Ports:                    []corev1.ServicePort{konnectivityServicePort(c)},
			PublishNotReadyAddresses: true,
		},
	}
	if a := c.Spec.Konnectivity.ServiceAnnotations; len(a) > 0 {
		svc.Annotations = a
	}
	return svc
}
