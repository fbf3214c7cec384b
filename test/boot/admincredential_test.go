package boot

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
)

// denyServer is an authorization webhook that denies every request it is
// asked about (the chain's matchConditions choose which), as a platform's
// revocation list would; it counts the calls.
func denyServer(t *testing.T) (url string, caPEM []byte, calls func() int) {
	t.Helper()
	now := time.Now()
	ca := must(pki.NewSelfSignedCA("deny-webhook-ca", ecdsa, time.Hour, now))
	serving := must(pki.NewSignedCert(ca, pki.ServingCertConfig(nil, []net.IP{net.ParseIP("127.0.0.1")}), ecdsa, time.Hour, now))
	n := make(chan struct{}, 10000)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var review authorizationv1.SubjectAccessReview
		if err := json.NewDecoder(req.Body).Decode(&review); err != nil || req.Header.Get("Authorization") != "Bearer deny-token" {
			http.Error(w, "not a SubjectAccessReview with the webhook's token", http.StatusBadRequest)
			return
		}
		select {
		case n <- struct{}{}:
		default:
		}
		review.Status = authorizationv1.SubjectAccessReviewStatus{Denied: true, Reason: "credential revoked"}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(review)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{serving.Cert().Raw}, PrivateKey: serving.Key()}}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL, ca.CertPEM(), func() int { return len(n) }
}

// An admin credential as the operator answers an AdminCredentialRequest
// (pki.Credential, signed by the tenant's CA) is taken by the bundled
// kube-apiserver, run as rendered, as the user and groups it names, and
// stops working at its expiry. The documented ways to revoke one before
// then hold: an authorization webhook first in the chain that denies the
// user ends a credential whose rights come from RBAC, at the reload and
// without a restart; a credential in system:masters is not stopped by
// it (that group skips every authorizer), which is why only a CA
// revocation ends those: once the client CA bundle no longer holds the
// old CA, every credential it signed is refused, without a restart.
func TestRenderedAPIServer_AdminCredentialsExpireAndAreRevokedByADenyWebhookOrTheCA(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	etcdCA := must(pki.NewSelfSignedCA("etcd-ca", ecdsa, 24*time.Hour, now))
	etcd, _, _ := etcdServer(t, dir, "main", etcdCA)
	etcdClient := must(pki.NewSignedCert(etcdCA, pki.EtcdClientCertConfig(), ecdsa, time.Hour, now))

	denyURL, denyCA, denials := denyServer(t)
	webhook := clientcmdapi.NewConfig()
	webhook.Clusters["deny"] = &clientcmdapi.Cluster{Server: denyURL, CertificateAuthorityData: denyCA}
	webhook.AuthInfos["kube-apiserver"] = &clientcmdapi.AuthInfo{Token: "deny-token"}
	webhook.Contexts["deny"] = &clientcmdapi.Context{Cluster: "deny", AuthInfo: "kube-apiserver"}
	webhook.CurrentContext = "deny"
	webhookSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "revocations"}, Data: map[string][]byte{"kubeconfig": must(clientcmd.Write(*webhook))}}
	env := apiserver.Environment{Referenced: apiserver.ObjectsData([]*corev1.Secret{webhookSecret})}
	nodeRBAC := []v1alpha1.Authorizer{{Type: "Node", Name: "node"}, {Type: "RBAC", Name: "rbac"}}
	cfg := &v1alpha1.ApiServerConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "tenants"},
		Spec: v1alpha1.ApiServerConfigSpec{
			EndpointReconcilerType: v1alpha1.EndpointReconcilerNone,
			Etcd: v1alpha1.EtcdSpec{Servers: []string{etcd}, Prefix: "/tenants/creds",
				TLS: &v1alpha1.EtcdTLS{SecretName: "etcd-client"}},
			ServiceClusterIPRange: []string{"10.121.0.0/16"},
			Serving:               v1alpha1.ServingSpec{SecurePort: int32(freePort(t))},
			ExtraArgs:             []v1alpha1.ExtraArg{{Name: "bind-address", Value: "127.0.0.1"}},
			// The deny webhook comes in by a reload (see the chain's
			// boot test for why).
			Authorization: v1alpha1.AuthorizationSpec{Authorizers: slices.Clone(nodeRBAC)},
		},
	}
	b := bootPod(t, dir, cfg, env, etcdCA, etcdClient, "", nil, "boot-0")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The group ops:admins is cluster-admin through RBAC.
	_ = must(b.cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "ops-admins"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "Group", Name: "ops:admins"}},
	}, metav1.CreateOptions{}))

	// credential is what the operator hands out for user in groups, as a
	// client of the booted apiserver (its address stands for the
	// tenant's endpoint).
	credential := func(user string, lifetime time.Duration, groups ...string) *kubernetes.Clientset {
		t.Helper()
		kubeconfig, cert, err := pki.Credential(b.ca, "creds", b.base, b.ca.CertPEM(), user, groups, ecdsa, lifetime, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if cert.Subject.CommonName != user {
			t.Fatalf("the credential names %q", cert.Subject.CommonName)
		}
		rc := must(clientcmd.RESTConfigFromKubeConfig(kubeconfig))
		rc.TLSClientConfig.ServerName = "kubernetes.default.svc"
		rc.QPS = -1
		return must(kubernetes.NewForConfig(rc))
	}
	whoAmI := func(cs *kubernetes.Clientset) (authenticationv1.UserInfo, error) {
		r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			return authenticationv1.UserInfo{}, err
		}
		return r.Status.UserInfo, nil
	}
	listNamespaces := func(cs *kubernetes.Clientset) error {
		_, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		return err
	}

	// Short-lived: taken as the user and groups asked for, then refused
	// (401) once expired.
	short := credential("oncall", 6*time.Second, "ops:admins")
	got, err := whoAmI(short)
	if err != nil || got.Username != "oncall" || !slices.Equal(got.Groups, []string{"ops:admins", "system:authenticated"}) {
		t.Fatalf("the credential authenticates as %+v (%v), want oncall in ops:admins", got, err)
	}
	if err := listNamespaces(short); err != nil {
		t.Fatalf("the credential of a cluster-admin group lists namespaces: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := whoAmI(short)
		if apierrors.IsUnauthorized(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after a 6 s credential was issued kube-apiserver still answers it: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}

	// Revocation by a deny webhook first in the chain, asked about the
	// leaked user only.
	leaked := credential("leaked", time.Hour, "ops:admins")
	leakedMaster := credential("leaked", time.Hour, pki.SystemMastersGroup)
	other := credential("oncall", time.Hour, "ops:admins")
	for who, cs := range map[string]*kubernetes.Clientset{"leaked in ops:admins": leaked, "leaked in system:masters": leakedMaster, "oncall": other} {
		if err := listNamespaces(cs); err != nil {
			t.Fatalf("%s lists namespaces before the revocation: %v", who, err)
		}
	}
	cfg.Spec.Authorization.Authorizers = append([]v1alpha1.Authorizer{{Type: "Webhook", Name: "revocations", Webhook: &v1alpha1.AuthorizerWebhook{
		KubeconfigSecretName: "revocations", FailurePolicy: "Deny", CacheAuthorizedRequests: ptr.To(false), CacheUnauthorizedRequests: ptr.To(false),
		MatchConditions: []v1alpha1.AuthorizerMatchCondition{{Expression: "request.user == 'leaked'"}},
	}}}, nodeRBAC...)
	c := must(apiserver.Complete(cfg, apiserver.Inputs{}))
	objs := must(apiserver.Desired(c, b.material, env))
	authzDir := b.root(apiserver.AuthorizationDir)
	files := map[string][]byte{}
	for key, data := range objs.Authorization.Data {
		files[key] = data
	}
	files[apiserver.AuthorizationConfigKey] = []byte(strings.ReplaceAll(string(files[apiserver.AuthorizationConfigKey]), apiserver.AuthorizationDir+"/", authzDir+"/"))
	revoked := time.Now()
	kubeletUpdate(t, authzDir, files)
	deadline = time.Now().Add(150 * time.Second)
	for {
		err := listNamespaces(leaked)
		if apierrors.IsForbidden(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("150 s after the deny webhook joined the chain, the leaked credential lists namespaces: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("the deny webhook ended the leaked credential %s after the Secret's files were updated, without a restart", time.Since(revoked).Round(100*time.Millisecond))
	if denials() == 0 {
		t.Error("the leaked credential is forbidden, but the deny webhook was never asked")
	}
	if err := listNamespaces(other); err != nil {
		t.Errorf("another user's credential, which the webhook's matchConditions leave out: %v", err)
	}
	asked := denials()
	if err := listNamespaces(leakedMaster); err != nil {
		t.Errorf("the leaked user's system:masters credential was refused (%v): system:masters skips the authorizers, so the docs say only a CA revocation ends it", err)
	}
	if denials() != asked {
		t.Error("the webhook was asked about a system:masters request")
	}

	// Revoking the CA: the client CA bundle without the old CA, as
	// revoke-ca publishes it once the new CA signs everywhere (the
	// controllers' test follows the phases). kube-apiserver re-reads the
	// file, and every credential of the old CA is refused, system:masters
	// included; one of the new CA is taken.
	newCA := must(pki.NewSelfSignedCA("kubernetes", ecdsa, 24*time.Hour, time.Now()))
	newKubeconfig, _, err := pki.Credential(newCA, "creds", b.base, b.ca.CertPEM(), "oncall", []string{"ops:admins"}, ecdsa, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	newRC := must(clientcmd.RESTConfigFromKubeConfig(newKubeconfig))
	newRC.TLSClientConfig.ServerName, newRC.QPS = "kubernetes.default.svc", -1
	afterRevocation := must(kubernetes.NewForConfig(newRC))
	bundle := b.root(apiserver.CAFile)
	write(t, bundle+".new", newCA.CertPEM())
	if err := os.Rename(bundle+".new", bundle); err != nil {
		t.Fatal(err)
	}
	revoked = time.Now()
	deadline = time.Now().Add(90 * time.Second)
	for {
		_, errMaster := whoAmI(leakedMaster)
		_, errOther := whoAmI(other)
		if apierrors.IsUnauthorized(errMaster) && apierrors.IsUnauthorized(errOther) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("90 s after the old CA left the client CA bundle, its credentials still authenticate: system:masters %v, oncall %v", errMaster, errOther)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("without the old CA in the bundle, its credentials (system:masters included) were refused within %s, without a restart", time.Since(revoked).Round(100*time.Millisecond))
	if got, err := whoAmI(afterRevocation); err != nil || got.Username != "oncall" {
		t.Errorf("a credential of the new CA authenticates as %+v: %v", got, err)
	}
	if b.process.ProcessState != nil {
		t.Error("kube-apiserver exited during the reloads")
	}
}
