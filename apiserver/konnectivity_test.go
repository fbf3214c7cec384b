package apiserver

import (
	"crypto/x509"
	"fmt"
	"maps"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
)

// TestKonnectivityVersion_IsTheOneBuilt: the images the operator renders
// are tagged with the version the Makefile builds, from the module that
// pins it.
func TestKonnectivityVersion_IsTheOneBuilt(t *testing.T) {
	mk, err := os.ReadFile("../hack/localcluster.mk")
	if err != nil {
		t.Fatal(err)
	}
	built := "none"
	if m := regexp.MustCompile(`(?m)^KONNECTIVITY_VERSION \?= (\S+)$`).FindSubmatch(mk); m != nil {
		built = string(m[1])
	}
	if built != KonnectivityVersion {
		t.Errorf("hack/localcluster.mk builds konnectivity %s, the operator renders %s: change both together", built, KonnectivityVersion)
	}
	mod, err := os.ReadFile("networkproxy/tools/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"sigs.k8s.io/apiserver-network-proxy", "sigs.k8s.io/apiserver-network-proxy/konnectivity-client"} {
		if !regexp.MustCompile(`(?m)^\t` + regexp.QuoteMeta(path+" "+KonnectivityVersion) + `( |$)`).Match(mod) {
			t.Errorf("apiserver/networkproxy/tools/go.mod does not require %s %s", path, KonnectivityVersion)
		}
	}
}

// TestValidate_KonnectivityNeedsTheApiserverOnLoopback: the server
// reviews agents' tokens at 127.0.0.1, so an apiserver bound elsewhere is
// refused at the field; without the proxy, the same flag is fine.
func TestValidate_KonnectivityNeedsTheApiserverOnLoopback(t *testing.T) {
	for _, tt := range []struct {
		bind         string
		konnectivity bool
		refused      bool
	}{
		{"10.0.0.5", true, true},
		{"::1", true, true},
		{"0.0.0.0", true, false},
		{"::", true, false},
		{"127.0.0.1", true, false},
		{"10.0.0.5", false, false},
	} {
		cfg := &v1alpha1.ApiServerConfig{Spec: v1alpha1.ApiServerConfigSpec{
			Etcd:      v1alpha1.EtcdSpec{Servers: []string{"https://etcd:2379"}},
			ExtraArgs: []v1alpha1.ExtraArg{{Name: "bind-address", Value: tt.bind}},
		}}
		if tt.konnectivity {
			cfg.Spec.Konnectivity = &v1alpha1.KonnectivitySpec{}
		}
		errs, _ := Validate(cfg)
		refused := slices.ContainsFunc(errs, func(e *field.Error) bool {
			return e.Field == "spec.extraArgs[0].value" && strings.Contains(e.Detail, "konnectivity")
		})
		if refused != tt.refused {
			t.Errorf("bind-address %s with konnectivity %v: refused %v, want %v (%v)", tt.bind, tt.konnectivity, refused, tt.refused, errs)
		}
	}
}

// TestValidate_WarnsWhenTheAgentsWouldDialTheWrongLoadBalancer: the
// agents' Service of a LoadBalancer tenant has a load balancer of its
// own; agents sent to the external host name would reach the apiservers',
// and without an external host name they would look for the apiservers at
// their own.
func TestValidate_WarnsWhenTheAgentsWouldDialTheWrongLoadBalancer(t *testing.T) {
	for _, tt := range []struct {
		host, external string
		typ            corev1.ServiceType
		warns          string
	}{
		{"", "edge.example.com", corev1.ServiceTypeLoadBalancer, "spec.konnectivity.agent.host"},
		{"agents.example.com", "edge.example.com", corev1.ServiceTypeLoadBalancer, ""},
		{"agents.example.com", "", corev1.ServiceTypeLoadBalancer, "spec.serving.externalHostname"},
		{"", "edge.example.com", corev1.ServiceTypeNodePort, ""},
		{"10.0.0.7", "", corev1.ServiceTypeNodePort, ""},
		{"", "edge.example.com", corev1.ServiceTypeClusterIP, ""},
	} {
		cfg := &v1alpha1.ApiServerConfig{Spec: v1alpha1.ApiServerConfigSpec{
			Etcd:         v1alpha1.EtcdSpec{Servers: []string{"https://etcd:2379"}},
			Serving:      v1alpha1.ServingSpec{ExternalHostname: tt.external, Service: v1alpha1.ServiceSpec{Type: tt.typ}},
			Konnectivity: &v1alpha1.KonnectivitySpec{Agent: v1alpha1.KonnectivityAgentSpec{Host: tt.host, Port: ptr.To[int32](8132), APIPort: ptr.To[int32](443)}},
		}}
		_, warnings := Validate(cfg)
		var warned []string
		for _, w := range warnings {
			if strings.HasPrefix(w, "spec.konnectivity.agent.host") || strings.HasPrefix(w, "spec.serving.externalHostname") {
				warned = append(warned, w)
			}
		}
		if tt.warns == "" && len(warned) > 0 || tt.warns != "" && (len(warned) != 1 || !strings.HasPrefix(warned[0], tt.warns)) {
			t.Errorf("host %q, externalHostname %q on a %s Service: warned %q, want one at %q", tt.host, tt.external, tt.typ, warned, tt.warns)
		}
	}
}

// TestKonnectivityServingCertificate_NamesWhatTheAgentsDialAndNoMore: the
// server's certificate names the agents' host and their Service; a new
// extra SAN of the apiservers does not change it (the server reads it at
// start: a change would roll every pod).
func TestKonnectivityServingCertificate_NamesWhatTheAgentsDialAndNoMore(t *testing.T) {
	cfg := sample(t, "minimal")
	cfg.Spec.Konnectivity = &v1alpha1.KonnectivitySpec{Agent: v1alpha1.KonnectivityAgentSpec{Host: "203.0.113.7"}}
	c, err := Complete(cfg, Inputs{})
	if err != nil {
		t.Fatal(err)
	}
	before := KonnectivityServingCertConfig(c)
	svc := KonnectivityServiceName(cfg.Name) + "." + cfg.Namespace + ".svc"
	if !slices.Contains(before.DNSNames, svc) || !slices.ContainsFunc(before.IPs, func(ip net.IP) bool { return ip.String() == "203.0.113.7" }) {
		t.Errorf("the certificate names %v and %v, want %s and 203.0.113.7", before.DNSNames, before.IPs, svc)
	}
	cfg.Spec.Serving.ExtraSANs = append(cfg.Spec.Serving.ExtraSANs, "new.example.com", "198.51.100.9")
	c, err = Complete(cfg, Inputs{})
	if err != nil {
		t.Fatal(err)
	}
	if after := KonnectivityServingCertConfig(c); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("a new extra SAN changed the konnectivity server's certificate: %v -> %v", before, after)
	}
}

// A scale of a tenant with the proxy changes the number of apiservers,
// never their pod template: the agents count the servers' Leases, no flag
// of the pod says how many there are.
func TestDesiredDeployment_KonnectivityScaleRollsNoPod(t *testing.T) {
	cfg := sample(t, "konnectivity")
	templates := map[int32]corev1.PodTemplateSpec{}
	for _, replicas := range []int32{1, 2, 5} {
		cfg.Spec.MasterCount = ptr.To(replicas)
		_, d, _, _ := desiredObjectsOf(t, cfg)
		if !slices.ContainsFunc(d.Spec.Template.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == "konnectivity-server" }) {
			t.Fatalf("masterCount %d: the pod runs no konnectivity server", replicas)
		}
		templates[replicas] = d.Spec.Template
	}
	for _, replicas := range []int32{2, 5} {
		if diff := cmp.Diff(templates[1], templates[replicas]); diff != "" {
			t.Errorf("the pod template of masterCount %d differs from that of 1 (a scale would roll every pod):\n%s", replicas, diff)
		}
	}
}

// The agents reach the apiservers, to count the servers, at the external
// host name (the tenant's Service; the agents' Service has a load balancer
// of its own), or at the agents' host without one, at the Service's ports
// or node ports.
func TestKonnectivityAgentKubeconfig_ReachesTheApiserversWhereTheNodesDo(t *testing.T) {
	for name, tt := range map[string]struct {
		edit            func(*v1alpha1.ApiServerConfigSpec)
		want, wantAgent string
	}{
		"the sample": {func(*v1alpha1.ApiServerConfigSpec) {}, "https://konnectivity.tenants.example.com:443", "8132"},
		"agents' own ports": {func(s *v1alpha1.ApiServerConfigSpec) {
			s.Konnectivity.Agent.APIPort, s.Konnectivity.Agent.Port = ptr.To[int32](8443), ptr.To[int32](9132)
		}, "https://konnectivity.tenants.example.com:8443", "9132"},
		"agents' own host": {func(s *v1alpha1.ApiServerConfigSpec) { s.Konnectivity.Agent.Host = "10.1.2.3" }, "https://konnectivity.tenants.example.com:443", "8132"},
		"agents' own host, no external host name": {func(s *v1alpha1.ApiServerConfigSpec) {
			s.Konnectivity.Agent.Host, s.Serving.ExternalHostname = "10.1.2.3", ""
		}, "https://10.1.2.3:443", "8132"},
		"a NodePort Service": {func(s *v1alpha1.ApiServerConfigSpec) {
			s.Serving.Service.Type, s.Serving.Service.NodePort, s.Konnectivity.NodePort = corev1.ServiceTypeNodePort, ptr.To[int32](30443), ptr.To[int32](30132)
		}, "https://konnectivity.tenants.example.com:30443", "30132"},
		"a load balancer's node ports": {func(s *v1alpha1.ApiServerConfigSpec) {
			s.Serving.Service.NodePort, s.Konnectivity.NodePort = ptr.To[int32](30443), ptr.To[int32](30132)
		}, "https://konnectivity.tenants.example.com:443", "8132"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := sample(t, "konnectivity")
			tt.edit(&cfg.Spec)
			data, err := konnectivityAgentKubeconfig(complete(t, cfg, Inputs{}))
			if err != nil {
				t.Fatal(err)
			}
			kc, err := clientcmd.Load(data)
			if err != nil {
				t.Fatal(err)
			}
			cluster := kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster]
			if cluster.Server != tt.want {
				t.Errorf("the agents' kubeconfig names %s, want %s", cluster.Server, tt.want)
			}
			if user := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo]; user.TokenFile != konnectivityAgentAPITokenFile || cluster.CertificateAuthority != konnectivityAgentCAFile {
				t.Errorf("the agents' kubeconfig reads %s and %s, want the bound token and the konnectivity CA", user.TokenFile, cluster.CertificateAuthority)
			}
			if cluster.TLSServerName != KonnectivityAgentServerName {
				t.Errorf("the agents ask the apiservers for %q, want %s, which they answer with a certificate of the konnectivity CA", cluster.TLSServerName, KonnectivityAgentServerName)
			}
			objects, err := KonnectivityAgentObjects(complete(t, cfg, Inputs{}), testKonnectivityCA, "")
			if err != nil {
				t.Fatal(err)
			}
			daemonSets := 0
			for _, o := range objects {
				if ds, ok := o.(*appsv1.DaemonSet); ok {
					daemonSets++
					if !slices.Contains(ds.Spec.Template.Spec.Containers[0].Args, "--proxy-server-port="+tt.wantAgent) {
						t.Errorf("the agents dial %q, want port %s", ds.Spec.Template.Spec.Containers[0].Args, tt.wantAgent)
					}
				}
			}
			if daemonSets != 1 {
				t.Errorf("the agents' manifests hold %d DaemonSets, want 1", daemonSets)
			}
		})
	}
}

// On a NodePort Service whose node ports are allocated, the agents'
// manifests cannot name them: admission warns, once per port left out.
func TestValidate_WarnsWhenTheAgentsWouldDialAnAllocatedNodePort(t *testing.T) {
	for _, tt := range []struct {
		name                         string
		agentPort, konnNode, apiPort *int32
		serviceNode                  *int32
		wantAgentPort, wantAPIPort   bool
	}{
		{name: "nothing fixed", wantAgentPort: true, wantAPIPort: true},
		{name: "node ports fixed", konnNode: ptr.To[int32](30132), serviceNode: ptr.To[int32](30443)},
		{name: "agents' ports given", agentPort: ptr.To[int32](8132), apiPort: ptr.To[int32](443)},
		{name: "only the agents' port", konnNode: ptr.To[int32](30132), wantAPIPort: true},
	} {
		cfg := &v1alpha1.ApiServerConfig{Spec: v1alpha1.ApiServerConfigSpec{
			Etcd: v1alpha1.EtcdSpec{Servers: []string{"https://etcd:2379"}},
			Serving: v1alpha1.ServingSpec{ExternalHostname: "edge.example.com",
				Service: v1alpha1.ServiceSpec{Type: corev1.ServiceTypeNodePort, NodePort: tt.serviceNode}},
			Konnectivity: &v1alpha1.KonnectivitySpec{NodePort: tt.konnNode, Agent: v1alpha1.KonnectivityAgentSpec{Port: tt.agentPort, APIPort: tt.apiPort}},
		}}
		_, warnings := Validate(cfg)
		for prefix, want := range map[string]bool{"spec.konnectivity.agent.port:": tt.wantAgentPort, "spec.konnectivity.agent.apiPort:": tt.wantAPIPort} {
			if got := slices.ContainsFunc(warnings, func(w string) bool { return strings.HasPrefix(w, prefix) }); got != want {
				t.Errorf("%s: warned about %s %v, want %v (%v)", tt.name, prefix, got, want, warnings)
			}
		}
	}
}

// The agents read their kubeconfig and CA once, at start: a change of
// where they reach the apiservers, or of the konnectivity CA, changes
// their pod template, so that they roll.
func TestKonnectivityAgentObjects_ANewKubeconfigOrCARollsTheAgents(t *testing.T) {
	hashOf := func(ca []byte, edit func(*v1alpha1.ApiServerConfigSpec)) string {
		cfg := sample(t, "konnectivity")
		edit(&cfg.Spec)
		objects, err := KonnectivityAgentObjects(complete(t, cfg, Inputs{}), ca, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objects {
			if ds, ok := o.(*appsv1.DaemonSet); ok {
				return ds.Spec.Template.Annotations[KonnectivityAgentKubeconfigHashAnnotation]
			}
		}
		t.Fatal("the agents' manifests hold no DaemonSet")
		return ""
	}
	hash := func(edit func(*v1alpha1.ApiServerConfigSpec)) string { return hashOf(testKonnectivityCA, edit) }
	same, before := hash(func(*v1alpha1.ApiServerConfigSpec) {}), hash(func(*v1alpha1.ApiServerConfigSpec) {})
	after := hash(func(s *v1alpha1.ApiServerConfigSpec) { s.Konnectivity.Agent.APIPort = ptr.To[int32](6443) })
	if before == "" || before != same || before == after {
		t.Errorf("the agents' template hashes its kubeconfig as %q, %q again, %q for another apiPort: want one stable hash that changes with it", before, same, after)
	}
	if newCA := hashOf([]byte("another konnectivity CA\n"), func(*v1alpha1.ApiServerConfigSpec) {}); newCA == before {
		t.Errorf("the agents' template hashes to %q with another konnectivity CA too: the agents would keep trusting the old one", newCA)
	}
}

// testKonnectivityCA stands for the konnectivity CA where only its bytes
// matter (the golden files, the agents' hash).
var testKonnectivityCA = []byte("-----BEGIN CERTIFICATE-----\nthe konnectivity CA\n-----END CERTIFICATE-----\n")

// konnectivityPKI is the PKI of a tenant with spec.konnectivity whose
// cluster CA ca signs and whose clients trust bundle, with the
// konnectivity CA konnectivity.
func konnectivityPKI(c *Completed, ca *pki.KeyPair, bundle []byte, konnectivity *pki.KeyPair) Material {
	now := time.Now()
	alg := c.Spec.Certificates.KeyAlgorithm
	issue := func(signer *pki.KeyPair, cfg pki.CertConfig) *pki.KeyPair {
		return must(pki.NewSignedCert(signer, cfg, alg, time.Hour, now))
	}
	fpCA := must(pki.NewSelfSignedCA("front-proxy-ca", alg, 24*time.Hour, now))
	sa := must(pki.NewServiceAccountKey(alg))
	admin := issue(ca, pki.AdminCertConfig())
	return Material{PKI: PKISecrets{
		CA: ca, CABundle: bundle,
		Serving:       issue(ca, pki.ServingCertConfig(c.SANs.DNSNames, c.SANs.IPs)),
		KubeletClient: issue(ca, pki.KubeletClientCertConfig()),
		FrontProxyCA:  fpCA, FrontProxyCABundle: pki.TrustBundle(now, fpCA.Cert()),
		FrontProxyClient:         issue(fpCA, pki.FrontProxyClientCertConfig()),
		ServiceAccountSigningKey: must(sa.PrivateKeyPEM()),
		ServiceAccountPublicKeys: must(pki.PublicKeysPEM(sa.Public())),
		AdminKubeconfig:          must(pki.AdminKubeconfig(c.Name, c.Endpoint, bundle, admin.CertPEM(), must(admin.KeyPEM()))),
		KonnectivityCA:           konnectivity,
		KonnectivityServing:      issue(konnectivity, KonnectivityServingCertConfig(c)),
		KonnectivityAPIServer:    issue(konnectivity, KonnectivityAPIServerCertConfig()),
		KonnectivityClient:       issue(ca, KonnectivityServerCertConfig()),
	}}
}

func newTestCA(t *testing.T, c *Completed, name string) *pki.KeyPair {
	t.Helper()
	return must(pki.NewSelfSignedCA(name, c.Spec.Certificates.KeyAlgorithm, 24*time.Hour, time.Now()))
}

// What the agents see of a tenant depends on the konnectivity CA alone:
// through every phase of a rotation of the cluster CA (both trusted, the
// new one signing, the old one gone), the manifests published for them,
// their ConfigMap with its CA included, stay byte for byte what they were,
// so that no agent rolls or loses trust in its servers; and the server's
// certificate for them is the konnectivity CA's.
func TestDesired_KonnectivityAgentsSeeNothingOfAClusterCARotation(t *testing.T) {
	c := complete(t, sample(t, "konnectivity"), Inputs{})
	konnectivity := newTestCA(t, c, KonnectivityCACommonName)
	oldCA, newCA := newTestCA(t, c, "kubernetes"), newTestCA(t, c, "kubernetes")
	now := time.Now()
	render := func(m Material) *Objects {
		t.Helper()
		o, err := Desired(c, m, Environment{})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	before := render(konnectivityPKI(c, oldCA, pki.TrustBundle(now, oldCA.Cert()), konnectivity))
	if before.KonnectivityAgent == nil {
		t.Fatal("a tenant with spec.konnectivity publishes no agents' manifests")
	}
	if !strings.Contains(before.KonnectivityAgent.Data[KonnectivityAgentManifestsKey], strings.TrimSpace(strings.SplitN(string(konnectivity.CertPEM()), "\n", 3)[1])) {
		t.Error("the agents' manifests do not carry the konnectivity CA")
	}
	for phase, m := range map[string]Material{
		"TrustNew":    konnectivityPKI(c, oldCA, pki.TrustBundle(now, oldCA.Cert(), newCA.Cert()), konnectivity),
		"SignWithNew": konnectivityPKI(c, newCA, pki.TrustBundle(now, newCA.Cert(), oldCA.Cert()), konnectivity),
		"Stable":      konnectivityPKI(c, newCA, pki.TrustBundle(now, newCA.Cert()), konnectivity),
	} {
		after := render(m)
		if diff := cmp.Diff(before.KonnectivityAgent.Data, after.KonnectivityAgent.Data); diff != "" {
			t.Errorf("%s: the agents' manifests changed with the cluster CA (-before +after):\n%s", phase, diff)
		}
		for _, s := range after.Secrets {
			if s.Name != KonnectivityServerSecretName(c.Name) && s.Name != KonnectivityAPIServerSecretName(c.Name) {
				continue
			}
			roots := x509.NewCertPool()
			roots.AddCert(konnectivity.Cert())
			cert := must(pki.ParseKeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])).Cert()
			if _, err := cert.Verify(x509.VerifyOptions{Roots: roots}); err != nil {
				t.Errorf("%s: Secret %s holds a certificate the agents cannot verify with the konnectivity CA: %v", phase, s.Name, err)
			}
		}
	}
	// A new konnectivity CA is what the agents must see: their manifests
	// change, and their template with them.
	other := render(konnectivityPKI(c, oldCA, pki.TrustBundle(now, oldCA.Cert()), newTestCA(t, c, KonnectivityCACommonName)))
	if other.KonnectivityAgent.Data[KonnectivityAgentManifestsKey] == before.KonnectivityAgent.Data[KonnectivityAgentManifestsKey] {
		t.Error("the agents' manifests are the same for another konnectivity CA")
	}
}

// kube-apiserver answers the agents' server name with its certificate of
// the konnectivity CA (--tls-sni-cert-key, from a Secret of the operator's
// in its PKI directory), which it re-reads: renewing it rolls no pod. A
// tenant without spec.konnectivity has neither the flag nor the Secret.
func TestDesired_KonnectivityAPIServerAnswersTheAgentsName(t *testing.T) {
	c := complete(t, sample(t, "konnectivity"), Inputs{})
	konnectivity, ca := newTestCA(t, c, KonnectivityCACommonName), newTestCA(t, c, "kubernetes")
	bundle := pki.TrustBundle(time.Now(), ca.Cert())
	o, err := Desired(c, konnectivityPKI(c, ca, bundle, konnectivity), Environment{})
	if err != nil {
		t.Fatal(err)
	}
	var sni []string
	for _, a := range o.Args {
		if v, ok := strings.CutPrefix(a, "--tls-sni-cert-key="); ok {
			sni = append(sni, v)
		}
	}
	want := KonnectivityAPIServerCertFile + "," + KonnectivityAPIServerKeyFile + ":" + KonnectivityAgentServerName
	if len(sni) != 1 || sni[0] != want {
		t.Fatalf("kube-apiserver runs with --tls-sni-cert-key=%q, want %q", sni, want)
	}
	files := o.PodFiles(c, nil)
	kp, err := pki.ParseKeyPair(files[KonnectivityAPIServerCertFile], files[KonnectivityAPIServerKeyFile])
	if err != nil {
		t.Fatalf("the pods' files at --tls-sni-cert-key are no key pair: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(konnectivity.Cert())
	if _, err := kp.Cert().Verify(x509.VerifyOptions{Roots: roots, DNSName: KonnectivityAgentServerName}); err != nil {
		t.Errorf("kube-apiserver's certificate for the agents does not verify with the konnectivity CA for %s: %v", KonnectivityAgentServerName, err)
	}
	mounted := false
	for _, v := range o.Deployment.Spec.Template.Spec.Volumes {
		if v.Name != "pki" {
			continue
		}
		for _, src := range v.Projected.Sources {
			mounted = mounted || src.Secret != nil && src.Secret.Name == KonnectivityAPIServerSecretName(c.Name)
		}
	}
	if !mounted {
		t.Errorf("kube-apiserver's PKI volume does not carry Secret %s", KonnectivityAPIServerSecretName(c.Name))
	}
	// The same material but for that certificate, renewed.
	m := konnectivityPKI(c, ca, bundle, konnectivity)
	first := must(Desired(c, m, Environment{}))
	m.PKI.KonnectivityAPIServer = must(pki.NewSignedCert(konnectivity, KonnectivityAPIServerCertConfig(), c.Spec.Certificates.KeyAlgorithm, time.Hour, time.Now()))
	second := must(Desired(c, m, Environment{}))
	if a, b := first.Deployment.Spec.Template.Annotations[ConfigHashAnnotation], second.Deployment.Spec.Template.Annotations[ConfigHashAnnotation]; a != b {
		t.Error("renewing kube-apiserver's certificate for the agents rolls the pods; kube-apiserver re-reads it")
	}

	without := complete(t, sample(t, "minimal"), Inputs{})
	args, err := Args(without)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--tls-sni-cert-key=") }) {
		t.Error("a tenant without spec.konnectivity runs with --tls-sni-cert-key")
	}
	for _, o := range MountedObjects(without) {
		if slices.Contains(KonnectivitySecretNames(without.Name), o.Name) {
			t.Errorf("a tenant without spec.konnectivity mounts %s", o.Name)
		}
	}
}

// The published agents trust the konnectivity CA of their ConfigMap
// only: --ca-cert and their kubeconfig name the file of that key where
// the ConfigMap is mounted, and no volume projects the tenant's CA
// bundle (kube-root-ca.crt); the bound token for the apiservers stays.
func TestKonnectivityAgentObjects_TrustOnlyTheKonnectivityCA(t *testing.T) {
	objects, err := KonnectivityAgentObjects(complete(t, sample(t, "konnectivity"), Inputs{}), testKonnectivityCA, "")
	if err != nil {
		t.Fatal(err)
	}
	var cm *corev1.ConfigMap
	var ds *appsv1.DaemonSet
	for _, o := range objects {
		switch o := o.(type) {
		case *corev1.ConfigMap:
			cm = o
		case *appsv1.DaemonSet:
			ds = o
		}
	}
	if cm == nil || ds == nil {
		t.Fatalf("the agents' manifests hold ConfigMap %v and DaemonSet %v", cm != nil, ds != nil)
	}
	if cm.Name != KonnectivityAgentServiceAccount || cm.Namespace != KonnectivityAgentNamespace || cm.Data[KonnectivityAgentCAKey] != string(testKonnectivityCA) {
		t.Fatalf("ConfigMap %s/%s carries %q as %s, want the konnectivity CA in %s/%s", cm.Namespace, cm.Name, cm.Data[KonnectivityAgentCAKey], KonnectivityAgentCAKey,
			KonnectivityAgentNamespace, KonnectivityAgentServiceAccount)
	}
	pod := ds.Spec.Template.Spec
	// Where the ConfigMap's keys land in the agent's container.
	files := map[string]string{}
	for _, v := range pod.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
			for _, m := range pod.Containers[0].VolumeMounts {
				if m.Name == v.Name {
					for key, value := range cm.Data {
						files[m.MountPath+"/"+key] = value
					}
				}
			}
		}
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.ConfigMap != nil || src.Secret != nil {
					t.Errorf("volume %s projects %+v: the agents need nothing of the tenant's but their tokens", v.Name, src)
				}
			}
		}
	}
	caCert := ""
	for _, a := range pod.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--ca-cert="); ok {
			caCert = v
		}
	}
	if files[caCert] != string(testKonnectivityCA) {
		t.Errorf("the agents verify the servers with --ca-cert=%s, which is not the konnectivity CA of their ConfigMap (mounted: %v)", caCert, slices.Sorted(maps.Keys(files)))
	}
	kc, err := clientcmd.Load([]byte(cm.Data[KonnectivityAgentKubeconfigKey]))
	if err != nil {
		t.Fatal(err)
	}
	if cluster := kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster]; files[cluster.CertificateAuthority] != string(testKonnectivityCA) || cluster.TLSServerName != KonnectivityAgentServerName {
		t.Errorf("the agents' kubeconfig verifies the apiservers with %s as %q, want the konnectivity CA of their ConfigMap as %s", cluster.CertificateAuthority, cluster.TLSServerName, KonnectivityAgentServerName)
	}
	if files[konnectivityAgentConfigDir+"/"+KonnectivityAgentKubeconfigKey] == "" {
		t.Error("the agents' kubeconfig is not mounted where --kubeconfig names it")
	}
	tokens := 0
	for _, v := range pod.Volumes {
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.ServiceAccountToken != nil {
					tokens++
				}
			}
		}
	}
	if tokens != 2 {
		t.Errorf("the agents get %d bound tokens, want 2 (the servers', the apiservers')", tokens)
	}
}

// With spec.konnectivity, --tls-sni-cert-key is the operator's: a user's
// is refused at the field; without it, the flag is the user's.
func TestValidate_KonnectivityOwnsTheSNICertificates(t *testing.T) {
	for _, konnectivity := range []bool{true, false} {
		cfg := &v1alpha1.ApiServerConfig{Spec: v1alpha1.ApiServerConfigSpec{
			Etcd:      v1alpha1.EtcdSpec{Servers: []string{"https://etcd:2379"}},
			Serving:   v1alpha1.ServingSpec{ExternalHostname: "edge.example.com"},
			ExtraArgs: []v1alpha1.ExtraArg{{Name: "tls-sni-cert-key", Value: "/etc/kubernetes/pki/apiserver.crt,/etc/kubernetes/pki/apiserver.key:x.example.com"}},
		}}
		if konnectivity {
			cfg.Spec.Konnectivity = &v1alpha1.KonnectivitySpec{}
		}
		errs, _ := Validate(cfg)
		refused := slices.ContainsFunc(errs, func(e *field.Error) bool { return e.Field == "spec.extraArgs[0].name" })
		if refused != konnectivity {
			t.Errorf("a user's --tls-sni-cert-key with konnectivity %v: refused %v, want %v (%v)", konnectivity, refused, konnectivity, errs)
		}
	}
}

// TestDesiredKonnectivityService_HasItsOwnAnnotations: the agents'
// Service takes spec.konnectivity.serviceAnnotations, never the tenant
// Service's (an external-dns name of the apiservers would then name the
// agents' load balancer too), and sends to pods that are not ready.
func TestDesiredKonnectivityService_HasItsOwnAnnotations(t *testing.T) {
	cfg := sample(t, "konnectivity")
	cfg.Spec.Serving.Service.Annotations = map[string]string{"external-dns.alpha.kubernetes.io/hostname": "edge.example.com"}
	cfg.Spec.Konnectivity.ServiceAnnotations = map[string]string{"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"}
	svc := DesiredKonnectivityService(complete(t, cfg, Inputs{}))
	if !maps.Equal(svc.Annotations, cfg.Spec.Konnectivity.ServiceAnnotations) {
		t.Errorf("the agents' Service has the annotations %v, want %v", svc.Annotations, cfg.Spec.Konnectivity.ServiceAnnotations)
	}
	if svc.Spec.Type != cfg.Spec.Serving.Service.Type || !svc.Spec.PublishNotReadyAddresses || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != DefaultKonnectivityPort {
		t.Errorf("the agents' Service is %+v, want the tenant Service's type, pods not ready published, the agents' port", svc.Spec)
	}
	cfg.Spec.Konnectivity = nil
	if svc := DesiredKonnectivityService(complete(t, cfg, Inputs{})); svc != nil {
		t.Errorf("a tenant without spec.konnectivity has the agents' Service %s", svc.Name)
	}
}
