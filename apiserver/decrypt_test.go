package apiserver

import (
	"bytes"
	"context"
	"crypto/aes"
	"testing"

	"k8s.io/apiserver/pkg/storage/value"
	aestransformer "k8s.io/apiserver/pkg/storage/value/encrypt/aes"
	"k8s.io/apiserver/pkg/storage/value/encrypt/secretbox"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// stored is a value as kube-apiserver stores it under etcdKey with k.
func stored(t *testing.T, k EncryptionKey, etcdKey string) []byte {
	t.Helper()
	var tr value.Transformer
	switch k.Provider {
	case v1alpha1.EncryptionSecretbox:
		tr = secretbox.NewSecretboxTransformer([32]byte(k.Secret))
	default:
		block, err := aes.NewCipher(k.Secret)
		if err != nil {
			t.Fatal(err)
		}
		if k.Provider == v1alpha1.EncryptionAESCBC {
			tr = aestransformer.NewCBCTransformer(block)
		} else if tr, err = aestransformer.NewGCMTransformer(block); err != nil {
			t.Fatal(err)
		}
	}
	out, err := tr.TransformToStorage(context.Background(), []byte("k8s\x00a secret"), value.DefaultContext(etcdKey))
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(k.StoredPrefix()), out...)
}

func TestDecrypter_ReadsWhatItsKeysWroteAndNothingElse(t *testing.T) {
	for _, provider := range []v1alpha1.EncryptionProvider{v1alpha1.EncryptionSecretbox, v1alpha1.EncryptionAESCBC, v1alpha1.EncryptionAESGCM} {
		t.Run(string(provider), func(t *testing.T) {
			current, err := NewEncryptionKey(provider, "key-2")
			if err != nil {
				t.Fatal(err)
			}
			old, _ := NewEncryptionKey(provider, "key-1")
			lost, _ := NewEncryptionKey(provider, "key-1") // another tenant's key-1
			d, err := NewDecrypter(EncryptionKeys{Current: EncryptionLayout{Key: current}, Old: &EncryptionLayout{Key: old}})
			if err != nil {
				t.Fatal(err)
			}
			const key = "/tenants/a/secrets/default/s"
			for what, c := range map[string]struct {
				value []byte
				reads bool
			}{
				"plain":                      {[]byte("\x6b\x38\x73\x00plain protobuf"), true},
				"the current key's":          {stored(t, current, key), true},
				"the old key's":              {stored(t, old, key), true},
				"a lost key of the old name": {stored(t, lost, key), false},
				"a key it never had":         {stored(t, EncryptionKey{Name: "key-9", Provider: provider, Secret: current.Secret}, key), false},
				"a truncated value":          {stored(t, current, key)[:len(current.StoredPrefix())+4], false},
			} {
				if got := d.Reads([]byte(key), c.value); got != c.reads {
					t.Errorf("%s: Reads is %v", what, got)
				}
			}
			// aesgcm binds the value to its etcd key: moved, it is not read.
			if provider == v1alpha1.EncryptionAESGCM && d.Reads([]byte(key), stored(t, current, key+"-moved")) {
				t.Error("an aesgcm value moved to another key is read")
			}
		})
	}
}

func TestDecrypter_RebindMovesAValueToAnotherKey(t *testing.T) {
	for _, provider := range []v1alpha1.EncryptionProvider{v1alpha1.EncryptionSecretbox, v1alpha1.EncryptionAESCBC, v1alpha1.EncryptionAESGCM} {
		t.Run(string(provider), func(t *testing.T) {
			k, err := NewEncryptionKey(provider, "key-1")
			if err != nil {
				t.Fatal(err)
			}
			d, err := NewDecrypter(EncryptionKeys{Current: EncryptionLayout{Key: k}})
			if err != nil {
				t.Fatal(err)
			}
			from, to := []byte("/tenants/a/secrets/default/s"), []byte("/tenants/b/secrets/default/s")
			v := stored(t, k, string(from))
			moved, err := d.Rebind(from, to, v)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Reads(to, moved) {
				t.Fatal("the moved value does not read under its new key")
			}
			if provider != v1alpha1.EncryptionAESGCM && !bytes.Equal(moved, v) {
				t.Error("a value its provider does not bind to its key was changed")
			}
			if plain := []byte("k8s\x00plain"); !bytes.Equal(must(d.Rebind(from, to, plain)), plain) {
				t.Error("a plain value was changed")
			}
			other, _ := NewEncryptionKey(provider, "key-1")
			if _, err := d.Rebind(from, to, stored(t, other, string(from))); err == nil {
				t.Error("rebound a value no key of the tenant reads")
			}
		})
	}
}
