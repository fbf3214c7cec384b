package apiserver

import (
	"bytes"
	"context"
	"crypto/aes"
	"fmt"
	"slices"

	"k8s.io/apiserver/pkg/storage/value"
	aestransformer "k8s.io/apiserver/pkg/storage/value/encrypt/aes"
	"k8s.io/apiserver/pkg/storage/value/encrypt/secretbox"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// Decrypter tells whether the operator's encryption keys read a value
// stored in etcd, with kube-apiserver's own transformers (the same
// upstream code, the etcd key as the authenticated data, as its store
// passes it): a value that does not begin with EncryptedValuePrefix is
// plain and readable; an encrypted one is readable when one of the keys
// (current, next, old) has its prefix and decrypts it.
type Decrypter struct {
	keys []prefixed
}

// prefixed is a key's transformer with the prefix of what it stored.
type prefixed struct {
	prefix      []byte
	transformer value.Transformer
	// bound: the provider authenticates the etcd key with the value
	// (aesgcm).
	bound bool
}

// NewDecrypter reads with every key of m.
func NewDecrypter(m EncryptionKeys) (*Decrypter, error) {
	d := &Decrypter{}
	for _, l := range []*EncryptionLayout{&m.Current, m.Next, m.Old} {
		if l == nil || l.Key.StoredPrefix() == "" {
			continue
		}
		t, err := transformerOf(l.Key)
		if err != nil {
			return nil, err
		}
		d.keys = append(d.keys, prefixed{prefix: []byte(l.Key.StoredPrefix()), transformer: t, bound: l.Key.Provider == v1alpha1.EncryptionAESGCM})
	}
	return d, nil
}

// Reads reports whether the keys read the value stored under key. (It
// calls each key's transformer itself: upstream's prefix transformer logs
// every value it cannot read, and a tenant's etcd may hold many.)
func (d *Decrypter) Reads(key, stored []byte) bool {
	if !bytes.HasPrefix(stored, []byte(EncryptedValuePrefix)) {
		return true
	}
	for _, k := range d.keys {
		if rest, ok := bytes.CutPrefix(stored, k.prefix); ok {
			if _, _, err := k.transformer.TransformFromStorage(context.Background(), rest, value.DefaultContext(key)); err == nil {
				return true
			}
		}
	}
	return false
}

// transformerOf is the upstream transformer of k's provider.
func transformerOf(k EncryptionKey) (value.Transformer, error) {
	if len(k.Secret) != 32 {
		return nil, fmt.Errorf("encryption key %s has %d bytes, not 32: restore its Secret from a backup", k.Name, len(k.Secret))
	}
	switch k.Provider {
	case v1alpha1.EncryptionSecretbox:
		return secretbox.NewSecretboxTransformer([32]byte(k.Secret)), nil
	case v1alpha1.EncryptionAESCBC, v1alpha1.EncryptionAESGCM:
		block, err := aes.NewCipher(k.Secret)
		if err != nil {
			return nil, fmt.Errorf("encryption key %s: %w", k.Name, err)
		}
		if k.Provider == v1alpha1.EncryptionAESCBC {
			return aestransformer.NewCBCTransformer(block), nil
		}
		return aestransformer.NewGCMTransformer(block)
	}
	return nil, fmt.Errorf("encryption key %s: the operator does not decrypt provider %s", k.Name, k.Provider)
}

// Rebind makes stored, read under the etcd key from, readable under the
// etcd key to: aesgcm binds each value to its key (the authenticated
// data), so a value moved to another prefix is decrypted and encrypted
// again with the same key; what other providers wrote, and plain values,
// move as they are. It fails on a value none of the keys reads.
func (d *Decrypter) Rebind(from, to, stored []byte) ([]byte, error) {
	if !bytes.HasPrefix(stored, []byte(EncryptedValuePrefix)) {
		return stored, nil
	}
	for _, k := range d.keys {
		rest, ok := bytes.CutPrefix(stored, k.prefix)
		if !ok {
			continue
		}
		if !k.bound {
			if _, _, err := k.transformer.TransformFromStorage(context.Background(), rest, value.DefaultContext(from)); err == nil {
				return stored, nil
			}
			continue
		}
		plain, _, err := k.transformer.TransformFromStorage(context.Background(), rest, value.DefaultContext(from))
		if err != nil {
			continue
		}
		sealed, err := k.transformer.TransformToStorage(context.Background(), plain, value.DefaultContext(to))
		if err != nil {
			return nil, fmt.Errorf("encrypting %s again for %s: %w", from, to, err)
		}
		return append(slices.Clip(k.prefix), sealed...), nil
	}
	return nil, fmt.Errorf("no key of the tenant decrypts the value of %s", from)
}
