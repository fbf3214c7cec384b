package boot

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// checkWebhookCannotReachTheNode registers in the tenant an admission
// webhook at an address of its node (testNodeIP, where something listens)
// and checks that kube-apiserver never connects: its egress filter
// refuses, and the failure the tenant's administrator reads says why.
func checkWebhookCannotReachTheNode(t *testing.T, cs *kubernetes.Clientset) {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(testNodeIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = conn.Close()
		}
	}()
	defer func() { _ = l.Close() }()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := must(cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "aimed-at-the-node", Labels: map[string]string{"webhook": "node"}}}, metav1.CreateOptions{}))
	url := "https://" + l.Addr().String() + "/validate"
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "aimed-at-the-node"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "node.boot.example.com",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"webhook": "node"}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](3),
		}},
	}
	_ = must(cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}))
	defer func() {
		_ = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), vwc.Name, metav1.DeleteOptions{})
	}()
	// kube-apiserver takes the configuration in within moments: until
	// then the creates pass.
	var refusal error
	for i := 0; refusal == nil && i < 40; i++ {
		_, err := cs.CoreV1().ConfigMaps(ns.Name).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-"}}, metav1.CreateOptions{})
		switch {
		case err != nil && strings.Contains(err.Error(), "failed calling webhook"):
			refusal = err
		case err != nil:
			t.Fatalf("creating a ConfigMap: %v", err)
		default:
			time.Sleep(250 * time.Millisecond)
		}
	}
	if refusal == nil {
		t.Fatal("the webhook aimed at the node was never called")
	}
	want := "the egress filter of the tenant's apiservers refuses " + l.Addr().String() + ": " + testNodeIP + " is an address of the node this apiserver runs on"
	if !strings.Contains(refusal.Error(), want) {
		t.Errorf("the webhook aimed at the node failed with %q, want the egress filter's refusal %q", refusal, want)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the node's listener accepted %d connections from the tenant's apiserver, want none", n)
	}
}
