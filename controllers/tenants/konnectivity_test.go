package tenants

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
	"github.com/apiserver-operator/apiserver-operator/apiserver/rotation"
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
	if ports := np.Spec.Ingress[0].Ports; len(ports) != 3 || ports[1].Port.IntValue() != apiserver.DefaultKonnectivityPort || ports[2].Port.IntValue() != apiserver.KonnectivityHealthPort {
		t.Errorf("the NetworkPolicy lets in %+v, want the apiservers' port, the agents' %d and the server's health %d (the operator's gate reads it)", ports, apiserver.DefaultKonnectivityPort, apiserver.KonnectivityHealthPort)
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
	// Its certificate for the agents: a serving certificate of the
	// konnectivity CA, the one CA the agents trust, for the apiservers'
	// names (the Service the agents dial), not kube-apiserver's own key;
	// and kube-apiserver's certificate of the same CA for the name the
	// agents ask it for.
	konnectivityCAPEM := get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.KonnectivityCASecretName("edge")}}).Data[corev1.TLSCertKey]
	konnectivityCA := parseCert(t, konnectivityCAPEM)
	agentRoots := x509.NewCertPool()
	agentRoots.AddCert(konnectivityCA)
	servingSecret := get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.KonnectivityServerSecretName("edge")}})
	agentServing, err := pki.ParseKeyPair(servingSecret.Data[corev1.TLSCertKey], servingSecret.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatalf("the konnectivity server's serving Secret: %v", err)
	}
	for _, name := range []string{"edge.tenants.example.com", apiserver.KonnectivityServiceName("edge") + "." + ns + ".svc"} {
		if _, err := agentServing.Cert().Verify(x509.VerifyOptions{Roots: agentRoots, DNSName: name}); err != nil {
			t.Errorf("the agents cannot verify the konnectivity server as %s with the konnectivity CA: %v", name, err)
		}
	}
	if _, err := agentServing.Cert().Verify(x509.VerifyOptions{Roots: roots}); err == nil {
		t.Error("the tenant's CA signs the konnectivity server's certificate for the agents: a rotation of it would break their trust")
	}
	sniSecret := get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.KonnectivityAPIServerSecretName("edge")}})
	if _, err := parseCert(t, sniSecret.Data[corev1.TLSCertKey]).Verify(x509.VerifyOptions{Roots: agentRoots, DNSName: apiserver.KonnectivityAgentServerName}); err != nil {
		t.Errorf("kube-apiserver's certificate for the agents does not verify with the konnectivity CA for %s: %v", apiserver.KonnectivityAgentServerName, err)
	}
	apiserverServing := get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.ServingSecretName("edge")}})
	if bytes.Equal(apiserverServing.Data[corev1.TLSPrivateKeyKey], servingSecret.Data[corev1.TLSPrivateKeyKey]) {
		t.Error("the konnectivity server holds kube-apiserver's serving key")
	}
	got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
	for _, name := range []string{"konnectivity-server", "konnectivity-client", "konnectivity-apiserver", apiserver.KonnectivityCASecretName("edge")} {
		if !slices.ContainsFunc(got.Status.Certificates, func(c v1alpha1.CertificateStatus) bool { return c.Name == name }) {
			t.Errorf("status.certificates does not list %s: %v", name, got.Status.Certificates)
		}
	}

	// The agents' manifests, published for the tenant: they dial the
	// host the spec names, on the agents' port.
	agentCM := get(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.KonnectivityAgentConfigMapName("edge")}})
	manifests := agentCM.Data[apiserver.KonnectivityAgentManifestsKey]
	for _, want := range []string{"kind: DaemonSet", "kind: ServiceAccount", "kind: ClusterRoleBinding", "--proxy-server-host=edge.tenants.example.com", fmt.Sprintf("--proxy-server-port=%d", apiserver.DefaultKonnectivityPort),
		// The konnectivity CA, for the agents.
		strings.SplitN(string(konnectivityCAPEM), "\n", 3)[1]} {
		if !strings.Contains(manifests, want) {
			t.Errorf("the published agents' manifests lack %q:\n%s", want, manifests)
		}
	}

	// The agents' port, on a Service of its own that sends to pods not
	// ready yet (whose gate waits for an agent), and on the sidecar.
	svc := get(t, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.ServiceName("edge")}})
	if len(svc.Spec.Ports) != 1 {
		t.Errorf("the tenant's Service has ports %+v, want https only: it sends only to ready apiservers", svc.Spec.Ports)
	}
	agentsSvc := get(t, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.KonnectivityServiceName("edge")}})
	if p := agentsSvc.Spec.Ports; len(p) != 1 || p[0].Name != "konnectivity" || p[0].Port != apiserver.DefaultKonnectivityPort || !agentsSvc.Spec.PublishNotReadyAddresses {
		t.Errorf("the agents' Service has ports %+v, publishNotReadyAddresses %v; want konnectivity %d, true", p, agentsSvc.Spec.PublishNotReadyAddresses, apiserver.DefaultKonnectivityPort)
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
	// certificates and the konnectivity CA are gone.
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
		if len(d.Spec.Template.Spec.ReadinessGates) != 0 {
			return fmt.Errorf("the pods still wait for a konnectivity agent")
		}
		switch err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: apiserver.KonnectivityServiceName("edge")}, &corev1.Service{}); {
		case err == nil:
			return fmt.Errorf("the agents' Service is still there")
		case !apierrors.IsNotFound(err):
			return err
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

// TestApiServerConfigReconciler_ClusterCARotationLeavesTheKonnectivityAgentsAlone
// walks a whole rotation of the cluster CA, with a test clock (the old CA
// leaves the bundle when it expires), on a tenant with spec.konnectivity.
// Through every phase the konnectivity CA stays the same, the server's
// certificate for the agents and kube-apiserver's for their name stay its,
// and the manifests published for the agents do not change by a byte:
// the agents, which read their CA once, neither roll nor lose trust in a
// server. The leaves of the cluster CA, the server's client certificate
// among them, move to the new CA meanwhile.
func TestApiServerConfigReconciler_ClusterCARotationLeavesTheKonnectivityAgentsAlone(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	clock := clocktesting.NewFakeClock(time.Now())
	cfg := tenant(ns, "edge", func(s *v1alpha1.ApiServerConfigSpec) {
		s.Certificates.CAValidity = &metav1.Duration{Duration: 10 * 24 * time.Hour}
		s.Certificates.Validity = &metav1.Duration{Duration: 24 * time.Hour}
		s.Konnectivity = &v1alpha1.KonnectivitySpec{Agent: v1alpha1.KonnectivityAgentSpec{Host: "edge.tenants.example.com"}}
	})
	// Only this test's reconciler, with its clock, takes it.
	cfg.Labels = map[string]string{apiserver.WatchFilterLabel: "konnectivity-ca-rotation"}
	// Its cluster CA, the operator's (kept by Retain), expires in two
	// days, before the front-proxy CA, which is not rotated.
	oldCA, err := pki.NewSelfSignedCA("kubernetes", pki.DefaultKeyAlgorithm, 48*time.Hour, clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	oldKey, err := oldCA.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	caSecret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.CASecretName(cfg.Name), Labels: map[string]string{apiserver.NameLabel: cfg.Name}},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: oldCA.CertPEM(), corev1.TLSPrivateKeyKey: oldKey,
			apiserver.CABundleKey: pki.TrustBundle(clock.Now(), oldCA.Cert())},
	}
	// Proven as the operator proves what Retain keeps (the test holds the
	// operator's key).
	ownershipKey.Prove(cfg.Name, "", caSecret)
	if err := env.Client.Create(ctx, caSecret); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Ownership: ownershipKey, Client: env.Client, APIReader: env.Client, Scheme: env.Scheme, Clock: clock, CATrustPropagation: time.Second}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.DeploymentName(cfg.Name)}}
	pass := func() {
		t.Helper()
		clock.Step(3 * time.Second)
		if _, err := r.Reconcile(ctx, reconcileRequest(cfg)); err != nil {
			t.Fatal(err)
		}
		if env.Client.Get(ctx, client.ObjectKeyFromObject(d), &appsv1.Deployment{}) == nil {
			actAsDeploymentController(t, d)
		}
	}
	secret := func(name string) *corev1.Secret {
		t.Helper()
		return get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	}
	published := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.KonnectivityAgentConfigMapName(cfg.Name)}}
	for i := 0; env.Client.Get(ctx, client.ObjectKeyFromObject(published), published) != nil; i++ {
		if i == 10 {
			t.Fatal("the agents' manifests are not published after 10 passes")
		}
		pass()
	}
	if got := parseCert(t, secret(apiserver.CASecretName(cfg.Name)).Data[corev1.TLSCertKey]); !got.Equal(oldCA.Cert()) {
		t.Fatal("the operator did not take the tenant's CA Secret")
	}
	konnectivityCA := secret(apiserver.KonnectivityCASecretName(cfg.Name)).Data
	manifests := published.Data
	// What the agents see, checked after every pass.
	agentsSeeNoChange := func(phase string) {
		t.Helper()
		if now := secret(apiserver.KonnectivityCASecretName(cfg.Name)).Data; !bytes.Equal(now[corev1.TLSCertKey], konnectivityCA[corev1.TLSCertKey]) || !bytes.Equal(now[corev1.TLSPrivateKeyKey], konnectivityCA[corev1.TLSPrivateKeyKey]) {
			t.Fatalf("%s: the konnectivity CA changed", phase)
		}
		issuer := parseCert(t, konnectivityCA[corev1.TLSCertKey])
		for _, name := range []string{apiserver.KonnectivityServerSecretName(cfg.Name), apiserver.KonnectivityAPIServerSecretName(cfg.Name)} {
			leaf := parseCert(t, secret(name).Data[corev1.TLSCertKey])
			if err := leaf.CheckSignatureFrom(issuer); err != nil || !bytes.Equal(leaf.RawIssuer, issuer.RawSubject) {
				t.Fatalf("%s: the certificate of Secret %s is issued by %q, not the konnectivity CA (%v)", phase, name, leaf.Issuer, err)
			}
		}
		if now := get(t, published.DeepCopy()).Data; !maps.Equal(now, manifests) {
			t.Fatalf("%s: the agents' manifests changed:\n%s", phase, cmp.Diff(manifests, now))
		}
	}
	agentsSeeNoChange("before the rotation")

	annotate(t, cfg, v1alpha1.RotateCAAnnotation, "1")
	var phases []string
	for i := 0; len(phases) == 0 || phases[len(phases)-1] != string(rotation.Stable); i++ {
		if i == 40 {
			t.Fatalf("the CA rotation went through %v in 40 passes, and no further", phases)
		}
		pass()
		phase := storedPhase(t, cfg, rotation.CA.Name)
		if (phase != string(rotation.Stable) || len(phases) > 0) && (len(phases) == 0 || phases[len(phases)-1] != phase) {
			phases = append(phases, phase)
		}
		agentsSeeNoChange(phase)
		if phase == string(rotation.SignWithNew) {
			// The old CA stays trusted until it expires.
			clock.SetTime(oldCA.Cert().NotAfter.Add(time.Minute))
		}
	}
	if want := []string{"TrustNew", "SignWithNew", "PruneOld", "Stable"}; !slices.Equal(phases, want) {
		t.Fatalf("the CA rotation went through %v, want %v", phases, want)
	}
	newCA := parseCert(t, secret(apiserver.CASecretName(cfg.Name)).Data[corev1.TLSCertKey])
	if newCA.Equal(oldCA.Cert()) {
		t.Fatal("the cluster CA did not change")
	}
	if err := parseCert(t, secret(apiserver.KonnectivityClientSecretName(cfg.Name)).Data[corev1.TLSCertKey]).CheckSignatureFrom(newCA); err != nil {
		t.Errorf("the konnectivity server's client certificate, a leaf of the cluster CA, was not reissued by the new CA: %v", err)
	}
}

// A deleted tenant's konnectivity Service goes with it, as its other
// objects do, whether or not the cluster runs a garbage collector (envtest
// runs none).
func TestApiServerConfigReconciler_DeletionRemovesTheKonnectivityService(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "edge-gone", func(s *v1alpha1.ApiServerConfigSpec) {
		s.Konnectivity = &v1alpha1.KonnectivitySpec{Agent: v1alpha1.KonnectivityAgentSpec{Host: "edge.tenants.example.com"}}
	})
	createReady(t, cfg)
	key := client.ObjectKey{Namespace: ns, Name: apiserver.KonnectivityServiceName(cfg.Name)}
	if err := env.Client.Get(ctx, key, &corev1.Service{}); err != nil {
		t.Fatalf("the konnectivity Service of a ready tenant: %v", err)
	}
	if err := env.Client.Delete(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	waitGone(t, cfg)
	if err := env.Client.Get(ctx, key, &corev1.Service{}); !apierrors.IsNotFound(err) {
		t.Errorf("the deleted tenant's konnectivity Service: %v, want it gone", err)
	}
}
