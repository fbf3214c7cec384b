package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"fmt"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// The key algorithms of spec.certificates.keyAlgorithm.
const (
	// KeyAlgorithmECDSAP256 is ECDSA on the NIST P-256 curve, the default.
	KeyAlgorithmECDSAP256 v1alpha1.KeyAlgorithm = "ECDSAP256"
	// KeyAlgorithmRSA2048 is RSA with a 2048-bit modulus.
	KeyAlgorithmRSA2048 v1alpha1.KeyAlgorithm = "RSA2048"
	// KeyAlgorithmRSA3072 is RSA with a 3072-bit modulus.
	KeyAlgorithmRSA3072 v1alpha1.KeyAlgorithm = "RSA3072"
	// KeyAlgorithmRSA4096 is RSA with a 4096-bit modulus.
	KeyAlgorithmRSA4096 v1alpha1.KeyAlgorithm = "RSA4096"

	// DefaultKeyAlgorithm is used when no algorithm is given.
	DefaultKeyAlgorithm = KeyAlgorithmECDSAP256
)

// GenerateKey returns a new private key of the given algorithm; the empty
// algorithm means DefaultKeyAlgorithm. An unknown algorithm is an error that
// names it.
func GenerateKey(alg v1alpha1.KeyAlgorithm) (crypto.Signer, error) {
	switch alg {
	case "", KeyAlgorithmECDSAP256:
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("generating an ECDSA P-256 key: %w", err)
		}
		return key, nil
	case KeyAlgorithmRSA2048, KeyAlgorithmRSA3072, KeyAlgorithmRSA4096:
		bits := rsaBits(alg)
		key, err := rsa.GenerateKey(rand.Reader, bits)
		if err != nil {
			return nil, fmt.Errorf("generating an RSA %d key: %w", bits, err)
		}
		return key, nil
	default:
		return nil, fmt.Errorf("generating a key: unknown key algorithm %q (want one of %s, %s, %s, %s)",
			string(alg), KeyAlgorithmECDSAP256, KeyAlgorithmRSA2048, KeyAlgorithmRSA3072, KeyAlgorithmRSA4096)
	}
}

func rsaBits(alg v1alpha1.KeyAlgorithm) int {
	switch alg {
	case KeyAlgorithmRSA3072:
		return 3072
	case KeyAlgorithmRSA4096:
		return 4096
	default:
		return 2048
	}
}

// KeyAlgorithmOf names the algorithm of a public key, or returns "" for a
// key that no KeyAlgorithm describes (another curve, another RSA size,
// Ed25519).
func KeyAlgorithmOf(pub crypto.PublicKey) v1alpha1.KeyAlgorithm {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() {
			return KeyAlgorithmECDSAP256
		}
	case *rsa.PublicKey:
		switch k.N.BitLen() {
		case 2048:
			return KeyAlgorithmRSA2048
		case 3072:
			return KeyAlgorithmRSA3072
		case 4096:
			return KeyAlgorithmRSA4096
		}
	}
	return ""
}

// publicKeysEqual reports whether two public keys are the same key.
func publicKeysEqual(a, b crypto.PublicKey) bool {
	eq, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(b)
}
