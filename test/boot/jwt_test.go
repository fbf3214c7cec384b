package boot

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
	"github.com/apiserver-operator/apiserver-operator/test/oidcprovider"
)

// whoAmI is the user kube-apiserver takes the bearer of token for (a
// SelfSubjectReview), or its refusal.
func (b *booted) whoAmI(ctx context.Context, token string) (authenticationv1.UserInfo, error) {
	cs := must(kubernetes.NewForConfig(&rest.Config{Host: b.base, BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{CAData: b.ca.CertPEM(), ServerName: "kubernetes.default.svc"}}))
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.UserInfo{}, err
	}
	return review.Status.UserInfo, nil
}

// running reports whether cmd's process is alive: not waited for, and
// neither gone nor a zombie.
func running(cmd *exec.Cmd) bool {
	if cmd.ProcessState != nil || cmd.Process.Signal(syscall.Signal(0)) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	// The state follows the command's name in parentheses.
	i := bytes.LastIndexByte(stat, ')')
	return err == nil && i > 0 && i+2 < len(stat) && stat[i+2] != 'Z'
}

// A tenant with two JWT issuers in spec.authentication.jwt, each with its
// CA in a ConfigMap or a Secret, has the bundled kube-apiserver, run as
// rendered, take their tokens for the users their claim mappings say, and
// refuse a token that breaks a claim validation rule. A change of the list
// (issuer B replaced by C) leaves the config hash alone, so no pod rolls:
// the same kube-apiserver process reloads the rewritten file, and then
// takes C's tokens and refuses B's.
func TestRenderedAPIServer_AcceptsTokensOfTwoJWTIssuersAndReloadsTheList(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	etcdCA := must(pki.NewSelfSignedCA("etcd-ca", ecdsa, 24*time.Hour, now))
	etcd, _, _ := etcdServer(t, dir, "main", etcdCA)
	etcdClient := must(pki.NewSignedCert(etcdCA, pki.EtcdClientCertConfig(), ecdsa, time.Hour, now))

	a, b, c := oidcprovider.Listen(t, "issuer-a", "127.0.0.1:0"), oidcprovider.Listen(t, "issuer-b", "127.0.0.1:0"), oidcprovider.Listen(t, "issuer-c", "127.0.0.1:0")
	// The users' ConfigMaps and Secrets that hold the issuers' CAs, by
	// kind and name, and what the operator reads of them for a spec.
	objects := map[string]map[string][]byte{
		"ConfigMap/issuer-a-ca": {"ca.crt": a.CAPEM()},
		"Secret/issuer-b-ca":    {"ca.crt": b.CAPEM()},
		"ConfigMap/issuer-c-ca": {"bundle.pem": c.CAPEM()},
	}
	issuerCAs := func(spec *v1alpha1.ApiServerConfigSpec) map[string][]byte {
		out := map[string][]byte{}
		for _, ref := range apiserver.IssuerCARefs(spec) {
			out[ref.Key()] = objects[ref.Kind+"/"+ref.Name][ref.Keys[0]]
		}
		return out
	}
	const audience = oidcprovider.Audience
	jwtA, jwtB, jwtC := oidcprovider.Authenticators(a.URL(), b.URL(), c.URL())
	jwtB.ClaimMappings.Extra = []v1alpha1.ExtraMapping{{Key: "example.org/team", ValueExpression: "claims.team"}}
	cfg := &v1alpha1.ApiServerConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "jwt", Namespace: "tenants"},
		Spec: v1alpha1.ApiServerConfigSpec{
			EndpointReconcilerType: v1alpha1.EndpointReconcilerNone,
			Etcd: v1alpha1.EtcdSpec{Servers: []string{etcd}, Prefix: "/tenants/jwt",
				TLS: &v1alpha1.EtcdTLS{SecretName: "etcd-client"}},
			ServiceClusterIPRange: []string{"10.120.0.0/16"},
			Serving:               v1alpha1.ServingSpec{SecurePort: int32(freePort(t))},
			ExtraArgs:             []v1alpha1.ExtraArg{{Name: "bind-address", Value: "127.0.0.1"}},
			Authentication:        v1alpha1.AuthenticationSpec{JWT: []v1alpha1.JWTAuthenticator{jwtA, jwtB}},
		},
	}
	apiServer := bootPod(t, dir, cfg, apiserver.Environment{IssuerCAs: issuerCAs(&cfg.Spec)}, etcdCA, etcdClient, "", nil, "boot-0")

	// rendered is the authentication configuration the operator renders
	// for spec, and the config hash of the pods'.
	rendered := func(spec *v1alpha1.ApiServerConfig) ([]byte, string) {
		t.Helper()
		completed := must(apiserver.Complete(spec, apiserver.Inputs{}))
		cas := issuerCAs(&spec.Spec)
		objs := must(apiserver.Desired(completed, apiServer.material, apiserver.Environment{IssuerCAs: cas}))
		file := must(apiserver.AuthenticationConfig(completed, cas))
		files := objs.PodFiles(completed, nil)
		files[apiserver.AuthenticationConfigFile] = file
		return file, apiserver.ConfigHash(completed, objs.Args, files)
	}
	configPath := apiServer.root(apiserver.AuthenticationConfigFile)
	oldFile, oldHash := rendered(cfg)
	if booted := must(os.ReadFile(configPath)); !bytes.Equal(booted, oldFile) {
		t.Fatalf("kube-apiserver booted with another authentication configuration than AuthenticationConfig renders:\n%s\nwant:\n%s", booted, oldFile)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// acceptedWithin waits until kube-apiserver takes token (its
	// authenticators are ready only once their issuer's discovery
	// answered), and reports how long that took.
	acceptedWithin := func(what, token string, wait time.Duration) (authenticationv1.UserInfo, time.Duration) {
		t.Helper()
		start := time.Now()
		for {
			user, err := apiServer.whoAmI(ctx, token)
			if err == nil {
				return user, time.Since(start)
			}
			if time.Since(start) > wait {
				t.Fatalf("within %s kube-apiserver did not take %s: %v", wait, what, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	refused := func(what, token string) {
		t.Helper()
		if user, err := apiServer.whoAmI(ctx, token); !apierrors.IsUnauthorized(err) {
			t.Errorf("%s: got user %+v, error %v; want it refused (401)", what, user, err)
		}
	}
	wantUser := func(what string, got, want authenticationv1.UserInfo) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s is user %+v, want %+v", what, got, want)
		}
	}

	tokenA := a.Token(audience, map[string]any{"sub": "alice", "groups": []string{"dev", "ops"}, "tier": "gold"})
	tokenB := b.Token(audience, map[string]any{"sub": "b-123", "email": "bob@example.org", "email_verified": true, "team": "payments"})
	tokenC := c.Token(audience, map[string]any{"sub": "carol"})
	userA := authenticationv1.UserInfo{Username: "a:alice", Groups: []string{"a:dev", "a:ops", "system:authenticated"}}
	userB := authenticationv1.UserInfo{Username: "b:bob@example.org", UID: "b-123", Groups: []string{"b:payments", "system:authenticated"},
		Extra: map[string]authenticationv1.ExtraValue{"example.org/team": {"payments"}}}
	userC := authenticationv1.UserInfo{Username: "c:carol", Groups: []string{"system:authenticated"}}

	got, _ := acceptedWithin("issuer A's token", tokenA, time.Minute)
	wantUser("issuer A's token", got, userA)
	got, _ = acceptedWithin("issuer B's token", tokenB, time.Minute)
	wantUser("issuer B's token", got, userB)
	refused("issuer A's token of a silver member (claims.tier == \"gold\" is false)",
		a.Token(audience, map[string]any{"sub": "mallory", "groups": []string{"dev"}, "tier": "silver"}))
	refused("issuer A's token for another audience", a.Token("elsewhere", map[string]any{"sub": "alice", "tier": "gold"}))
	refused("issuer C's token before C is in the list", tokenC)

	// The user replaces issuer B by C. The operator renders the new file,
	// under the same config hash, and kubelet swaps it in atomically: a
	// new file renamed over the old.
	cfg.Spec.Authentication.JWT = []v1alpha1.JWTAuthenticator{jwtA, jwtC}
	newFile, newHash := rendered(cfg)
	if newHash != oldHash {
		t.Fatalf("replacing a JWT issuer changes the config hash from %s to %s: the pods would roll instead of reloading", oldHash, newHash)
	}
	if bytes.Equal(newFile, oldFile) {
		t.Fatal("replacing a JWT issuer leaves the authentication configuration as it was")
	}
	write(t, configPath+".new", newFile)
	if err := os.Rename(configPath+".new", configPath); err != nil {
		t.Fatal(err)
	}

	// kube-apiserver's own reload: fsnotify, or its poll every minute.
	got, took := acceptedWithin("issuer C's token after the reload", tokenC, 150*time.Second)
	wantUser("issuer C's token", got, userC)
	t.Logf("kube-apiserver took issuer C's token %s after the file was replaced", took.Round(100*time.Millisecond))
	// Nothing restarts kube-apiserver here: the process that booted took
	// the new list.
	if !running(apiServer.process) {
		t.Errorf("the kube-apiserver that booted (pid %d) is no longer running", apiServer.process.Process.Pid)
	}
	if log := must(os.ReadFile(filepath.Join(dir, "kube-apiserver.log"))); !strings.Contains(string(log), "reloaded authentication config") {
		t.Error("kube-apiserver takes issuer C's token, but its log does not say it reloaded the authentication configuration")
	}
	got, _ = acceptedWithin("issuer A's token after the reload", tokenA, 10*time.Second)
	wantUser("issuer A's token after the reload", got, userA)
	// B's token stays in kube-apiserver's cache of accepted tokens for up
	// to 10 s (upstream's TokenSuccessCacheTTL, which no flag sets).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
		_, err := apiServer.whoAmI(ctx, tokenB)
		if apierrors.IsUnauthorized(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30s after the reload, issuer B's token, no longer in the list, is still not refused: %v", err)
		}
	}
}
