package pki

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"

	"k8s.io/client-go/util/keyutil"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// ServiceAccountKey is the key pair that signs ServiceAccount tokens: its
// private key goes to --service-account-signing-key-file, its public key to
// --service-account-key-file.
//
// Formatted with any verb it shows only its algorithm, never the key.
type ServiceAccountKey struct {
	key crypto.Signer
}

// NewServiceAccountKey generates a service-account signing key of algorithm
// alg ("" means DefaultKeyAlgorithm). Token verifiers outside the cluster
// that read the issuer's JWKS must support the matching JWS algorithm (ES256
// for ECDSAP256, RS256 for RSA).
func NewServiceAccountKey(alg v1alpha1.KeyAlgorithm) (*ServiceAccountKey, error) {
	key, err := GenerateKey(alg)
	if err != nil {
		return nil, fmt.Errorf("generating the service-account signing key: %w", err)
	}
	return &ServiceAccountKey{key: key}, nil
}

// ParseServiceAccountKey reads a PEM private key, as written by
// PrivateKeyPEM.
func ParseServiceAccountKey(privateKeyPEM []byte) (*ServiceAccountKey, error) {
	parsed, err := keyutil.ParsePrivateKeyPEM(privateKeyPEM)
	if err != nil {
		return nil, fmt.Errorf("parsing the service-account signing key: %w", err)
	}
	key, ok := parsed.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("parsing the service-account signing key: a %T cannot sign", parsed)
	}
	return &ServiceAccountKey{key: key}, nil
}

// Public returns the public key.
func (k ServiceAccountKey) Public() crypto.PublicKey { return k.key.Public() }

// PrivateKeyPEM returns the private key in PEM, for
// --service-account-signing-key-file. Store it in a Secret only; never log
// it.
func (k ServiceAccountKey) PrivateKeyPEM() ([]byte, error) {
	out, err := keyutil.MarshalPrivateKeyToPEM(k.key)
	if err != nil {
		return nil, fmt.Errorf("encoding the service-account signing key: %w", err)
	}
	return out, nil
}

// PublicKeyPEM returns the public key as a PEM PUBLIC KEY block, for
// --service-account-key-file.
func (k ServiceAccountKey) PublicKeyPEM() ([]byte, error) {
	return PublicKeysPEM(k.key.Public())
}

// String names the key's algorithm, and nothing of the key.
func (k ServiceAccountKey) String() string {
	if k.key == nil {
		return "ServiceAccountKey{}"
	}
	return "ServiceAccountKey{" + keyAlgorithmName(k.key.Public()) + "}"
}

// Format prints String for every verb, so that no formatting of a
// ServiceAccountKey can reveal the key.
func (k ServiceAccountKey) Format(f fmt.State, _ rune) {
	_, _ = fmt.Fprint(f, k.String())
}

// PublicKeysPEM encodes public keys as a bundle of PEM PUBLIC KEY blocks in
// the order given, which should be newest first, dropping repeats of a key
// already written. kube-apiserver accepts a token signed by any key of the
// bundle in --service-account-key-file, which is how a signing key is
// rotated without invalidating the tokens the old key signed.
func PublicKeysPEM(newestFirst ...crypto.PublicKey) ([]byte, error) {
	if len(newestFirst) == 0 {
		return nil, errors.New("encoding service-account public keys: no key")
	}
	var buf bytes.Buffer
	var written []crypto.PublicKey
	for i, pub := range newestFirst {
		if pub == nil {
			return nil, fmt.Errorf("encoding service-account public key %d: no key", i)
		}
		if containsKey(written, pub) {
			continue
		}
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			return nil, fmt.Errorf("encoding service-account public key %d: %w", i, err)
		}
		buf.Write(pem.EncodeToMemory(&pem.Block{Type: keyutil.PublicKeyBlockType, Bytes: der}))
		written = append(written, pub)
	}
	return buf.Bytes(), nil
}

func containsKey(keys []crypto.PublicKey, k crypto.PublicKey) bool {
	for _, have := range keys {
		if publicKeysEqual(have, k) {
			return true
		}
	}
	return false
}

// ServiceAccountTrust is the bundle of --service-account-key-file while
// signing (a PEM private key) signs: the public keys of next (the key that
// signs once a rotation switches; empty outside one) and of signing and,
// while keepPrevious (a rotation still trusts the key it replaces), the
// keys of the previous bundle. It is the one place that bundle is composed.
func ServiceAccountTrust(signing, next, previous []byte, keepPrevious bool) ([]byte, error) {
	var keys []crypto.PublicKey
	for _, pem := range [][]byte{next, signing} {
		if len(pem) == 0 {
			continue
		}
		k, err := ParseServiceAccountKey(pem)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k.Public())
	}
	if keepPrevious && len(previous) > 0 {
		old, err := keyutil.ParsePublicKeysPEM(previous)
		if err != nil {
			return nil, fmt.Errorf("reading the service-account public keys trusted so far: %w", err)
		}
		for _, k := range old {
			keys = append(keys, k)
		}
	}
	return PublicKeysPEM(keys...)
}
