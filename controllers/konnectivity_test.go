package controllers

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
)

// A tenant with spec.konnectivity gets the server sidecar, which alone
// mounts a client certificate of the tenant's CA for the user the tenant's
// RBAC knows it by, the agents' port on its Service, and pods that still
// pass restricted Pod Security; without the field again, all of that goes.
func TestApiServerConfigReconciler_KonnectivityServerGetsItsCertificateAndPort(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"})
	cfg := tenant(ns, "edge", func(s *v1alpha1.ApiServerConfigSpec) {
		s.Konnectivity = &v1alpha1.KonnectivitySpec{Agent: v1alpha1.KonnectivityAgentSpec{Host: "edge.tenants.example.com"}}
		s.NetworkPolicy = &v1alpha1.NetworkPolicySpec{Mode: v1alpha1.NetworkPolicyEnforced}
	})
	createReady(t, cfg)
	np := get(t, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.NetworkPolicyName("edge")}})
	if ports := np.Spec.Ingress[0].Ports; len(ports) != 2 || ports[1].Port.IntValue() != apiserver.DefaultKonnectivityPort {
		t.Errorf("the NetworkPolicy lets in %+v, want the apiservers' port and the agents' %d", ports, apiserver.DefaultKonnectivityPort)
	}

	// The server's client certificate: the tenant's CA signs it, for
	// system:konnectivity-server, as a client; its Secret carries the CA
	// bundle that verifies its apiserver.
	secret := get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.KonnectivityClientSecretName("edge")}})
	kp, err := pki.ParseKeyPair(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatalf("the konnectivity server's Secret: %v", err)
	}
	ca := get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.CASecretName("edge")}})
	if !bytes.Equal(secret.Data[apiserver.CABundleKey], ca.Data[apiserver.CABundleKey]) {
		t.Error("the konnectivity server's CA bundle is not the tenant's")
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.Data[apiserver.CABundleKey])
	if _, err := kp.Cert().Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the konnectivity server's certificate is not a client certificate of the tenant's CA: %v", err)
	}
	if cn := kp.Cert().Subject.CommonName; cn != apiserver.KonnectivityServerUser || len(kp.Cert().Subject.Organization) != 0 {
		t.Errorf("the konnectivity server's certificate is for %q in %v, want %s in no group", cn, kp.Cert().Subject.Organization, apiserver.KonnectivityServerUser)
	}
	// Its certificate for the agents: a serving certificate of the same
	// CA for the apiservers' names (the Service the agents dial), not
	// kube-apiserver's own key.
	servingSecret := get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.KonnectivityServerSecretName("edge")}})
	agentServing, err := pki.ParseKeyPair(servingSecret.Data[corev1.TLSCertKey], servingSecret.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatalf("the konnectivity server's serving Secret: %v", err)
	}
	if _, err := agentServing.Cert().Verify(x509.VerifyOptions{Roots: roots, DNSName: "edge-apiserver." + ns + ".svc"}); err != nil {
		t.Errorf("the agents cannot verify the konnectivity server by the Service's name: %v", err)
	}
	apiserverServing := get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.ServingSecretName("edge")}})
	if bytes.Equal(apiserverServing.Data[corev1.TLSPrivateKeyKey], servingSecret.Data[corev1.TLSPrivateKeyKey]) {
		t.Error("the konnectivity server holds kube-apiserver's serving key")
	}
	got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
	for _, name := range []string{"konnectivity-server", "konnectivity-client"} {
		if !slices.ContainsFunc(got.Status.Certificates, func(c v1alpha1.CertificateStatus) bool { return c.Name == name }) {
			t.Errorf("status.certificates does not list %s: %v", name, got.Status.Certificates)
		}
	}

	// The agents' manifests, published for the tenant: they dial the
	// host the spec names, on the agents' port.
	agentCM := get(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.KonnectivityAgentConfigMapName("edge")}})
	manifests := agentCM.Data[apiserver.KonnectivityAgentManifestsKey]
	for _, want := range []string{"kind: DaemonSet", "kind: ServiceAccount", "kind: ClusterRoleBinding", "--proxy-server-host=edge.tenants.example.com", fmt.Sprintf("--proxy-server-port=%d", apiserver.DefaultKonnectivityPort)} {
		if !strings.Contains(manifests, want) {
			t.Errorf("the published agents' manifests lack %q:\n%s", want, manifests)
		}
	}

	// The agents' port, on the Service and the sidecar.
	svc := get(t, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.ServiceName("edge")}})
	if len(svc.Spec.Ports) != 2 || svc.Spec.Ports[1].Name != "konnectivity" || svc.Spec.Ports[1].Port != apiserver.DefaultKonnectivityPort {
		t.Errorf("the Service's ports are %+v, want https and konnectivity %d", svc.Spec.Ports, apiserver.DefaultKonnectivityPort)
	}
	d := waitForDeployment(t, cfg)
	pod := d.Spec.Template.Spec
	sidecar := containerNamed(pod.InitContainers, "konnectivity-server")
	if sidecar == nil {
		t.Fatalf("the pod has no konnectivity-server sidecar: %v", containerNames(pod.InitContainers))
	}
	if sidecar.RestartPolicy == nil || *sidecar.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("the konnectivity server is not a native sidecar (restartPolicy Always)")
	}
	mounts := func(c *corev1.Container, volume string) bool {
		return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == volume })
	}
	apiserverContainer := &pod.Containers[0]
	if !mounts(sidecar, "konnectivity-server") || mounts(apiserverContainer, "konnectivity-server") {
		t.Error("the konnectivity server's files must be mounted in its container, and only there")
	}
	if !mounts(sidecar, "konnectivity") || !mounts(apiserverContainer, "konnectivity") {
		t.Error("both containers must mount the socket's directory")
	}
	if mounts(sidecar, "pki") {
		t.Error("the konnectivity server mounts kube-apiserver's keys")
	}
	dryRun := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge-dry-run", Labels: d.Spec.Template.Labels}, Spec: pod}
	if err := env.Client.Create(ctx, dryRun, client.DryRunAll); err != nil {
		t.Errorf("a pod with the konnectivity server is refused in a restricted namespace: %v", err)
	}

	// Off again: the pods, the Service and the NetworkPolicy are as
	// without it, and once the pods run without the server, its
	// certificates are gone.
	eventually(t, 10*time.Second, "spec.konnectivity removed", func() error {
		current := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		current.Spec.Konnectivity = nil
		return env.Client.Update(ctx, current)
	})
	eventually(t, 30*time.Second, "the sidecar and the port go", func() error {
		d := &appsv1.Deployment{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: apiserver.DeploymentName("edge")}, d); err != nil {
			return err
		}
		if c := containerNamed(d.Spec.Template.Spec.InitContainers, "konnectivity-server"); c != nil {
			return fmt.Errorf("the pods still run the konnectivity server")
		}
		svc := get(t, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.ServiceName("edge")}})
		if len(svc.Spec.Ports) != 1 {
			return fmt.Errorf("the Service still has ports %+v", svc.Spec.Ports)
		}
		switch err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: apiserver.KonnectivityAgentConfigMapName("edge")}, &corev1.ConfigMap{}); {
		case err == nil:
			return fmt.Errorf("the agents' manifests are still published")
		case !apierrors.IsNotFound(err):
			return err
		}
		np := get(t, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.NetworkPolicyName("edge")}})
		if ports := np.Spec.Ingress[0].Ports; len(ports) != 1 {
			return fmt.Errorf("the NetworkPolicy still lets in %d ports", len(ports))
		}
		return nil
	})
	actAsDeploymentController(t, waitForDeployment(t, cfg))
	eventually(t, 30*time.Second, "the konnectivity server's Secrets go", func() error {
		for _, name := range apiserver.KonnectivitySecretNames("edge") {
			switch err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.Secret{}); {
			case err == nil:
				return fmt.Errorf("Secret %s is still there", name)
			case !apierrors.IsNotFound(err):
				return err
			}
		}
		return nil
	})
}

func containerNamed(cs []corev1.Container, name string) *corev1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

func containerNames(cs []corev1.Container) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}
