package boot

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
)

// sarServer is an authorization webhook: an HTTPS server on 127.0.0.1
// with a CA of its own that answers authorization.k8s.io/v1
// SubjectAccessReviews at a path per webhook of the chain (/payments,
// /audit), each taking only the bearer token it is given. Its policy lets
// alice, and the group auditors, read ConfigMaps in every namespace: which
// requests it is asked about is for the chain's matchConditions to say.
type sarServer struct {
	url string
	ca  *pki.KeyPair
	mu  sync.Mutex
	// tokens is the token each webhook path takes.
	tokens map[string]string
	calls  []sarCall
	// malformed are the requests that were not a SubjectAccessReview.
	malformed []string
}

// sarCall is one SubjectAccessReview the server was sent.
type sarCall struct {
	webhook, namespace, user, token string
	// refused is a call whose token was not the webhook's (401).
	refused bool
	allowed bool
}

func newSARServer(t *testing.T) *sarServer {
	t.Helper()
	now := time.Now()
	s := &sarServer{tokens: map[string]string{}, ca: must(pki.NewSelfSignedCA("authz-webhook-ca", ecdsa, time.Hour, now))}
	serving := must(pki.NewSignedCert(s.ca, pki.ServingCertConfig(nil, []net.IP{net.ParseIP("127.0.0.1")}), ecdsa, time.Hour, now))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{serving.Cert().Raw}, PrivateKey: serving.Key()}}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

func (s *sarServer) serve(w http.ResponseWriter, req *http.Request) {
	webhook := strings.TrimPrefix(req.URL.Path, "/")
	var review authorizationv1.SubjectAccessReview
	err := json.NewDecoder(req.Body).Decode(&review)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || req.Method != http.MethodPost || review.APIVersion != authorizationv1.SchemeGroupVersion.String() || review.Kind != "SubjectAccessReview" {
		s.malformed = append(s.malformed, fmt.Sprintf("%s %s: %v (%s %s)", req.Method, req.URL, err, review.APIVersion, review.Kind))
		http.Error(w, "not an authorization.k8s.io/v1 SubjectAccessReview", http.StatusBadRequest)
		return
	}
	spec := review.Spec
	call := sarCall{webhook: webhook, user: spec.User, token: strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer ")}
	if a := spec.ResourceAttributes; a != nil {
		call.namespace = a.Namespace
	}
	if want, ok := s.tokens[webhook]; !ok || call.token != want {
		call.refused = true
		s.calls = append(s.calls, call)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	a := spec.ResourceAttributes
	call.allowed = a != nil && a.Group == "" && a.Resource == "configmaps" && (a.Verb == "get" || a.Verb == "list") &&
		(spec.User == "alice" || slices.Contains(spec.Groups, "auditors"))
	s.calls = append(s.calls, call)
	review.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: call.allowed}
	if !call.allowed {
		review.Status.Reason = "only alice and the auditors read ConfigMaps here"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review)
}

// setToken makes webhook take token, and only it.
func (s *sarServer) setToken(webhook, token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[webhook] = token
}

// count is how many calls webhook had about namespace that match.
func (s *sarServer) count(webhook, namespace string, match func(sarCall) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if c.webhook == webhook && c.namespace == namespace && (match == nil || match(c)) {
			n++
		}
	}
	return n
}

// namespaces are the namespaces webhook was asked about, by count.
func (s *sarServer) namespaces(webhook string) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, c := range s.calls {
		if c.webhook == webhook {
			out[c.namespace]++
		}
	}
	return out
}

// kubeconfig is how kube-apiserver reaches webhook: its URL, the server's
// CA and token, all inline.
func (s *sarServer) kubeconfig(webhook, token string) []byte {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[webhook] = &clientcmdapi.Cluster{Server: s.url + "/" + webhook, CertificateAuthorityData: s.ca.CertPEM()}
	cfg.AuthInfos["kube-apiserver"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[webhook] = &clientcmdapi.Context{Cluster: webhook, AuthInfo: "kube-apiserver"}
	cfg.CurrentContext = webhook
	return must(clientcmd.Write(*cfg))
}

// kubeletUpdate makes files the content of the Secret volume mounted at
// dir, as kubelet's atomic writer does: every file is written into a new
// directory, which one rename of the symlink ..data makes current; each
// key's name is a symlink through ..data (made after the swap for a new
// key); names of keys no longer there and the previous directory go last.
// Files bootPod wrote in place become such symlinks, the new names first.
func kubeletUpdate(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	gen := must(os.MkdirTemp(dir, "..gen-"))
	for key, data := range files {
		write(t, filepath.Join(gen, key), data)
	}
	dataLink := filepath.Join(dir, "..data")
	previous, _ := os.Readlink(dataLink)
	if err := os.Symlink(filepath.Base(gen), dataLink+"_tmp"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dataLink+"_tmp", dataLink); err != nil {
		t.Fatal(err)
	}
	// The names of new keys, then those of files written in place.
	var fresh, inPlace []string
	for _, key := range slices.Sorted(maps.Keys(files)) {
		path, target := filepath.Join(dir, key), "..data/"+key
		switch got, err := os.Readlink(path); {
		case err == nil && got == target:
		case os.IsNotExist(err):
			fresh = append(fresh, key)
		default:
			inPlace = append(inPlace, key)
		}
	}
	for _, key := range append(fresh, inPlace...) {
		path := filepath.Join(dir, key)
		if err := os.Symlink("..data/"+key, path+".tmp"); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range must(os.ReadDir(dir)) {
		if _, ok := files[e.Name()]; !ok && !strings.HasPrefix(e.Name(), "..") {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	if previous != "" {
		if err := os.RemoveAll(filepath.Join(dir, previous)); err != nil {
			t.Fatal(err)
		}
	}
}

// A tenant whose spec.authorization.authorizers chains Node, RBAC and
// webhooks has the bundled kube-apiserver, run as rendered, ask each
// webhook only about the requests its CEL matchConditions select: alice,
// to whom RBAC grants nothing, reads ConfigMaps in the namespace the
// payments webhook is asked about and is forbidden elsewhere, where the
// webhook never hears of her. Changes of the webhooks leave the config hash
// alone (no roll), and the same kube-apiserver process takes them from
// the owned Secret as kubelet updates it: a webhook added, matchConditions
// that select another namespace, a second webhook selecting a group, and
// a new token in a webhook's kubeconfig.
func TestRenderedAPIServer_AuthorizationChainAsksWebhooksByMatchConditionsAndReloads(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	etcdCA := must(pki.NewSelfSignedCA("etcd-ca", ecdsa, 24*time.Hour, now))
	etcd, _, _ := etcdServer(t, dir, "main", etcdCA)
	etcdClient := must(pki.NewSignedCert(etcdCA, pki.EtcdClientCertConfig(), ecdsa, time.Hour, now))

	webhooks := newSARServer(t)
	webhooks.setToken("payments", "payments-token-1")
	webhooks.setToken("audit", "audit-token-1")
	// The users' Secrets the webhooks' kubeconfigs are in.
	userSecrets := []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "payments-webhook"}, Data: map[string][]byte{"kubeconfig": webhooks.kubeconfig("payments", "payments-token-1")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "audit-webhook"}, Data: map[string][]byte{"kubeconfig": webhooks.kubeconfig("audit", "audit-token-1")}},
	}
	env := func() apiserver.Environment {
		return apiserver.Environment{Referenced: apiserver.ObjectsData(userSecrets)}
	}

	nodeRBAC := []v1alpha1.Authorizer{{Type: "Node", Name: "node"}, {Type: "RBAC", Name: "rbac"}}
	// Every call of the webhooks is a request: kube-apiserver caches no
	// decision.
	webhook := func(name, secret string, match ...string) v1alpha1.Authorizer {
		w := &v1alpha1.AuthorizerWebhook{KubeconfigSecretName: secret, FailurePolicy: "Deny",
			CacheAuthorizedRequests: ptr.To(false), CacheUnauthorizedRequests: ptr.To(false)}
		for _, m := range match {
			w.MatchConditions = append(w.MatchConditions, v1alpha1.AuthorizerMatchCondition{Expression: m})
		}
		return v1alpha1.Authorizer{Type: "Webhook", Name: name, Webhook: w}
	}
	inNamespace := func(ns string) string {
		return fmt.Sprintf("has(request.resourceAttributes) && request.resourceAttributes.namespace == '%s'", ns)
	}
	cfg := &v1alpha1.ApiServerConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "authz", Namespace: "tenants"},
		Spec: v1alpha1.ApiServerConfigSpec{
			EndpointReconcilerType: v1alpha1.EndpointReconcilerNone,
			Etcd: v1alpha1.EtcdSpec{Servers: []string{etcd}, Prefix: "/tenants/authz",
				TLS: &v1alpha1.EtcdTLS{SecretName: "etcd-client"}},
			ServiceClusterIPRange: []string{"10.120.0.0/16"},
			Serving:               v1alpha1.ServingSpec{SecurePort: int32(freePort(t))},
			ExtraArgs:             []v1alpha1.ExtraArg{{Name: "bind-address", Value: "127.0.0.1"}},
			// bootPod writes the files as the pod has them, and the
			// configuration names the webhooks' kubeconfigs by their paths
			// in the pod, which do not exist here: the chain boots with
			// Node and RBAC, and the webhooks come in by the first reload,
			// which moves those names below the boot directory.
			Authorization: v1alpha1.AuthorizationSpec{Authorizers: slices.Clone(nodeRBAC)},
		},
	}
	b := bootPod(t, dir, cfg, env(), etcdCA, etcdClient, "", nil, "boot-0")
	if !slices.Contains(b.args, "--authorization-config="+apiserver.AuthorizationConfigFile) ||
		slices.ContainsFunc(b.args, func(a string) bool { return strings.HasPrefix(a, "--authorization-mode=") }) {
		t.Fatalf("with spec.authorization.authorizers the command line has no --authorization-config=%s or still an --authorization-mode: %v", apiserver.AuthorizationConfigFile, b.args)
	}

	// rendered is what the authorization Secret holds for spec, as the pod
	// mounts it under AuthorizationDir, by key, and the pods' config hash.
	rendered := func(spec *v1alpha1.ApiServerConfig) (map[string][]byte, string) {
		t.Helper()
		if errs, _ := apiserver.Validate(spec); len(errs) > 0 {
			t.Fatalf("the test spec is invalid: %v", errs.ToAggregate())
		}
		c := must(apiserver.Complete(spec, apiserver.Inputs{}))
		e := env()
		objs := must(apiserver.Desired(c, b.material, e))
		podFiles := objs.PodFiles(c, e.Referenced)
		files := map[string][]byte{}
		for path, data := range podFiles {
			if key, ok := strings.CutPrefix(path, apiserver.AuthorizationDir+"/"); ok {
				// The kubeconfigs are named in kubelet's ..data.
				files[strings.TrimPrefix(key, "..data/")] = data
			}
		}
		if objs.Authorization == nil || objs.Authorization.Name != apiserver.AuthorizationSecretName(spec.Name) ||
			!maps.EqualFunc(files, objs.Authorization.Data, bytes.Equal) {
			t.Fatalf("the pod's files under %s are not the authorization Secret's data: %v", apiserver.AuthorizationDir, slices.Sorted(maps.Keys(files)))
		}
		return files, apiserver.ConfigHash(c, objs.Args, podFiles)
	}
	authzDir := b.root(apiserver.AuthorizationDir)
	configPath := b.root(apiserver.AuthorizationConfigFile)
	bootFiles, bootHash := rendered(cfg)
	if booted := must(os.ReadFile(configPath)); !bytes.Equal(booted, bootFiles[apiserver.AuthorizationConfigKey]) {
		t.Fatalf("kube-apiserver booted with another authorization configuration than the operator renders:\n%s\nwant:\n%s", booted, bootFiles[apiserver.AuthorizationConfigKey])
	}
	// reload renders spec, checks that the pods would not roll, and has
	// kubelet update the Secret's files; the configuration names the
	// kubeconfigs below the boot directory, as in the pod below /. It
	// returns the files by key.
	reload := func(what string, spec *v1alpha1.ApiServerConfig) map[string][]byte {
		t.Helper()
		files, hash := rendered(spec)
		if hash != bootHash {
			t.Fatalf("%s changes the config hash from %s to %s: the pods would roll instead of reloading", what, bootHash, hash)
		}
		moved := maps.Clone(files)
		moved[apiserver.AuthorizationConfigKey] = bytes.ReplaceAll(files[apiserver.AuthorizationConfigKey],
			[]byte(apiserver.AuthorizationDir+"/"), []byte(authzDir+"/"))
		kubeletUpdate(t, authzDir, moved)
		return files
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// as is the admin (system:masters) impersonating user in groups
	// (besides system:authenticated, which kube-apiserver adds).
	as := func(user string, groups ...string) *kubernetes.Clientset {
		return must(kubernetes.NewForConfig(&rest.Config{Host: b.base, QPS: -1,
			TLSClientConfig: rest.TLSClientConfig{CAData: b.ca.CertPEM(), CertData: b.admin.CertPEM(), KeyData: must(b.admin.KeyPEM()), ServerName: "kubernetes.default.svc"},
			Impersonate:     rest.ImpersonationConfig{UserName: user, Groups: groups}}))
	}
	alice, bob := as("alice"), as("bob", "auditors")
	for _, ns := range []string{"payments", "billing"} {
		_ = must(b.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	}
	for _, ns := range []string{"payments", "billing", "default"} {
		_ = must(b.cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ledger"}}, metav1.CreateOptions{}))
	}
	read := func(cs *kubernetes.Clientset, ns string) error {
		_, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "ledger", metav1.GetOptions{})
		return err
	}
	allowed := func(who string, cs *kubernetes.Clientset, ns string) {
		t.Helper()
		if err := read(cs, ns); err != nil {
			t.Errorf("%s reading ConfigMap %s/ledger: %v; want it allowed", who, ns, err)
		}
	}
	forbidden := func(who string, cs *kubernetes.Clientset, ns string) {
		t.Helper()
		if err := read(cs, ns); !apierrors.IsForbidden(err) {
			t.Errorf("%s reading ConfigMap %s/ledger: %v; want it forbidden", who, ns, err)
		}
	}
	// allowedWithin waits until who may read in ns, and says how long
	// that took.
	allowedWithin := func(what, who string, cs *kubernetes.Clientset, ns string, wait time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			err := read(cs, ns)
			if err == nil {
				return time.Since(start)
			}
			if time.Since(start) > wait {
				t.Fatalf("%s: within %s %s could not read ConfigMap %s/ledger: %v (calls of the webhooks by namespace: payments %v, audit %v)",
					what, wait, who, ns, err, webhooks.namespaces("payments"), webhooks.namespaces("audit"))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	const reloadWait = 150 * time.Second

	// Node and RBAC alone: RBAC grants alice nothing.
	forbidden("alice, before any webhook", alice, "payments")

	// 1. The payments webhook joins the chain, asked about the requests in
	// namespace payments only.
	cfg.Spec.Authorization.Authorizers = append(slices.Clone(nodeRBAC), webhook("payments", "payments-webhook", inNamespace("payments")))
	files := reload("adding the payments webhook", cfg)
	paymentsKey := apiserver.WebhookKubeconfigKey("payments", userSecrets[0].Data["kubeconfig"])
	if !bytes.Equal(files[paymentsKey], userSecrets[0].Data["kubeconfig"]) {
		t.Fatalf("the authorization Secret has no copy of the payments webhook's kubeconfig at %s: keys %v", paymentsKey, slices.Sorted(maps.Keys(files)))
	}
	took := allowedWithin("the payments webhook added", "alice", alice, "payments", reloadWait)
	t.Logf("kube-apiserver asked the payments webhook %s after the Secret's files were updated", took.Round(100*time.Millisecond))
	allowed("alice", alice, "payments")
	forbidden("alice", alice, "default")
	forbidden("alice", alice, "billing")
	if n := webhooks.count("payments", "payments", func(c sarCall) bool { return c.user == "alice" && c.allowed }); n == 0 {
		t.Error("alice reads ConfigMaps in payments, but the payments webhook never allowed her")
	}
	// The webhook would allow alice anywhere: only its matchConditions
	// keep it from being asked outside payments.
	if got := webhooks.namespaces("payments"); len(got) != 1 || got["payments"] == 0 {
		t.Errorf("the payments webhook was asked about namespaces %v, want payments only (not default nor billing, which its matchConditions leave out)", got)
	}

	// 2. The payments webhook is asked about billing instead, and a second
	// webhook, audit, about the requests of the group auditors.
	forbidden("bob of the auditors, before the audit webhook", bob, "default")
	cfg.Spec.Authorization.Authorizers = append(slices.Clone(nodeRBAC),
		webhook("payments", "payments-webhook", inNamespace("billing")),
		webhook("audit", "audit-webhook", "'auditors' in request.groups"))
	files = reload("moving the payments webhook to billing and adding the audit webhook", cfg)
	if auditKey := apiserver.WebhookKubeconfigKey("audit", userSecrets[1].Data["kubeconfig"]); files[auditKey] == nil {
		t.Fatalf("the authorization Secret has no copy of the audit webhook's kubeconfig at %s", auditKey)
	}
	took = allowedWithin("the payments webhook moved to billing", "alice", alice, "billing", reloadWait)
	t.Logf("kube-apiserver asked the payments webhook about billing %s after the Secret's files were updated", took.Round(100*time.Millisecond))
	paymentsAsked := webhooks.count("payments", "payments", nil)
	forbidden("alice, with the payments webhook on billing", alice, "payments")
	forbidden("alice, with the payments webhook on billing", alice, "default")
	if n := webhooks.count("payments", "payments", nil); n != paymentsAsked {
		t.Errorf("the payments webhook, its matchConditions now on billing, was asked %d more times about payments", n-paymentsAsked)
	}
	if n := webhooks.count("payments", "billing", func(c sarCall) bool { return c.allowed }); n == 0 {
		t.Error("alice reads ConfigMaps in billing, but the payments webhook never allowed it")
	}
	allowed("bob of the auditors", bob, "default")
	if n := webhooks.count("audit", "default", func(c sarCall) bool { return c.user == "bob" && c.allowed }); n == 0 {
		t.Error("bob of the auditors reads ConfigMaps in default, but the audit webhook never allowed him")
	}
	if n := webhooks.count("audit", "payments", func(c sarCall) bool { return c.user == "alice" }); n != 0 {
		t.Errorf("the audit webhook was asked %d times about alice, who is not of the auditors", n)
	}

	// 3. The payments webhook's token is rotated: the webhook takes only
	// the new one at once, so kube-apiserver, with the old one, is
	// refused and denies (failurePolicy Deny) until it reads the new
	// kubeconfig, named by its content, from the updated Secret.
	oldKey := apiserver.WebhookKubeconfigKey("payments", userSecrets[0].Data["kubeconfig"])
	webhooks.setToken("payments", "payments-token-2")
	oldTokenRefused := func(c sarCall) bool { return c.refused && c.token == "payments-token-1" }
	refusedBefore := webhooks.count("payments", "billing", oldTokenRefused)
	// A webhook call that fails decides Deny, and kube-apiserver answers
	// the error (500), not 403: its authorization filter turns any error
	// of the chain that no authorizer overrode with an allow into an
	// internal error.
	if err := read(alice, "billing"); !apierrors.IsForbidden(err) && !apierrors.IsInternalError(err) {
		t.Errorf("alice reading ConfigMap billing/ledger while kube-apiserver has the old token: %v; want it refused", err)
	} else {
		t.Logf("while kube-apiserver has the old token, alice is refused: %v", err)
	}
	if n := webhooks.count("payments", "billing", oldTokenRefused); n <= refusedBefore {
		t.Error("with the webhook refusing the old token, alice is forbidden in billing, but kube-apiserver did not call the webhook with the old token")
	}
	userSecrets[0] = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "payments-webhook"},
		Data: map[string][]byte{"kubeconfig": webhooks.kubeconfig("payments", "payments-token-2")}}
	files = reload("a new token in the payments webhook's kubeconfig", cfg)
	newKey := apiserver.WebhookKubeconfigKey("payments", userSecrets[0].Data["kubeconfig"])
	if newKey == oldKey || files[newKey] == nil || files[oldKey] != nil {
		t.Fatalf("after the new token the authorization Secret holds keys %v, want %s in place of %s", slices.Sorted(maps.Keys(files)), newKey, oldKey)
	}
	took = allowedWithin("the payments webhook's token rotated", "alice", alice, "billing", reloadWait)
	t.Logf("kube-apiserver called the payments webhook with the new token %s after the Secret's files were updated", took.Round(100*time.Millisecond))
	if n := webhooks.count("payments", "billing", func(c sarCall) bool { return c.allowed && c.token == "payments-token-2" }); n == 0 {
		t.Error("alice reads ConfigMaps in billing again, but the webhook never allowed a call with the new token")
	}
	allowed("bob of the auditors, after the payments webhook's rotation", bob, "default")

	// Nothing restarted kube-apiserver: the process that booted reloaded
	// the chain each time.
	if !running(b.process) {
		t.Errorf("the kube-apiserver that booted (pid %d) is no longer running", b.process.Process.Pid)
	}
	log := string(must(os.ReadFile(filepath.Join(dir, "kube-apiserver.log"))))
	if n := strings.Count(log, "reloaded authz config"); n < 3 {
		t.Errorf("kube-apiserver's log says %d times that it reloaded the authorization configuration, want 3", n)
	}
	if strings.Contains(log, "reloading authorization config") {
		t.Error("kube-apiserver's log reports a failed reload of the authorization configuration")
	}
	if len(webhooks.malformed) > 0 {
		t.Errorf("the webhook got requests that are not authorization.k8s.io/v1 SubjectAccessReviews: %v", webhooks.malformed)
	}
}
