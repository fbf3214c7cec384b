package controllers

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// reconcileConfig applies the rendered configuration files (the ConfigMap)
// and the encryption keys the operator manages.
func (r *ApiServerConfigReconciler) reconcileConfig(ctx context.Context, p *pass) error {
	oidcCA, err := oidcCA(ctx, p.refs, p.cfg, p.c)
	if err != nil {
		return err
	}
	if p.configMap, err = apiserver.DesiredConfigMap(p.c, oidcCA); err != nil {
		return err
	}
	if err := r.apply(ctx, p.cfg, p.configMap, true); err != nil {
		return err
	}
	if p.encryption, err = r.encryptionSecret(ctx, p.c); err != nil || p.encryption == nil {
		return err
	}
	return r.apply(ctx, p.cfg, p.encryption, true)
}

// oidcCA reads the OIDC issuer's CA from the ConfigMap the spec names.
func oidcCA(ctx context.Context, refs client.Reader, cfg *v1alpha1.ApiServerConfig, c *apiserver.Completed) ([]byte, error) {
	o := c.Spec.Authentication.OIDC
	if o == nil || o.CAConfigMapName == "" {
		return nil, nil
	}
	cm := &corev1.ConfigMap{}
	if err := refs.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: o.CAConfigMapName}, cm); err != nil {
		return nil, fmt.Errorf("reading ConfigMap %s/%s named by spec.authentication.oidc.caConfigMapName: %w", cfg.Namespace, o.CAConfigMapName, err)
	}
	ca := cm.Data["ca.crt"]
	if ca == "" {
		return nil, fmt.Errorf("ConfigMap %s/%s has no key ca.crt", cfg.Namespace, o.CAConfigMapName)
	}
	return []byte(ca), nil
}

// encryptionKeysKey keeps the raw keys next to the configuration, so that
// they survive any change of the rendered file.
const encryptionKeysKey = "keys.json"

// encryptionSecret keeps the encryption keys of spec.encryption.provider,
// generating the first one; nil when the operator manages no encryption.
func (r *ApiServerConfigReconciler) encryptionSecret(ctx context.Context, c *apiserver.Completed) (*corev1.Secret, error) {
	if c.Spec.Encryption == nil || c.Spec.Encryption.Provider == "" {
		return nil, nil
	}
	var keys []apiserver.EncryptionKey
	existing := &corev1.Secret{}
	err := ownSecrets{r}.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: apiserver.EncryptionSecretName(c.Name)}, existing)
	switch {
	case err == nil && len(existing.Data[encryptionKeysKey]) > 0:
		if err := json.Unmarshal(existing.Data[encryptionKeysKey], &keys); err != nil {
			return nil, fmt.Errorf("reading the encryption keys of Secret %s/%s (restore it from a backup: data encrypted with a lost key is lost): %w",
				c.Namespace, apiserver.EncryptionSecretName(c.Name), err)
		}
	case err != nil && !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading Secret %s/%s: %w", c.Namespace, apiserver.EncryptionSecretName(c.Name), err)
	default:
		key := apiserver.EncryptionKey{Name: "key-1", Secret: make([]byte, 32)}
		if _, err := rand.Read(key.Secret); err != nil {
			return nil, fmt.Errorf("generating an encryption key: %w", err)
		}
		keys = []apiserver.EncryptionKey{key}
	}
	s, err := apiserver.DesiredEncryptionSecret(c, keys)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(keys) //nolint:gosec // G117: the keys are marshaled into the Secret that exists to hold them
	if err != nil {
		return nil, fmt.Errorf("encoding the encryption keys: %w", err)
	}
	s.Data[encryptionKeysKey] = raw
	return s, nil
}
