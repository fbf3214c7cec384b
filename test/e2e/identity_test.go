//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
	"github.com/apiserver-operator/apiserver-operator/test/oidcprovider"
)

// A tenant takes its users from two JWT issuers of its spec, one with its
// CA in a ConfigMap and one in a Secret, each token for the user its claim
// mappings say, and refuses a token that breaks a CEL claim rule; its
// chain Node, RBAC and a webhook asked about one namespace only lets a
// user RBAC grants nothing read there, and forbids the rest without
// asking the webhook. An issuer added to the running tenant is taken up
// by kube-apiserver's reload: the same pods, never restarted, take its
// tokens, and the pod template's config hash stays as it was. Its audit
// events reach a webhook of its spec too (batches of at most a second):
// the creation of a ConfigMap arrives in an EventList, and AuditDelivered
// says that no event was lost. The tenant publishes no admin kubeconfig:
// the test asks for its admin credential with an AdminCredentialRequest,
// as people would, and the operator does its work (reading the audit
// counters) with a credential of its own. A credential asked for with
// a minute's expiry works for its user and groups, then is refused, and
// its Secret is gone.
func TestOperator_IdentityFromJWTIssuersAndAnAuthorizationChain(t *testing.T) {
	host := cluster.HostIP()
	issuerA := oidcprovider.Listen(t, "issuer-a", net.JoinHostPort(host, "0"))
	issuerB := oidcprovider.Listen(t, "issuer-b", net.JoinHostPort(host, "0"))
	issuerC := oidcprovider.Listen(t, "issuer-c", net.JoinHostPort(host, "0"))
	// The webhook allows alice of issuer A in payments, and has no
	// opinion on anything else.
	authz := startAuthorizationWebhook(t, host, func(s authorizationv1.SubjectAccessReviewSpec) bool {
		return s.User == "a:alice" && s.ResourceAttributes != nil && s.ResourceAttributes.Namespace == "payments"
	})
	audit := startAuditReceiver(t, host)

	const audience = oidcprovider.Audience
	jwtA, jwtB, jwtC := oidcprovider.Authenticators(issuerA.URL(), issuerB.URL(), issuerC.URL())

	mgmt := ctrlClient(t)
	installOperator(t)
	c := mgmt
	cfg := localTenant(t, tenantNamespace(t), "identity")
	{
		// The objects the spec names, in the tenant's namespace: the
		// issuers' CAs (C's for later) and the webhooks' kubeconfigs.
		ns := cfg.Namespace
		for _, obj := range []client.Object{
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "issuer-a-ca"}, Data: map[string]string{"ca.crt": string(issuerA.CAPEM())}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "issuer-b-ca"}, Data: map[string][]byte{"ca.crt": issuerB.CAPEM()}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "issuer-c-ca"}, Data: map[string]string{"bundle.pem": string(issuerC.CAPEM())}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "payments-authz"}, Data: map[string][]byte{"kubeconfig": authz.kubeconfig}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "audit-webhook"}, Data: map[string][]byte{"kubeconfig": audit.kubeconfig}},
		} {
			if err := mgmt.Create(context.Background(), obj); err != nil {
				t.Fatal(err)
			}
		}
		cfg.Spec.Authentication.JWT = []v1alpha1.JWTAuthenticator{jwtA, jwtB}
		cfg.Spec.Authorization.Authorizers = []v1alpha1.Authorizer{
			{Type: "Node", Name: "node"},
			{Type: "RBAC", Name: "rbac"},
			{Type: "Webhook", Name: "payments", Webhook: &v1alpha1.AuthorizerWebhook{KubeconfigSecretName: "payments-authz",
				MatchConditions: []v1alpha1.AuthorizerMatchCondition{{Expression: "has(request.resourceAttributes) && request.resourceAttributes.namespace == 'payments'"}}}},
		}
		// A batch is sent at the latest a second after its first event,
		// rather than kube-apiserver's 30 s.
		cfg.Spec.Audit.Webhook = &v1alpha1.AuditWebhookSpec{KubeconfigSecretName: "audit-webhook", Mode: v1alpha1.AuditWebhookBatch,
			Batch: &v1alpha1.AuditWebhookBatchSpec{MaxWait: &metav1.Duration{Duration: time.Second}}}
		// A new tenant's NetworkPolicy lets its apiservers call only etcd
		// and DNS besides what is listed: the issuers and the webhooks.
		var ports []networkingv1.NetworkPolicyPort
		for _, p := range []int{issuerA.Port(), issuerB.Port(), issuerC.Port(), authz.port, audit.port} {
			ports = append(ports, networkingv1.NetworkPolicyPort{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(int32(p)))})
		}
		cfg.Spec.NetworkPolicy = &v1alpha1.NetworkPolicySpec{Mode: v1alpha1.NetworkPolicyEnforced, Egress: []networkingv1.NetworkPolicyEgressRule{{
			To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: host + "/32"}}},
			Ports: ports,
		}}}
		// No admin kubeconfig in a Secret: credentials come on request.
		cfg.Spec.AdminCredentials.KubeconfigSecret = v1alpha1.AdminKubeconfigSecretDisabled
	}
	if err := c.Create(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, cfg, 3*time.Minute)
	if got := getTenant(t, c, cfg); got.Status.AdminKubeconfigSecretName != "" {
		t.Errorf("with kubeconfigSecret Disabled status names admin kubeconfig Secret %q", got.Status.AdminKubeconfigSecretName)
	}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.AdminKubeconfigSecretName(cfg.Name)}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("with kubeconfigSecret Disabled the admin kubeconfig Secret: %v, want none", err)
	}
	admin, rc, _ := requestCredential(t, c, cfg, "e2e-admin", "e2e-admin", 3600, pki.SystemMastersGroup)
	waitReachable(t, admin)
	// oncall is cluster-admin through RBAC (a group bound in the tenant)
	// for a minute.
	ctx := context.Background()
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "ops-admins"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "Group", Name: "ops:admins"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	oncall, _, oncallRequest := requestCredential(t, c, cfg, "oncall", "oncall", 60, "ops:admins")
	oncallUntil := oncallRequest.Status.ExpirationTimestamp.Time
	if r, err := oncall.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{}); err != nil ||
		r.Status.UserInfo.Username != "oncall" || !slices.Equal(r.Status.UserInfo.Groups, []string{"ops:admins", "system:authenticated"}) {
		t.Errorf("the oncall credential authenticates as %+v (%v), want oncall in ops:admins", r, err)
	}
	if _, err := oncall.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("the oncall credential, cluster-admin through RBAC, lists namespaces: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logApiserverPods(t, c, cfg)
		}
	})

	tokenA := issuerA.Token(audience, map[string]any{"sub": "alice", "groups": []string{"dev", "ops"}, "tier": "gold"})
	tokenB := issuerB.Token(audience, map[string]any{"sub": "b-123", "email": "bob@example.org", "email_verified": true, "team": "payments"})
	tokenC := issuerC.Token(audience, map[string]any{"sub": "carol"})
	userA := authenticationv1.UserInfo{Username: "a:alice", Groups: []string{"a:dev", "a:ops", "system:authenticated"}}
	userB := authenticationv1.UserInfo{Username: "b:bob@example.org", UID: "b-123", Groups: []string{"b:payments", "system:authenticated"}}
	userC := authenticationv1.UserInfo{Username: "c:carol", Groups: []string{"system:authenticated"}}

	// kube-apiserver takes an issuer's tokens once its discovery has
	// answered, which may come a moment after the pod is ready.
	got := waitAccepted(t, rc, "issuer A's token", tokenA, time.Minute)
	wantUser(t, "issuer A's token", got, userA)
	got = waitAccepted(t, rc, "issuer B's token", tokenB, time.Minute)
	wantUser(t, "issuer B's token", got, userB)
	wantRefused(t, rc, `issuer A's token of a silver member (claims.tier == "gold" is false)`,
		issuerA.Token(audience, map[string]any{"sub": "mallory", "groups": []string{"dev"}, "tier": "silver"}))
	wantRefused(t, rc, "issuer C's token before C is in the list", tokenC)

	// Authorization: RBAC grants alice nothing; the webhook lets her read
	// payments and is never asked about default.
	created := time.Now()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "payments"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"payments", "default"} {
		if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ledger"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	alice := bearerClient(t, rc, tokenA)
	if _, err := alice.CoreV1().ConfigMaps("payments").Get(ctx, "ledger", metav1.GetOptions{}); err != nil {
		t.Errorf("alice reading a ConfigMap of payments, which the webhook allows: %v", err)
	}
	if _, err := alice.CoreV1().ConfigMaps("default").Get(ctx, "ledger", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice reading a ConfigMap of default, which nothing allows: %v, want forbidden", err)
	}
	if _, err := alice.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice listing the ConfigMaps of default: %v, want forbidden", err)
	}
	asked, badTokens := authz.counts()
	if asked["payments"] == 0 || asked["default"] != 0 {
		t.Errorf("the webhook was asked %d times about payments and %d about default, want some and none (its matchCondition)", asked["payments"], asked["default"])
	}
	if badTokens != 0 {
		t.Errorf("the webhook was called %d times without its token", badTokens)
	}

	// Audit: the admin's creation of payments/ledger reaches the webhook,
	// and the operator reads from the apiservers that nothing was lost.
	if e := audit.waitCreated(t, "payments", "ledger", 30*time.Second); e.ResponseStatus == nil || e.ResponseStatus.Code != http.StatusCreated {
		t.Errorf("the audit event of the creation of payments/ledger has response %+v, want 201", e.ResponseStatus)
	}
	arrived := time.Now()
	waitAuditDelivered(t, mgmt, cfg, 2*time.Minute)
	t.Logf("Audit: the creation of payments/ledger reached the webhook within %s, AuditDelivered was True (Delivering) %s later",
		arrived.Sub(created).Round(100*time.Millisecond), time.Since(arrived).Round(100*time.Millisecond))
	audit.mu.Lock()
	if len(audit.malformed) > 0 {
		t.Errorf("the audit webhook got requests that are not an audit.k8s.io/v1 EventList: %v", audit.malformed)
	}
	audit.mu.Unlock()
	if n := audit.badTokens.Load(); n != 0 {
		t.Errorf("the audit webhook was called %d times without its token", n)
	}

	// Issuer C joins the running tenant.
	podsBefore := podUIDs(t, c, cfg)
	hashBefore := podTemplateConfigHash(t, c, cfg)
	changed := time.Now()
	updateSpec(t, c, cfg, func(s *v1alpha1.ApiServerConfigSpec) {
		s.Authentication.JWT = []v1alpha1.JWTAuthenticator{jwtA, jwtB, jwtC}
	})
	// The operator rewrites the ConfigMap at once; kubelet brings it into
	// the pods at its next sync of them (every 20 s on the local cluster,
	// with jitter), and kube-apiserver reloads it: about 35 s in all.
	written := waitAuthenticationConfigNames(t, c, cfg, issuerC.URL(), time.Minute)
	got = waitAccepted(t, rc, "issuer C's token after the change", tokenC, 2*time.Minute-time.Since(changed))
	accepted := time.Now()
	wantUser(t, "issuer C's token", got, userC)
	t.Logf("Issuer C added: the operator wrote the ConfigMap after %s, the tenant took C's token %s after the change",
		written.Sub(changed).Round(100*time.Millisecond), accepted.Sub(changed).Round(100*time.Millisecond))
	got = waitAccepted(t, rc, "issuer A's token after the reload", tokenA, 10*time.Second)
	wantUser(t, "issuer A's token after the reload", got, userA)

	if podsAfter := podUIDs(t, c, cfg); !maps.Equal(podsAfter, podsBefore) {
		t.Errorf("the apiserver pods (UID: restarts) went from %v to %v: adding an issuer rolled or restarted them", podsBefore, podsAfter)
	}
	if hashAfter := podTemplateConfigHash(t, c, cfg); hashAfter != hashBefore {
		t.Errorf("the pod template's config hash went from %s to %s: adding an issuer rolls the pods", hashBefore, hashAfter)
	}
	waitReady(t, c, cfg, time.Minute)

	// The oncall credential's minute is over: refused, its Secret gone.
	var refusedAt time.Time
	for deadline := oncallUntil.Add(time.Minute); ; {
		_, err := oncall.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if apierrors.IsUnauthorized(err) {
			refusedAt = time.Now()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the oncall credential expired (%s) the tenant still answers it: %v", oncallUntil.Format(time.RFC3339), err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if refusedAt.Before(oncallUntil) {
		t.Errorf("the oncall credential was refused at %s, before it expired (%s)", refusedAt.Format(time.RFC3339Nano), oncallUntil.Format(time.RFC3339))
	}
	waitCredentialExpired(t, c, oncallRequest, time.Minute)
	t.Logf("The oncall credential (60 s) was refused %s after its expiry; its Secret was deleted", refusedAt.Sub(oncallUntil).Round(100*time.Millisecond))
}

// requestCredential asks for a credential of cfg's tenant for user in
// groups, lasting seconds, waits for the answer, and returns a client
// with it (through the tenant's NodePort) and the answered request.
func requestCredential(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, name, user string, seconds int32, groups ...string) (*kubernetes.Clientset, *rest.Config, *v1alpha1.AdminCredentialRequest) {
	t.Helper()
	ctx := context.Background()
	acr := &v1alpha1.AdminCredentialRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: name},
		Spec:       v1alpha1.AdminCredentialRequestSpec{ApiServerConfigName: cfg.Name, User: user, Groups: groups, ExpirationSeconds: seconds},
	}
	if err := c.Create(ctx, acr); err != nil {
		t.Fatal(err)
	}
	var last string
	for deadline := time.Now().Add(time.Minute); ; {
		got := &v1alpha1.AdminCredentialRequest{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(acr), got); err != nil {
			last = err.Error()
		} else if r := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); r != nil && r.Status == metav1.ConditionTrue {
			secret := &corev1.Secret{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: got.Status.SecretName}, secret); err != nil {
				t.Fatalf("reading the Secret %s of the answered request %s: %v", got.Status.SecretName, name, err)
			}
			cs, rc, err := kubeconfigClient(c, cfg, secret.Data[apiserver.KubeconfigKey])
			if err != nil {
				t.Fatal(err)
			}
			return cs, rc, got
		} else if r != nil {
			last = r.Reason + ": " + r.Message
		}
		if time.Now().After(deadline) {
			t.Fatalf("AdminCredentialRequest %s was not answered within a minute (last: %s)", name, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitCredentialExpired waits for the operator to end acr's credential:
// its Secret deleted, Ready False with reason Expired.
func waitCredentialExpired(t testing.TB, c client.Client, acr *v1alpha1.AdminCredentialRequest, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	var last string
	for deadline := time.Now().Add(within); ; {
		got := &v1alpha1.AdminCredentialRequest{}
		err := c.Get(ctx, client.ObjectKeyFromObject(acr), got)
		if err == nil {
			r := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
			secretErr := c.Get(ctx, client.ObjectKey{Namespace: acr.Namespace, Name: acr.Status.SecretName}, &corev1.Secret{})
			if r != nil && r.Status == metav1.ConditionFalse && r.Reason == v1alpha1.ReasonCredentialExpired && apierrors.IsNotFound(secretErr) {
				return
			}
			last = fmt.Sprintf("Ready %v, Secret %s: %v", r, acr.Status.SecretName, secretErr)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the expired credential of %s was not ended within %s (last: %s)", acr.Name, within, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// bearerClient is a client of the tenant (through the same address as
// rc) that sends token and nothing else.
func bearerClient(t testing.TB, rc *rest.Config, token string) *kubernetes.Clientset {
	t.Helper()
	cfg := rest.AnonymousClientConfig(rc)
	cfg.BearerToken = token
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// userOf is the user the tenant takes the bearer of token for (a
// SelfSubjectReview), or its refusal.
func userOf(t testing.TB, rc *rest.Config, token string) (authenticationv1.UserInfo, error) {
	t.Helper()
	r, err := bearerClient(t, rc, token).AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.UserInfo{}, err
	}
	return r.Status.UserInfo, nil
}

// waitAccepted waits until the tenant takes token, and says for whom.
func waitAccepted(t testing.TB, rc *rest.Config, what, token string, within time.Duration) authenticationv1.UserInfo {
	t.Helper()
	for start := time.Now(); ; time.Sleep(time.Second) {
		user, err := userOf(t, rc, token)
		if err == nil {
			return user
		}
		if time.Since(start) > within {
			t.Fatalf("the tenant did not take %s within %s: %v", what, within.Round(time.Second), err)
		}
	}
}

func wantRefused(t testing.TB, rc *rest.Config, what, token string) {
	t.Helper()
	if user, err := userOf(t, rc, token); !apierrors.IsUnauthorized(err) {
		t.Errorf("%s: got user %+v, error %v; want it refused (401)", what, user, err)
	}
}

func wantUser(t testing.TB, what string, got, want authenticationv1.UserInfo) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s is user %+v, want %+v", what, got, want)
	}
}

// podTemplateConfigHash is the config hash of the apiservers' pod
// template: what changes when the pods must roll.
func podTemplateConfigHash(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig) string {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.DeploymentName(cfg.Name)}, d); err != nil {
		t.Fatal(err)
	}
	hash := d.Spec.Template.Annotations[apiserver.ConfigHashAnnotation]
	if hash == "" {
		t.Fatalf("the Deployment %s has no %s", d.Name, apiserver.ConfigHashAnnotation)
	}
	return hash
}

// waitAuthenticationConfigNames waits until the operator's ConfigMap of
// cfg has an authentication configuration that names issuer, and says
// when it saw it.
func waitAuthenticationConfigNames(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, issuer string, within time.Duration) time.Time {
	t.Helper()
	key := client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.ConfigMapName(cfg.Name)}
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		cm := &corev1.ConfigMap{}
		err := c.Get(context.Background(), key, cm)
		if err == nil && strings.Contains(cm.Data[apiserver.AuthenticationConfigKey], issuer) {
			return time.Now()
		}
		if time.Since(start) > within {
			t.Fatalf("within %s the ConfigMap %s has no authentication configuration naming %s (%v)", within, key, issuer, err)
		}
	}
}

// logApiserverPods logs the end of the kube-apiserver logs of cfg's pods.
func logApiserverPods(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig) {
	t.Helper()
	cs := clientset(t)
	for _, p := range apiserverPods(t, c, cfg) {
		data, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "kube-apiserver", TailLines: ptr.To[int64](60)}).DoRaw(context.Background())
		t.Logf("kube-apiserver of %s (%v):\n%s", p.Name, err, data)
	}
}

// httpsWebhook is an HTTPS server of the test on the host's side of the
// node's link, with a CA of its own, that kube-apiserver calls as its
// kubeconfig says, with a token of its own; calls without the token are
// refused and counted.
type httpsWebhook struct {
	port int
	// kubeconfig tells kube-apiserver how to call it, credentials inline.
	kubeconfig []byte
	badTokens  atomic.Int32
}

// serveWebhook serves handle at path (POST only) on host until the test
// ends; name names its CA.
func serveWebhook(t testing.TB, host, name, path string, handle http.HandlerFunc) *httpsWebhook {
	t.Helper()
	now := time.Now()
	ca, err := pki.NewSelfSignedCA(name+"-ca", pki.KeyAlgorithmECDSAP256, 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := pki.NewSignedCert(ca, pki.ServingCertConfig(nil, []net.IP{net.ParseIP(host)}), pki.KeyAlgorithmECDSAP256, 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	token := base64.RawURLEncoding.EncodeToString(secret)
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("listening on the host's side of the node's link: %v", err)
	}
	w := &httpsWebhook{port: ln.Addr().(*net.TCPAddr).Port}
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters[name] = &clientcmdapi.Cluster{Server: "https://" + ln.Addr().String() + path, CertificateAuthorityData: ca.CertPEM()}
	kubeconfig.AuthInfos["apiserver"] = &clientcmdapi.AuthInfo{Token: token}
	kubeconfig.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: "apiserver"}
	kubeconfig.CurrentContext = name
	if w.kubeconfig, err = clientcmd.Write(*kubeconfig); err != nil {
		t.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("POST "+path, func(rw http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.badTokens.Add(1)
			http.Error(rw, "unauthorized", http.StatusUnauthorized)
			return
		}
		handle(rw, r)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, TLSConfig: &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{serving.Cert().Raw}, PrivateKey: serving.Key()}},
	}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return w
}

// authorizationWebhook is an HTTPS authorization webhook: it answers
// SubjectAccessReviews.
type authorizationWebhook struct {
	*httpsWebhook
	mu    sync.Mutex
	asked map[string]int // by namespace, "" for non-resource requests
}

// startAuthorizationWebhook serves a webhook that allows what allow says
// and has no opinion on the rest.
func startAuthorizationWebhook(t testing.TB, host string, allow func(authorizationv1.SubjectAccessReviewSpec) bool) *authorizationWebhook {
	t.Helper()
	w := &authorizationWebhook{asked: map[string]int{}}
	w.httpsWebhook = serveWebhook(t, host, "authorization-webhook", "/authorize", func(rw http.ResponseWriter, r *http.Request) {
		review := &authorizationv1.SubjectAccessReview{}
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err := json.Unmarshal(body, review); err != nil {
			http.Error(rw, "not a SubjectAccessReview", http.StatusBadRequest)
			return
		}
		ns := ""
		if a := review.Spec.ResourceAttributes; a != nil {
			ns = a.Namespace
		}
		w.mu.Lock()
		w.asked[ns]++
		w.mu.Unlock()
		review.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: allow(review.Spec)}
		review.Spec = authorizationv1.SubjectAccessReviewSpec{}
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(review)
	})
	return w
}

// counts are the webhook's calls by namespace, and the calls it refused
// for a missing or wrong token.
func (w *authorizationWebhook) counts() (map[string]int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.asked), int(w.badTokens.Load())
}

// auditReceiver is an HTTPS audit webhook: it keeps the audit.k8s.io/v1
// EventLists kube-apiserver POSTs to it.
type auditReceiver struct {
	*httpsWebhook
	mu      sync.Mutex
	batches []auditv1.EventList
	// malformed are the requests that were not an EventList.
	malformed []string
}

func startAuditReceiver(t testing.TB, host string) *auditReceiver {
	t.Helper()
	a := &auditReceiver{}
	a.httpsWebhook = serveWebhook(t, host, "audit-webhook", "/audit", func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
		var list auditv1.EventList
		if err == nil {
			err = json.Unmarshal(body, &list)
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if err != nil || list.Kind != "EventList" || list.APIVersion != auditv1.SchemeGroupVersion.String() {
			a.malformed = append(a.malformed, fmt.Sprintf("%v: %.200s", err, body))
			http.Error(rw, "not an audit.k8s.io/v1 EventList", http.StatusBadRequest)
			return
		}
		a.batches = append(a.batches, list)
	})
	return a
}

// waitCreated waits until the receiver has the event of stage
// ResponseComplete of the creation of the ConfigMap namespace/name, and
// returns it.
func (a *auditReceiver) waitCreated(t testing.TB, namespace, name string, within time.Duration) auditv1.Event {
	t.Helper()
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		a.mu.Lock()
		batches, malformed := len(a.batches), slices.Clone(a.malformed)
		for _, b := range a.batches {
			for _, e := range b.Items {
				if ref := e.ObjectRef; e.Verb == "create" && e.Stage == auditv1.StageResponseComplete &&
					ref != nil && ref.Resource == "configmaps" && ref.Namespace == namespace && ref.Name == name {
					a.mu.Unlock()
					return e
				}
			}
		}
		a.mu.Unlock()
		if time.Since(start) > within {
			t.Fatalf("within %s the audit webhook got %d batches (%d calls without its token; malformed: %v), none with the creation of ConfigMap %s/%s at stage ResponseComplete",
				within, batches, a.badTokens.Load(), malformed, namespace, name)
		}
	}
}

// waitAuditDelivered waits until cfg's AuditDelivered condition is True
// with reason Delivering.
func waitAuditDelivered(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, within time.Duration) {
	t.Helper()
	var last *metav1.Condition
	for start := time.Now(); ; time.Sleep(500 * time.Millisecond) {
		got := &v1alpha1.ApiServerConfig{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(cfg), got); err == nil {
			last = meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionAuditDelivered)
			if last != nil && last.Status == metav1.ConditionTrue && last.Reason == v1alpha1.ReasonAuditDelivering {
				return
			}
		}
		if time.Since(start) > within {
			t.Fatalf("within %s the condition %s of %s is %+v, want True, %s", within, v1alpha1.ConditionAuditDelivered, cfg.Namespace+"/"+cfg.Name, last, v1alpha1.ReasonAuditDelivering)
		}
	}
}
