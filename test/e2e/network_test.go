//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// A tenant's administrator registers webhooks that make the tenant's
// apiserver call addresses of the management network: the hosted control
// plane's SSRF. Whatever its NetworkPolicy, and although the local
// cluster's policy engine (kube-network-policies) lets a pod reach its own
// node, the apiserver's egress filter refuses its node's kubelet and the
// management kube-apiserver on it, the management kube-apiserver's Service,
// another tenant's apiserver pod (the pod network, which the e2e operator
// is given in --tenant-egress-deny) and the metadata address, and each
// failure says why. An address outside those ranges is the policy's to
// judge: under the policy (the default of a new tenant) it never connects,
// while the webhook its spec allows works; a tenant without a policy
// reaches it, which proves the path exists, and so does the first tenant
// once its policy is turned off.
func TestOperator_TenantsCannotReachEachOtherOrTheManagementNetwork(t *testing.T) {
	host := cluster.HostIP()
	allowed := startAdmissionWebhook(t, host)
	// The management kube-apiserver runs on the node, and traffic between
	// a pod and its own node is always allowed (NetworkPolicy semantics):
	// it is reached here as a pod on another node would reach it, from the
	// far side of the node's link.
	rc, err := cluster.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	mgmt, err := url.Parse(rc.Host)
	if err != nil {
		t.Fatal(err)
	}
	management := startForwarder(t, host, mgmt.Host)

	c, cfgs, clients := startTenants(t, tenantSpec{"fenced", func(cfg *v1alpha1.ApiServerConfig) {
		cfg.Spec.NetworkPolicy = &v1alpha1.NetworkPolicySpec{Mode: v1alpha1.NetworkPolicyEnforced, Egress: []networkingv1.NetworkPolicyEgressRule{{
			To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: host + "/32"}}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(int32(allowed.port)))}},
		}}}
	}}, tenantSpec{"open", func(cfg *v1alpha1.ApiServerConfig) {
		cfg.Spec.NetworkPolicy = &v1alpha1.NetworkPolicySpec{Mode: v1alpha1.NetworkPolicyNone}
	}})
	fenced, fencedClient, open, openClient := cfgs[0], clients[0], cfgs[1], clients[1]

	got := &v1alpha1.ApiServerConfig{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(fenced), got); err != nil {
		t.Fatal(err)
	}
	want := []string{"spec.networkPolicy.egress[0]", "etcd " + cluster.NodeIP() + ":2479", "etcd " + cluster.NodeIP() + ":2579", "DNS"}
	if s := got.Status.NetworkPolicy; s == nil || s.Name != apiserver.NetworkPolicyName(fenced.Name) || !slices.Equal(s.Egress, want) {
		t.Fatalf("status.networkPolicy is %+v, want %s with egress %q", got.Status.NetworkPolicy, apiserver.NetworkPolicyName(fenced.Name), want)
	}
	fencedPod := net.JoinHostPort(apiserverPods(t, c, fenced)[0].Status.PodIP, "6443")
	openPod := net.JoinHostPort(apiserverPods(t, c, open)[0].Status.PodIP, "6443")
	node := cluster.NodeIP()

	// The egress filter refuses these whatever the policy: neither tenant
	// connects, and the failure names the range.
	mgmtService, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := mgmtService.CoreV1().Services("default").Get(context.Background(), "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	refused := []struct{ what, target, why string }{
		{"its node's kubelet", net.JoinHostPort(node, "10250"), node + " is an address of the node this apiserver runs on"},
		{"the management kube-apiserver on its node", mgmt.Host, node + " is an address of the node this apiserver runs on"},
		{"the management kube-apiserver's Service", net.JoinHostPort(svc.Spec.ClusterIP, "443"), svc.Spec.ClusterIP + " is the management cluster's kube-apiserver"},
		{"another tenant's apiserver pod", "", "is in a network of the management cluster"},
		{"the metadata address", "169.254.169.254:443", "169.254.169.254 is link-local, where clouds serve instance metadata"},
	}
	for _, tenant := range []struct {
		name, other string
		cs          *kubernetes.Clientset
	}{{"open", fencedPod, openClient}, {"fenced", openPod, fencedClient}} {
		for i, r := range refused {
			if r.target == "" {
				r.target = tenant.other
			}
			err := webhookCall(t, tenant.cs, tenant.name+"-refused-"+strconv.Itoa(i), "https://"+r.target, nil, nil)
			if wantWhy := "the egress filter of the tenant's apiservers refuses " + r.target + ": "; err == nil || !strings.Contains(err.Error(), wantWhy) || !strings.Contains(err.Error(), r.why) {
				t.Errorf("the %s tenant calling %s (%s): %v, want the egress filter's refusal %q", tenant.name, r.what, r.target, err, r.why)
			} else {
				t.Logf("The %s tenant calling %s: %v", tenant.name, r.what, err)
			}
		}
	}

	// Outside the refused ranges the policy judges. Without one the path
	// exists: the call connects and fails only on the target's
	// certificate, which the tenant does not trust.
	if err := webhookCall(t, openClient, "open-reaches", management, nil, nil); !connected(err) {
		t.Errorf("a tenant without a NetworkPolicy calling the management kube-apiserver off its node (%s): %v, want a TLS failure that shows it connected", management, err)
	}
	// Under the policy the same call never connects.
	if err := webhookCall(t, fencedClient, "fenced-reaches", management, nil, nil); !timedOut(err) {
		t.Errorf("the isolated tenant calling the management kube-apiserver off its node (%s): %v, want a call that never connects", management, err)
	}
	// The webhook its spec allows works.
	before := allowed.calls.Load()
	if err := webhookCall(t, fencedClient, "fenced-allowed", allowed.url, allowed.caBundle, func() bool { return allowed.calls.Load() > before }); err != nil {
		t.Fatalf("the webhook on the allow list: %v", err)
	}

	// Mode None lifts the policy, not the filter.
	updateSpec(t, c, fenced, func(s *v1alpha1.ApiServerConfigSpec) {
		s.NetworkPolicy = &v1alpha1.NetworkPolicySpec{Mode: v1alpha1.NetworkPolicyNone}
	})
	key := client.ObjectKey{Namespace: fenced.Namespace, Name: apiserver.NetworkPolicyName(fenced.Name)}
	for i := 0; ; i++ {
		err := c.Get(context.Background(), key, &networkingv1.NetworkPolicy{})
		if apierrors.IsNotFound(err) {
			break
		}
		if i == 60 {
			t.Fatalf("the NetworkPolicy is still there 30 s after mode None (%v)", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err := webhookCall(t, fencedClient, "fenced-lifted", management, nil, nil); !connected(err) {
		t.Errorf("with mode None, calling the management kube-apiserver off its node: %v, want a TLS failure that shows it connected", err)
	}
}

// webhookCall registers in the tenant a validating webhook at target for the
// ConfigMaps of a namespace of its own, called name, then creates
// ConfigMaps there until the call fails or answered says the webhook
// answered (the tenant's apiserver takes in a new configuration within
// moments): nil when it allowed, the apiserver's refusal otherwise.
func webhookCall(t *testing.T, tenant *kubernetes.Clientset, name, target string, caBundle []byte, answered func() bool) error {
	t.Helper()
	ctx := context.Background()
	ns, err := tenant.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-", Labels: map[string]string{"e2e-webhook": name}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := target + "/validate"
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    name + ".e2e.example.com",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &path, CABundle: caBundle},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"e2e-webhook": name}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](3),
		}},
	}
	if _, err := tenant.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = tenant.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{})
		_ = tenant.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
	}()
	for i := range 20 {
		_, err := tenant.CoreV1().ConfigMaps(ns.Name).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe-" + strconv.Itoa(i)}}, metav1.CreateOptions{})
		switch {
		case err != nil && strings.Contains(err.Error(), "failed calling webhook"):
			return err
		case err != nil:
			t.Fatalf("creating a ConfigMap in the tenant: %v", err)
		case answered != nil && answered():
			// Allowed, and the webhook was called: an allowed create may
			// also come before the configuration is in force.
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("the tenant never called the webhook at %s", target)
	return nil
}

// connected: the call reached a TLS server (which the tenant does not
// trust), so the network let it through.
func connected(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "x509") || strings.Contains(err.Error(), "certificate"))
}

// timedOut: the call never got an answer, as a dropped connection gives.
func timedOut(err error) bool {
	if err == nil || connected(err) {
		return false
	}
	s := err.Error()
	return strings.Contains(s, "i/o timeout") || strings.Contains(s, "context deadline exceeded") || strings.Contains(s, "Client.Timeout")
}

// admissionWebhook is an HTTPS admission webhook that allows everything,
// run by the test on the host's side of the node's link.
type admissionWebhook struct {
	url      string
	port     int
	caBundle []byte
	calls    atomic.Int64
}

func startAdmissionWebhook(t *testing.T, host string) *admissionWebhook {
	t.Helper()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(host, []net.IP{net.ParseIP(host)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("listening on the host's side of the node's link: %v", err)
	}
	w := &admissionWebhook{caBundle: certPEM, port: ln.Addr().(*net.TCPAddr).Port}
	w.url = "https://" + ln.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("/validate", func(rw http.ResponseWriter, r *http.Request) {
		review := &admissionv1.AdmissionReview{}
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err := json.Unmarshal(body, review); err != nil || review.Request == nil {
			http.Error(rw, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		w.calls.Add(1)
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		review.Request = nil
		_ = json.NewEncoder(rw).Encode(review)
	})
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return w
}

// startForwarder forwards connections to host:<port> to target and
// returns its https URL.
func startForwarder(t *testing.T, host, target string) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("listening on the host's side of the node's link: %v", err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = in.Close() }()
				out, err := net.DialTimeout("tcp", target, 5*time.Second)
				if err != nil {
					return
				}
				defer func() { _ = out.Close() }()
				go func() { _, _ = io.Copy(out, in) }()
				_, _ = io.Copy(in, out)
			}()
		}
	}()
	return "https://" + ln.Addr().String()
}
