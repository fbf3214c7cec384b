package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"strings"
	"testing"

	"k8s.io/client-go/util/keyutil"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// TestServiceAccountKey proves that what the private key signs verifies
// with the public key kube-apiserver reads from --service-account-key-file,
// after both went through PEM.
func TestServiceAccountKey(t *testing.T) {
	for _, alg := range []v1alpha1.KeyAlgorithm{KeyAlgorithmECDSAP256, KeyAlgorithmRSA2048} {
		t.Run(string(alg), func(t *testing.T) {
			key, err := NewServiceAccountKey(alg)
			if err != nil {
				t.Fatal(err)
			}
			privPEM, err := key.PrivateKeyPEM()
			if err != nil {
				t.Fatal(err)
			}
			pubPEM, err := key.PublicKeyPEM()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(pubPEM), "PRIVATE") {
				t.Fatal("the public key file holds a private key")
			}
			signer, err := ParseServiceAccountKey(privPEM)
			if err != nil {
				t.Fatal(err)
			}
			pubs, err := keyutil.ParsePublicKeysPEM(pubPEM)
			if err != nil || len(pubs) != 1 {
				t.Fatalf("parsing the public key file: %d keys, %v", len(pubs), err)
			}
			digest := sha256.Sum256([]byte(`{"sub":"system:serviceaccount:default:default"}`))
			sig, err := signer.key.Sign(rand.Reader, digest[:], crypto.SHA256)
			if err != nil {
				t.Fatal(err)
			}
			if !verifySignature(pubs[0], digest[:], sig) {
				t.Error("a signature of the signing key does not verify with the published public key")
			}
		})
	}
	if _, err := NewServiceAccountKey("HS256"); err == nil || !strings.Contains(err.Error(), `"HS256"`) {
		t.Errorf("unknown algorithm: error = %v, want one naming it", err)
	}
	if _, err := ParseServiceAccountKey([]byte("junk")); err == nil {
		t.Error("parsing junk: no error")
	}
}

func TestPublicKeysPEM(t *testing.T) {
	oldKey, err := NewServiceAccountKey("")
	if err != nil {
		t.Fatal(err)
	}
	newKey, err := NewServiceAccountKey(KeyAlgorithmRSA2048)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		keys []crypto.PublicKey
		want []crypto.PublicKey
	}{
		{name: "one key", keys: []crypto.PublicKey{oldKey.Public()}, want: []crypto.PublicKey{oldKey.Public()}},
		{name: "newest first, as given", keys: []crypto.PublicKey{newKey.Public(), oldKey.Public()}, want: []crypto.PublicKey{newKey.Public(), oldKey.Public()}},
		{name: "repeats dropped", keys: []crypto.PublicKey{newKey.Public(), oldKey.Public(), newKey.Public()}, want: []crypto.PublicKey{newKey.Public(), oldKey.Public()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := PublicKeysPEM(tt.keys...)
			if err != nil {
				t.Fatal(err)
			}
			got, err := keyutil.ParsePublicKeysPEM(out)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("%d keys, want %d", len(got), len(tt.want))
			}
			for i := range got {
				if !publicKeysEqual(got[i], tt.want[i]) {
					t.Errorf("key %d is not the expected one", i)
				}
			}
		})
	}
	if _, err := PublicKeysPEM(); err == nil {
		t.Error("no keys: no error")
	}
}

func verifySignature(pub any, digest, sig []byte) bool {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		return ecdsa.VerifyASN1(k, digest, sig)
	case *rsa.PublicKey:
		return rsa.VerifyPKCS1v15(k, crypto.SHA256, digest, sig) == nil
	}
	return false
}
