package boot

import (
	"context"
	"crypto"
	cryptoecdsa "crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
)

// saIssuerSpec is a tenant whose ServiceAccount tokens name issuers.
func saIssuerSpec(t *testing.T, name, etcd string, sa v1alpha1.ServiceAccountSpec, anonymousPaths ...string) *v1alpha1.ApiServerConfig {
	t.Helper()
	return &v1alpha1.ApiServerConfig{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "tenants"},
		Spec: v1alpha1.ApiServerConfigSpec{
			EndpointReconcilerType: v1alpha1.EndpointReconcilerNone,
			Etcd: v1alpha1.EtcdSpec{Servers: []string{etcd}, Prefix: "/tenants/" + name,
				TLS: &v1alpha1.EtcdTLS{SecretName: "etcd-client"}},
			ServiceClusterIPRange: []string{"10.120.0.0/16"},
			Serving:               v1alpha1.ServingSpec{SecurePort: int32(freePort(t))},
			ExtraArgs:             []v1alpha1.ExtraArg{{Name: "bind-address", Value: "127.0.0.1"}},
			Authentication:        v1alpha1.AuthenticationSpec{ServiceAccount: sa, AnonymousPaths: anonymousPaths},
		},
	}
}

// The ServiceAccount of a workload whose tokens systems outside the
// cluster trust.
const (
	workloadNamespace      = "workload"
	workloadServiceAccount = "app"
)

// serviceAccountToken creates the workload's ServiceAccount (once) and
// returns a token of it from the TokenRequest API, for audiences (the
// apiserver's when none).
func serviceAccountToken(ctx context.Context, t *testing.T, b *booted, audiences ...string) string {
	t.Helper()
	namespace, name := workloadNamespace, workloadServiceAccount
	if _, err := b.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", namespace, err)
	}
	if _, err := b.cs.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating ServiceAccount %s/%s: %v", namespace, name, err)
	}
	req, err := b.cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token of ServiceAccount %s/%s: %v", namespace, name, err)
	}
	return req.Status.Token
}

// jwtPart decodes part i of a compact JWT (0 the header, 1 the claims)
// into v.
func jwtPart(t *testing.T, token string, i int, v any) {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("a token of %d parts, want a JWS of 3", len(parts))
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[i])
	if err != nil {
		t.Fatalf("decoding part %d of a token: %v", i, err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("part %d of a token is not JSON: %v", i, err)
	}
}

// issuerOf is the iss claim of token.
func issuerOf(t *testing.T, token string) string {
	t.Helper()
	var claims struct {
		Iss string `json:"iss"`
	}
	jwtPart(t, token, 1, &claims)
	return claims.Iss
}

// jwk is a public key of a JWK set, as /openid/v1/jwks serves it.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
	N   string `json:"n"`
	E   string `json:"e"`
}

// verify checks token's signature with k, as a relying party that read
// the JWK set would.
func (k jwk) verify(token string) error {
	i := strings.LastIndexByte(token, '.')
	if i < 0 {
		return fmt.Errorf("not a JWS")
	}
	sig, err := base64.RawURLEncoding.DecodeString(token[i+1:])
	if err != nil {
		return fmt.Errorf("decoding the signature: %w", err)
	}
	digest := sha256.Sum256([]byte(token[:i]))
	raw := func(s string) []byte {
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil {
			return nil
		}
		return b
	}
	switch {
	case k.Kty == "EC" && k.Crv == "P-256" && k.Alg == "ES256":
		x, y := raw(k.X), raw(k.Y)
		if len(x) != 32 || len(y) != 32 || len(sig) != 64 {
			return fmt.Errorf("a malformed P-256 key or ES256 signature")
		}
		pub, err := cryptoecdsa.ParseUncompressedPublicKey(elliptic.P256(), slices.Concat([]byte{4}, x, y))
		if err != nil {
			return fmt.Errorf("the key is not a point of P-256: %w", err)
		}
		// ES256 signs r and s, 32 bytes each; VerifyASN1 wants them in
		// DER.
		der, err := asn1.Marshal(struct{ R, S *big.Int }{new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])})
		if err != nil {
			return err
		}
		if !cryptoecdsa.VerifyASN1(pub, digest[:], der) {
			return fmt.Errorf("the ES256 signature does not verify")
		}
		return nil
	case k.Kty == "RSA" && k.Alg == "RS256":
		n, e := raw(k.N), raw(k.E)
		if len(n) == 0 || len(e) == 0 || len(e) > 4 {
			return fmt.Errorf("a malformed RSA key")
		}
		return rsa.VerifyPKCS1v15(&rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}, crypto.SHA256, digest[:], sig)
	}
	return fmt.Errorf("a key of type %q, curve %q, algorithm %q, which this test does not verify", k.Kty, k.Crv, k.Alg)
}

// anonymousGet is GET path without credentials: its status, content type
// and body.
func anonymousGet(t *testing.T, b *booted, path string) (int, string, []byte) {
	t.Helper()
	resp, err := b.anonymous.Get(b.base + path)
	if err != nil {
		t.Fatalf("anonymous GET %s: %v", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("anonymous GET %s: reading the body: %v", path, err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), body
}

// stopAPIServer ends b's kube-apiserver, as a roll deletes the pod.
func stopAPIServer(t *testing.T, b *booted) {
	t.Helper()
	_ = b.process.Process.Kill()
	_ = b.process.Wait()
	if running(b.process) {
		t.Fatalf("kube-apiserver (pid %d) still runs after it was killed", b.process.Process.Pid)
	}
}

// A tenant that publishes its ServiceAccount issuer for workload identity
// (a cloud or a vault trusting its tokens): the discovery document names
// the spec's first issuer and its jwksURI, and the JWK set holds the key
// that verifies the tenant's tokens. Both answer without credentials once
// the tenant binds system:service-account-issuer-discovery to
// system:unauthenticated, as docs/day-2.md tells; before that RBAC refuses
// (403), so anonymousPaths alone open nothing, and paths outside
// anonymousPaths still want credentials (401).
func TestRenderedAPIServer_PublishesTheServiceAccountIssuerForWorkloadIdentity(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	etcdCA := must(pki.NewSelfSignedCA("etcd-ca", ecdsa, 24*time.Hour, now))
	etcd, _, _ := etcdServer(t, dir, "main", etcdCA)
	etcdClient := must(pki.NewSignedCert(etcdCA, pki.EtcdClientCertConfig(), ecdsa, time.Hour, now))

	const (
		issuer    = "https://oidc.tenant.example.com"
		jwksURI   = "https://keys.example.com/tenant/jwks"
		discovery = "/.well-known/openid-configuration"
		jwks      = "/openid/v1/jwks"
	)
	cfg := saIssuerSpec(t, "discovery", etcd, v1alpha1.ServiceAccountSpec{
		Issuers: []string{issuer, "https://kubernetes.default.svc.cluster.local"},
		JWKSURI: jwksURI,
	}, discovery, jwks)
	b := boot(t, dir, cfg, etcdCA, etcdClient, "")
	if want := "--service-account-jwks-uri=" + jwksURI; !slices.Contains(b.args, want) {
		t.Errorf("the rendered command line has no %s: %q", want, b.args)
	}

	// Before the binding: anonymous requests reach RBAC there, which
	// refuses them.
	for _, path := range []string{discovery, jwks} {
		if status, _, body := anonymousGet(t, b, path); status != http.StatusForbidden {
			t.Errorf("anonymous GET %s before the ClusterRoleBinding: %d, want 403 (anonymousPaths lets RBAC decide): %.200s", path, status, body)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	must(b.cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "service-account-issuer-discovery"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:service-account-issuer-discovery"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:unauthenticated"}},
	}, metav1.CreateOptions{}))

	// RBAC sees the binding through its informer: a moment later.
	var status int
	var body []byte
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if status, _, body = anonymousGet(t, b, discovery); status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30s after the ClusterRoleBinding, anonymous GET %s: %d, want 200: %.200s", discovery, status, body)
		}
	}
	var doc struct {
		Issuer  string   `json:"issuer"`
		JWKSURI string   `json:"jwks_uri"`
		Algs    []string `json:"id_token_signing_alg_values_supported"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("the discovery document is not JSON: %v\n%.300s", err, body)
	}
	if doc.Issuer != issuer || doc.JWKSURI != jwksURI {
		t.Errorf("the discovery document names issuer %q and jwks_uri %q, want %q and %q", doc.Issuer, doc.JWKSURI, issuer, jwksURI)
	}

	status, contentType, body := anonymousGet(t, b, jwks)
	if status != http.StatusOK {
		t.Fatalf("anonymous GET %s after the ClusterRoleBinding: %d, want 200: %.200s", jwks, status, body)
	}
	if contentType != "application/jwk-set+json" {
		t.Errorf("GET %s has Content-Type %q, want application/jwk-set+json", jwks, contentType)
	}
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(body, &set); err != nil {
		t.Fatalf("the JWK set is not JSON: %v\n%.300s", err, body)
	}
	if len(set.Keys) == 0 {
		t.Fatalf("the JWK set has no keys: %s", body)
	}
	for _, k := range set.Keys {
		if k.Kid == "" || k.Use != "sig" {
			t.Errorf("a key of the JWK set has kid %q and use %q, want a kid and use sig: %+v", k.Kid, k.Use, k)
		}
	}

	// What a relying party does with a token of the tenant: find the key
	// of its kid in the set, verify the signature, and check the issuer
	// against the document's.
	token := serviceAccountToken(ctx, t, b)
	var header struct {
		Kid string `json:"kid"`
		Alg string `json:"alg"`
	}
	jwtPart(t, token, 0, &header)
	if iss := issuerOf(t, token); iss != doc.Issuer {
		t.Errorf("a new token has iss %q, the discovery document's issuer is %q", iss, doc.Issuer)
	}
	if !slices.Contains(doc.Algs, header.Alg) {
		t.Errorf("a token is signed with %s, the discovery document lists %q", header.Alg, doc.Algs)
	}
	found := false
	for _, k := range set.Keys {
		if k.Kid != header.Kid {
			continue
		}
		found = true
		if err := k.verify(token); err != nil {
			t.Errorf("the JWK of kid %s does not verify a token of the tenant: %v", k.Kid, err)
		}
	}
	if !found {
		t.Errorf("no key of the JWK set has the kid %q of the tenant's tokens: %s", header.Kid, body)
	}

	// Outside anonymousPaths, credentials are still required, even where
	// RBAC would let anyone read (/version, system:public-info-viewer).
	for _, path := range []string{"/api", "/version", "/openid/v1/jwks/extra"} {
		if status, _, body := anonymousGet(t, b, path); status != http.StatusUnauthorized {
			t.Errorf("anonymous GET %s: %d, want 401 (not in anonymousPaths): %.200s", path, status, body)
		}
	}
}

// The issuer change docs/day-2.md describes, each step a roll (the
// apiserver stopped and booted again on the same etcd, PKI and keys):
// with issuers [old], tokens name old; with [new, old], the old token
// still authenticates as its ServiceAccount and new tokens name new; with
// [new] alone, the old token is refused and the new one still works.
func TestRenderedAPIServer_AcceptsTokensOfTheOldIssuerDuringAnIssuerChange(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	etcdCA := must(pki.NewSelfSignedCA("etcd-ca", ecdsa, 24*time.Hour, now))
	etcd, _, _ := etcdServer(t, dir, "main", etcdCA)
	etcdClient := must(pki.NewSignedCert(etcdCA, pki.EtcdClientCertConfig(), ecdsa, time.Hour, now))

	const (
		oldIssuer = "https://kubernetes.default.svc.cluster.local"
		newIssuer = "https://oidc.tenant.example.com"
	)
	wantUser := "system:serviceaccount:" + workloadNamespace + ":" + workloadServiceAccount
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// step boots the tenant's apiserver with issuers, in a directory of
	// its own (as a new pod), with first's material when set.
	step := func(n int, first *booted, issuers ...string) *booted {
		t.Helper()
		stepDir := filepath.Join(dir, fmt.Sprintf("step-%d", n))
		if err := os.MkdirAll(stepDir, 0o700); err != nil {
			t.Fatal(err)
		}
		cfg := saIssuerSpec(t, "issuer-change", etcd, v1alpha1.ServiceAccountSpec{Issuers: issuers})
		b := bootPod(t, stepDir, cfg, apiserver.Environment{}, etcdCA, etcdClient, "", first, fmt.Sprintf("boot-%d", n))
		for _, iss := range issuers {
			if !slices.Contains(b.args, "--service-account-issuer="+iss) {
				t.Fatalf("step %d: the rendered command line has no --service-account-issuer=%s: %q", n, iss, b.args)
			}
		}
		return b
	}
	accepted := func(b *booted, what, token string) {
		t.Helper()
		user, err := b.whoAmI(ctx, token)
		if err != nil {
			t.Errorf("%s: refused: %v", what, err)
			return
		}
		if user.Username != wantUser {
			t.Errorf("%s authenticates as %q, want %q", what, user.Username, wantUser)
		}
	}
	refused := func(b *booted, what, token string) {
		t.Helper()
		if user, err := b.whoAmI(ctx, token); !apierrors.IsUnauthorized(err) {
			t.Errorf("%s: got user %+v, error %v; want it refused (401)", what, user, err)
		}
	}

	// Before: the old issuer alone.
	before := step(0, nil, oldIssuer)
	oldToken := serviceAccountToken(ctx, t, before)
	if iss := issuerOf(t, oldToken); iss != oldIssuer {
		t.Fatalf("with issuers [old], a token has iss %q, want %q", iss, oldIssuer)
	}
	accepted(before, "with issuers [old], the old issuer's token", oldToken)
	// The apiserver's audiences default to its issuers, so oldToken's aud
	// is [old] and a step without old would refuse it for its audience
	// too. This token of the old issuer is for the new audience, so that
	// only its issuer can refuse it.
	oldTokenForNew := serviceAccountToken(ctx, t, before, newIssuer)
	stopAPIServer(t, before)

	// Step 1: the new issuer first, the old one kept.
	both := step(1, before, newIssuer, oldIssuer)
	accepted(both, "with issuers [new, old], the old issuer's token", oldToken)
	accepted(both, "with issuers [new, old], the old issuer's token for the new audience", oldTokenForNew)
	newToken := serviceAccountToken(ctx, t, both)
	if iss := issuerOf(t, newToken); iss != newIssuer {
		t.Errorf("with issuers [new, old], a new token has iss %q, want %q (the first issuer signs)", iss, newIssuer)
	}
	accepted(both, "with issuers [new, old], the new issuer's token", newToken)
	stopAPIServer(t, both)

	// Step 3: the old issuer removed.
	after := step(2, before, newIssuer)
	refused(after, "with issuers [new], the old issuer's token", oldToken)
	refused(after, "with issuers [new], the old issuer's token for the new audience", oldTokenForNew)
	accepted(after, "with issuers [new], the new issuer's token", newToken)
}
