package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// loadConfig reads what rendering needs besides the spec and the
// certificates: the OIDC issuer's CA and the encryption material.
func (r *ApiServerConfigReconciler) loadConfig(ctx context.Context, p *pass) error {
	var err error
	if p.oidcCA, err = oidcCA(ctx, p.refs, p.cfg, p.c); err != nil {
		return err
	}
	return r.loadEncryption(ctx, p)
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
