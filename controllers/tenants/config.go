package tenants

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// loadConfig reads what rendering needs besides the spec and the
// certificates: the JWT issuers' CAs and the encryption material.
func (r *Reconciler) loadConfig(ctx context.Context, p *pass) error {
	var err error
	if p.issuerCAs, err = issuerCAs(ctx, p.refs, p.cfg); err != nil {
		return err
	}
	return r.loadEncryption(ctx, p)
}

// issuerCAs reads the JWT issuers' CAs from the objects the spec names
// (checkReferences made sure that they exist and parse).
func issuerCAs(ctx context.Context, refs client.Reader, cfg *v1alpha1.ApiServerConfig) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, ref := range apiserver.IssuerCARefs(&cfg.Spec) {
		data, err := referencedKey(ctx, refs, cfg.Namespace, ref)
		if err != nil {
			return nil, err
		}
		out[ref.Key()] = data
	}
	return out, nil
}

// referencedKey is the data of ref's first key.
func referencedKey(ctx context.Context, refs client.Reader, namespace string, ref apiserver.Reference) ([]byte, error) {
	key := client.ObjectKey{Namespace: namespace, Name: ref.Name}
	switch ref.Kind {
	case apiserver.KindSecret:
		s := &corev1.Secret{}
		if err := refs.Get(ctx, key, s); err != nil {
			return nil, fmt.Errorf("reading Secret %s/%s named by %s: %w", namespace, ref.Name, ref.Field, err)
		}
		return s.Data[ref.Keys[0]], nil
	default:
		cm := &corev1.ConfigMap{}
		if err := refs.Get(ctx, key, cm); err != nil {
			return nil, fmt.Errorf("reading ConfigMap %s/%s named by %s: %w", namespace, ref.Name, ref.Field, err)
		}
		if v, ok := cm.BinaryData[ref.Keys[0]]; ok {
			return v, nil
		}
		return []byte(cm.Data[ref.Keys[0]]), nil
	}
}
