//go:build e2e

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/test/localcluster"
)

const (
	smokeName  = "kube-apiserver"
	securePort = 6443
)

// TestBundledAPIServer_ServesVersionThroughNodePort runs the bundled
// kube-apiserver image in a Deployment against the tenant etcd servers over
// TLS (events on the second one), waits for kubelet's probes to mark it
// Ready, and reads /version through a NodePort on the node's address.
func TestBundledAPIServer_ServesVersionThroughNodePort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cs := clientset(t)

	// A namespace of its own, so that a rerun on a kept cluster starts
	// afresh; its name is also the etcd prefix.
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-smoke-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("Creating the test namespace: %v", err)
	}
	smokeNamespace := ns.Name
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), smokeNamespace, metav1.DeleteOptions{})
	})
	etcd := cluster.TenantEtcd()
	copySecret(ctx, t, cs, etcd.SecretNamespace, etcd.SecretName, smokeNamespace)

	caPEM, servingSecret := servingCredentials(t, smokeNamespace, cluster.NodeIP())
	create(ctx, t, cs, servingSecret)
	svc := create(ctx, t, cs, smokeService(smokeNamespace)).(*corev1.Service)
	nodePort := svc.Spec.Ports[0].NodePort
	start := time.Now()
	create(ctx, t, cs, smokeDeployment(smokeNamespace, etcd))

	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().Deployments(smokeNamespace).Get(ctx, smokeName, metav1.GetOptions{})
		if err != nil {
			t.Logf("Reading Deployment %s/%s failed, retrying: %v", smokeNamespace, smokeName, err)
			return false, nil
		}
		return d.Status.ObservedGeneration >= d.Generation && d.Status.ReadyReplicas == 1, nil
	})
	if err != nil {
		describe(t, smokeNamespace)
		t.Fatalf("Waiting for Deployment %s/%s to become Ready through its probes: %v", smokeNamespace, smokeName, err)
	}
	t.Logf("Deployment %s/%s Ready after %s", smokeNamespace, smokeName, time.Since(start).Round(100*time.Millisecond))

	base := "https://" + net.JoinHostPort(cluster.NodeIP(), strconv.Itoa(int(nodePort)))
	body := get(ctx, t, base+"/version", caPEM)
	var info struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.Unmarshal(body, &info); err != nil {
		t.Fatalf("Decoding /version %q: %v", body, err)
	}
	if info.GitVersion != v1alpha1.BundledVersion {
		t.Fatalf("GET %s/version: gitVersion %q, want %q", base, info.GitVersion, v1alpha1.BundledVersion)
	}
	t.Logf("GET %s/version through the NodePort: gitVersion %s", base, info.GitVersion)

	// Both tenant etcd servers answer the pod over TLS: the main one and
	// the events override each have a readiness check.
	readyz := string(get(ctx, t, base+"/readyz?verbose", caPEM))
	for _, check := range []string{"[+]etcd ok", "[+]etcd-override-0 ok"} {
		if !strings.Contains(readyz, check) {
			t.Errorf("GET %s/readyz?verbose lacks %q:\n%s", base, check, readyz)
		}
	}
	t.Logf("GET %s/readyz?verbose: etcd and etcd-override-0 (events) ok", base)
}

func clientset(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	cfg, err := cluster.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("Creating a client of the local cluster: %v", err)
	}
	return cs
}

func copySecret(ctx context.Context, t testing.TB, cs *kubernetes.Clientset, fromNS, name, toNS string) {
	t.Helper()
	s, err := cs.CoreV1().Secrets(fromNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Reading the tenant etcd client Secret %s/%s: %v", fromNS, name, err)
	}
	create(ctx, t, cs, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: toNS, Name: name},
		Type:       s.Type,
		Data:       s.Data,
	})
}

// create creates obj and returns what the apiserver stored.
func create(ctx context.Context, t testing.TB, cs *kubernetes.Clientset, obj any) any {
	t.Helper()
	var out any
	var err error
	switch o := obj.(type) {
	case *corev1.Secret:
		out, err = cs.CoreV1().Secrets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *corev1.Service:
		out, err = cs.CoreV1().Services(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *appsv1.Deployment:
		out, err = cs.AppsV1().Deployments(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	default:
		t.Fatalf("create: unsupported type %T", obj)
	}
	if err != nil {
		t.Fatalf("Creating %T: %v", obj, err)
	}
	return out
}

// servingCredentials returns a CA and a Secret with a serving certificate
// it signed for the node's address (where the NodePort is), and the service
// account signing key.
func servingCredentials(t testing.TB, smokeNamespace, nodeIP string) ([]byte, *corev1.Secret) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("Generating the serving CA key: %v", err)
	}
	ca, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "e2e-smoke-ca"}, caKey)
	if err != nil {
		t.Fatalf("Self-signing the serving CA: %v", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("Generating the serving key: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:     []string{"localhost", smokeName + "." + smokeNamespace + ".svc"},
		IPAddresses:  []net.IP{net.ParseIP(nodeIP), net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatalf("Signing the serving certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("Parsing the serving certificate: %v", err)
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("Generating the service account key: %v", err)
	}
	caPEM, err := certutil.EncodeCertificates(ca)
	if err != nil {
		t.Fatalf("Encoding the serving CA: %v", err)
	}
	certPEM, err := certutil.EncodeCertificates(cert)
	if err != nil {
		t.Fatalf("Encoding the serving certificate: %v", err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		t.Fatalf("Encoding the serving key: %v", err)
	}
	saPEM, err := keyutil.MarshalPrivateKeyToPEM(saKey)
	if err != nil {
		t.Fatalf("Encoding the service account key: %v", err)
	}
	return caPEM, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: smokeNamespace, Name: smokeName + "-certs"},
		Data:       map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "sa.key": saPEM},
	}
}

// smokeService exposes the apiserver on a NodePort that the cluster picks.
func smokeService(smokeNamespace string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: smokeNamespace, Name: smokeName},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: map[string]string{"app": smokeName},
			Ports: []corev1.ServicePort{{
				Name: "https", Port: 443, TargetPort: intstr.FromInt32(securePort),
			}},
		},
	}
}

func smokeDeployment(smokeNamespace string, etcd localcluster.TenantEtcd) *appsv1.Deployment {
	probe := func(path string, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: path, Port: intstr.FromInt32(securePort), Scheme: corev1.URISchemeHTTPS,
			}},
			PeriodSeconds: 2, TimeoutSeconds: 5, FailureThreshold: failures,
		}
	}
	labels := map[string]string{"app": smokeName}
	replicas := int32(1)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: smokeNamespace, Name: smokeName},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken: new(bool),
					Containers: []corev1.Container{{
						Name:            "kube-apiserver",
						Image:           localcluster.APIServerImage,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Command: []string{
							"kube-apiserver",
							"--etcd-servers=" + etcd.MainURL,
							"--etcd-servers-overrides=/events#" + etcd.EventsURL,
							"--etcd-cafile=/etc/etcd-client/ca.crt",
							"--etcd-certfile=/etc/etcd-client/tls.crt",
							"--etcd-keyfile=/etc/etcd-client/tls.key",
							"--etcd-prefix=/" + smokeNamespace,
							"--secure-port=" + strconv.Itoa(securePort),
							"--tls-cert-file=/etc/kube-apiserver/tls.crt",
							"--tls-private-key-file=/etc/kube-apiserver/tls.key",
							"--service-account-issuer=https://kubernetes.default.svc",
							"--service-account-key-file=/etc/kube-apiserver/sa.key",
							"--service-account-signing-key-file=/etc/kube-apiserver/sa.key",
							"--service-cluster-ip-range=10.32.0.0/24",
							"--authorization-mode=RBAC",
							"--cert-dir=/tmp",
						},
						Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: securePort}},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU:    resource.MustParse("100m"),
							corev1.ResourceMemory: resource.MustParse("256Mi"),
						}},
						StartupProbe:   probe("/livez", 60),
						LivenessProbe:  probe("/livez", 3),
						ReadinessProbe: probe("/readyz", 3),
						VolumeMounts: []corev1.VolumeMount{
							{Name: "etcd-client", MountPath: "/etc/etcd-client", ReadOnly: true},
							{Name: "certs", MountPath: "/etc/kube-apiserver", ReadOnly: true},
						},
					}},
					Volumes: []corev1.Volume{
						{Name: "etcd-client", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: etcd.SecretName}}},
						{Name: "certs", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: smokeName + "-certs"}}},
					},
				},
			},
		},
	}
}

// get polls url until it answers 200, verifying the server with caPEM,
// and returns the body.
func get(ctx context.Context, t testing.TB, url string, caPEM []byte) []byte {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	var body []byte
	var last error
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err
			return false, nil
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			last = fmt.Errorf("reading the body of a %s answer: %w", resp.Status, err)
			return false, nil
		}
		if resp.StatusCode != http.StatusOK {
			last = fmt.Errorf("status %s, body %q", resp.Status, b)
			return false, nil
		}
		body = b
		return true, nil
	})
	if err != nil {
		t.Fatalf("GET %s through the NodePort: %v (last error: %v)", url, err, last)
	}
	return body
}

// describe logs what the cluster knows about the smoke test's pods, to
// explain a failure.
func describe(t testing.TB, smokeNamespace string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, args := range [][]string{
		{"-n", smokeNamespace, "describe", "pods"},
		{"-n", smokeNamespace, "logs", "deployment/" + smokeName, "--tail=40"},
	} {
		out, _ := cluster.Kubectl(ctx, args...).CombinedOutput()
		t.Logf("kubectl %v:\n%s", args, out)
	}
}
