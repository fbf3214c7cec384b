package pki

import (
	"crypto/ecdsa"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

func TestParseKeyPair(t *testing.T) {
	for _, alg := range []v1alpha1.KeyAlgorithm{KeyAlgorithmECDSAP256, KeyAlgorithmRSA2048} {
		t.Run(string(alg), func(t *testing.T) {
			ca, err := NewSelfSignedCA("kubernetes", alg, year, now)
			if err != nil {
				t.Fatal(err)
			}
			keyPEM, err := ca.KeyPEM()
			if err != nil {
				t.Fatal(err)
			}
			parsed, err := ParseKeyPair(ca.CertPEM(), keyPEM)
			if err != nil {
				t.Fatalf("ParseKeyPair: %v", err)
			}
			if !parsed.Cert().Equal(ca.Cert()) {
				t.Error("the parsed certificate differs from the encoded one")
			}
			if got := KeyAlgorithmOf(parsed.Key().Public()); got != alg {
				t.Errorf("the parsed key is %s, want %s", got, alg)
			}
			// The parsed pair can still sign.
			leaf, err := NewSignedCert(parsed, AdminCertConfig(), alg, day, now)
			if err != nil {
				t.Fatalf("signing with the parsed CA: %v", err)
			}
			if err := leaf.Cert().CheckSignatureFrom(ca.Cert()); err != nil {
				t.Errorf("the leaf signed by the parsed CA does not verify: %v", err)
			}
		})
	}
}

func TestParseKeyPairRejects(t *testing.T) {
	ca := mustCA(t, "kubernetes", year, now)
	other := mustCA(t, "other", year, now)
	otherKey, err := other.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cert    []byte
		key     []byte
		wantErr string
	}{
		{name: "key of another certificate", cert: ca.CertPEM(), key: otherKey, wantErr: "does not belong to the certificate"},
		{name: "no certificate", cert: []byte("junk"), key: otherKey, wantErr: "parsing the certificate"},
		{name: "no key", cert: ca.CertPEM(), key: []byte("junk"), wantErr: "parsing the private key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseKeyPair(tt.cert, tt.key)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") || strings.Contains(err.Error(), string(otherKey[40:80])) {
				t.Errorf("the error shows key material: %v", err)
			}
		})
	}
}

// TestKeyPairFormatting proves that printing a KeyPair or a
// ServiceAccountKey, however it is done, never shows the private key.
func TestKeyPairFormatting(t *testing.T) {
	for _, alg := range []v1alpha1.KeyAlgorithm{KeyAlgorithmECDSAP256, KeyAlgorithmRSA2048} {
		t.Run(string(alg), func(t *testing.T) {
			ca, err := NewSelfSignedCA("kubernetes", alg, year, now)
			if err != nil {
				t.Fatal(err)
			}
			sa, err := NewServiceAccountKey(alg)
			if err != nil {
				t.Fatal(err)
			}
			secrets := append(secretNumbers(ca.Key()), secretNumbers(sa.key)...)
			values := map[string]any{
				"pair": ca, "pair value": *ca, "sa key": sa, "sa key value": *sa,
				"in a struct": struct{ CA *KeyPair }{ca},
				"in a slice":  []*KeyPair{ca},
				"in a map":    map[string]*ServiceAccountKey{"sa": sa},
			}
			for name, v := range values {
				for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d"} {
					out := fmt.Sprintf(verb, v)
					if strings.Contains(out, "PRIVATE KEY") {
						t.Errorf("%s formatted with %s shows a PEM key: %s", name, verb, out)
					}
					for _, secret := range secrets {
						if strings.Contains(out, secret) {
							t.Errorf("%s formatted with %s shows the private key: %s", name, verb, out)
						}
					}
				}
			}
			for name, v := range map[string]any{"pair": ca, "sa key": sa} {
				if out, err := json.Marshal(v); err != nil || string(out) != "{}" {
					t.Errorf("%s as JSON: %s, %v; want {}", name, out, err)
				}
			}
			if s := ca.String(); !strings.Contains(s, "kubernetes@") || !strings.Contains(s, string(alg)) {
				t.Errorf("String() = %s, want the subject and the key algorithm", s)
			}
			if s, want := sa.String(), "ServiceAccountKey{"+string(alg)+"}"; s != want {
				t.Errorf("String() = %s, want %s", s, want)
			}
		})
	}
}

// secretNumbers are the private numbers of a key in the bases fmt prints.
func secretNumbers(key any) []string {
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		b, _ := k.Bytes()
		return []string{fmt.Sprintf("%x", b), fmt.Sprintf("%d", b), fmt.Sprintf("%v", b)}
	case *rsa.PrivateKey:
		return []string{k.D.String(), k.D.Text(16), k.Primes[0].String(), k.Primes[0].Text(16)}
	}
	return nil
}

func TestKeyPairFormattingNil(t *testing.T) {
	var kp *KeyPair
	var sa *ServiceAccountKey
	for _, tc := range []struct {
		value any
		want  string
	}{{kp, "<nil>"}, {sa, "<nil>"}, {KeyPair{}, "KeyPair{}"}, {ServiceAccountKey{}, "ServiceAccountKey{}"}} {
		for _, verb := range []string{"%v", "%+v"} {
			if got := fmt.Sprintf(verb, tc.value); got != tc.want {
				t.Errorf("formatting an empty key with %s gives %q, want %q", verb, got, tc.want)
			}
		}
	}
}
