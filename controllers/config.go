package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
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
	if err := r.loadEncryption(ctx, p); err != nil {
		return err
	}
	if err := p.renderEncryption(); err != nil || p.encryption == nil {
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
