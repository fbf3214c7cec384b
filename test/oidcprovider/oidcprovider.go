// Package oidcprovider is a JWT issuer for tests: an OpenID Connect
// provider over HTTPS with a CA of its own, which serves its discovery
// document and its key set and signs tokens with its RSA key (RS256), for
// a kube-apiserver configured with it (an AuthenticationConfiguration jwt
// authenticator) to take.
package oidcprovider

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
)

// Provider is a running provider.
type Provider struct {
	name string
	addr *net.TCPAddr
	url  string
	ca   *pki.KeyPair
	key  *rsa.PrivateKey
}

// Start serves a provider called name (its key's id and its CA's name)
// on ln until the test ends. Its issuer URL is https://<ln's address>,
// and its serving certificate names ln's IP address, which must be one
// that its clients dial (not an unspecified address such as 0.0.0.0).
func Start(t testing.TB, name string, ln net.Listener) *Provider {
	t.Helper()
	addr, ok := ln.Addr().(*net.TCPAddr)
	if !ok || addr.IP.IsUnspecified() {
		t.Fatalf("the OIDC provider %s: listener on %s, want a TCP address with an IP clients dial", name, ln.Addr())
	}
	now := time.Now()
	ca, err := pki.NewSelfSignedCA(name+"-ca", pki.KeyAlgorithmECDSAP256, 24*time.Hour, now)
	if err != nil {
		t.Fatalf("the OIDC provider %s's CA: %v", name, err)
	}
	serving, err := pki.NewSignedCert(ca, pki.ServingCertConfig(nil, []net.IP{addr.IP}), pki.KeyAlgorithmECDSAP256, 24*time.Hour, now)
	if err != nil {
		t.Fatalf("the OIDC provider %s's serving certificate: %v", name, err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatalf("the OIDC provider %s's signing key: %v", name, err)
	}
	p := &Provider{name: name, addr: addr, url: "https://" + addr.String(), ca: ca, key: key}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{
			"issuer": p.url, "jwks_uri": p.url + "/keys",
			"id_token_signing_alg_values_supported": []string{"RS256"},
			"response_types_supported":              []string{"id_token"},
			"subject_types_supported":               []string{"public"},
		})
	})
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"keys": []map[string]string{{
			"kty": "RSA", "alg": "RS256", "use": "sig", "kid": p.name,
			"n": base64.RawURLEncoding.EncodeToString(p.key.N.Bytes()),
			"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(p.key.E)).Bytes()),
		}}})
	})
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{{Certificate: [][]byte{serving.Cert().Raw}, PrivateKey: serving.Key()}},
		},
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("the OIDC provider %s stopped serving: %v", name, err)
		}
	})
	return p
}

// Listen starts a provider called name on addr (host:port, port 0 for any
// free one); see Start.
func Listen(t testing.TB, name, addr string) *Provider {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the OIDC provider %s: listening on %s: %v", name, addr, err)
	}
	return Start(t, name, ln)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// URL is the provider's issuer URL, https://host:port.
func (p *Provider) URL() string { return p.url }

// Port is the port the provider serves on.
func (p *Provider) Port() int { return p.addr.Port }

// CAPEM is the provider's CA, which signed its serving certificate (PEM).
func (p *Provider) CAPEM() []byte { return p.ca.CertPEM() }

// Token is a JWT of the provider for audience, valid for an hour, with
// claims besides iss, aud, iat and exp (which claims may override). Claims
// that do not encode as JSON are a mistake of the test: Token panics.
func (p *Provider) Token(audience string, claims map[string]any) string {
	now := time.Now()
	all := map[string]any{"iss": p.url, "aud": audience, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	for k, v := range claims {
		all[k] = v
	}
	part := func(v any) string {
		data, err := json.Marshal(v)
		if err != nil {
			panic(fmt.Sprintf("the OIDC provider %s: encoding a token's part: %v", p.name, err))
		}
		return base64.RawURLEncoding.EncodeToString(data)
	}
	signed := part(map[string]string{"alg": "RS256", "typ": "JWT", "kid": p.name}) + "." + part(all)
	digest := sha256.Sum256([]byte(signed))
	signature, err := rsa.SignPKCS1v15(nil, p.key, crypto.SHA256, digest[:])
	if err != nil {
		panic(fmt.Sprintf("the OIDC provider %s: signing a token: %v", p.name, err))
	}
	return signed + "." + base64.RawURLEncoding.EncodeToString(signature)
}
