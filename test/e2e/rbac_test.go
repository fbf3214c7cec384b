//go:build e2e

package e2e

import (
	"context"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The operator, as config/default installs it, may patch the caBundle of
// its own webhook configurations and of no other: a webhook configuration
// is how a hijacked operator would intercept every write of the cluster.
func TestOperator_PatchesOnlyItsOwnWebhookConfigurations(t *testing.T) {
	installOperator(t)
	cs := clientset(t)
	const operator = "system:serviceaccount:apiserver-operator-system:apiserver-operator-controller-manager"
	for _, tc := range []struct {
		verb, resource, name string
		allowed              bool
	}{
		{"patch", "validatingwebhookconfigurations", "apiserver-operator-validating-webhook-configuration", true},
		{"patch", "mutatingwebhookconfigurations", "apiserver-operator-mutating-webhook-configuration", true},
		{"patch", "validatingwebhookconfigurations", "another-operators-webhooks", false},
		{"patch", "mutatingwebhookconfigurations", "another-operators-webhooks", false},
		{"list", "validatingwebhookconfigurations", "", false},
		{"delete", "validatingwebhookconfigurations", "apiserver-operator-validating-webhook-configuration", false},
	} {
		review, err := cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User: operator,
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Group: "admissionregistration.k8s.io", Resource: tc.resource, Verb: tc.verb, Name: tc.name,
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if review.Status.Allowed != tc.allowed {
			t.Errorf("the operator may %s %s %q: %v, want %v", tc.verb, tc.resource, tc.name, review.Status.Allowed, tc.allowed)
		}
	}
}
