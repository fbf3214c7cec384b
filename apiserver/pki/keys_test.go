package pki

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

func TestGenerateKey(t *testing.T) {
	tests := []struct {
		alg     v1alpha1.KeyAlgorithm
		want    v1alpha1.KeyAlgorithm
		slow    bool
		wantErr string
	}{
		{alg: "", want: KeyAlgorithmECDSAP256},
		{alg: KeyAlgorithmECDSAP256, want: KeyAlgorithmECDSAP256},
		{alg: KeyAlgorithmRSA2048, want: KeyAlgorithmRSA2048},
		{alg: KeyAlgorithmRSA3072, want: KeyAlgorithmRSA3072, slow: true},
		{alg: KeyAlgorithmRSA4096, want: KeyAlgorithmRSA4096, slow: true},
		{alg: "Ed25519", wantErr: `unknown key algorithm "Ed25519"`},
		{alg: "rsa2048", wantErr: `unknown key algorithm "rsa2048"`},
	}
	for _, tt := range tests {
		t.Run(string(tt.alg), func(t *testing.T) {
			if tt.slow && testing.Short() {
				t.Skip("large RSA keys are slow to generate")
			}
			key, err := GenerateKey(tt.alg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("GenerateKey(%q) error = %v, want one containing %q", tt.alg, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("GenerateKey(%q): %v", tt.alg, err)
			}
			if got := KeyAlgorithmOf(key.Public()); got != tt.want {
				t.Errorf("GenerateKey(%q) made a %s key, want %s", tt.alg, got, tt.want)
			}
		})
	}
}

func TestKeyAlgorithmOf(t *testing.T) {
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	edPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if got := KeyAlgorithmOf(&p384.PublicKey); got != "" {
		t.Errorf("a P-384 key is %q, want no KeyAlgorithm", got)
	}
	if got := KeyAlgorithmOf(edPub); got != "" {
		t.Errorf("an Ed25519 key is %q, want no KeyAlgorithm", got)
	}
}
