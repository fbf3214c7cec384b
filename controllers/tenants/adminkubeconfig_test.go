package tenants

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
)

// TestApiServerConfigReconciler_AdminKubeconfigIsShortLivedAndCanBeTurnedOff:
// the admin kubeconfig's certificate lives spec.adminCredentials.lifetime
// (8h by default), one that would outlive a shortened lifetime is issued
// again, and with kubeconfigSecret Disabled the Secret goes while the
// operator keeps a credential of its own (status still tracks it).
func TestApiServerConfigReconciler_AdminKubeconfigIsShortLivedAndCanBeTurnedOff(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "shortlived", nil)
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	adminCert := func() (*x509.Certificate, error) {
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: apiserver.AdminKubeconfigSecretName("shortlived")}, s); err != nil {
			return nil, err
		}
		kp := pki.KubeconfigKeyPair(s.Data[apiserver.KubeconfigKey])
		if kp == nil {
			return nil, fmt.Errorf("Secret %s holds no admin certificate", s.Name)
		}
		return kp.Cert(), nil
	}
	lifetimeIs := func(want time.Duration) func() error {
		return func() error {
			cert, err := adminCert()
			if err != nil {
				return err
			}
			// Certificates keep whole seconds.
			if got := cert.NotAfter.Sub(cert.NotBefore) - pki.ClockSkew; got < want-time.Second || got > want+time.Second {
				return fmt.Errorf("the admin certificate lives %s, want %s", got, want)
			}
			if !slices.Equal(cert.Subject.Organization, []string{pki.SystemMastersGroup}) {
				return fmt.Errorf("the admin certificate is in %v", cert.Subject.Organization)
			}
			got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
			for _, c := range got.Status.Certificates {
				if c.Name == "admin" && c.NotAfter.Time.Equal(cert.NotAfter.UTC().Truncate(time.Second)) && got.Status.AdminKubeconfigSecretName == apiserver.AdminKubeconfigSecretName("shortlived") {
					return nil
				}
			}
			return fmt.Errorf("status does not report the admin certificate ending %s: %+v", cert.NotAfter, got.Status.Certificates)
		}
	}
	eventually(t, 30*time.Second, "the admin kubeconfig lives 8h by default", lifetimeIs(8*time.Hour))

	updateTenant(t, cfg, func(s *v1alpha1.ApiServerConfigSpec) {
		s.AdminCredentials.Lifetime = &metav1.Duration{Duration: 45 * time.Minute}
	})
	eventually(t, 30*time.Second, "a shortened lifetime issues the admin certificate again", lifetimeIs(45*time.Minute))

	updateTenant(t, cfg, func(s *v1alpha1.ApiServerConfigSpec) {
		s.AdminCredentials.KubeconfigSecret = v1alpha1.AdminKubeconfigSecretDisabled
	})
	eventually(t, 30*time.Second, "Disabled deletes the admin kubeconfig", func() error {
		if _, err := adminCert(); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the admin kubeconfig Secret: %w", err)
		}
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		if got.Status.AdminKubeconfigSecretName != "" || got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("status names %q (generation %d of %d)", got.Status.AdminKubeconfigSecretName, got.Status.ObservedGeneration, got.Generation)
		}
		if !slices.ContainsFunc(got.Status.Certificates, func(c v1alpha1.CertificateStatus) bool { return c.Name == "admin" }) {
			return fmt.Errorf("status no longer tracks the operator's own admin certificate: %+v", got.Status.Certificates)
		}
		return nil
	})

	updateTenant(t, cfg, func(s *v1alpha1.ApiServerConfigSpec) {
		s.AdminCredentials.KubeconfigSecret = v1alpha1.AdminKubeconfigSecretEnabled
	})
	eventually(t, 30*time.Second, "Enabled publishes it again", lifetimeIs(45*time.Minute))
}

// TestDeploymentInputs_LeaveTheAdminCredentialsOut: what a pod reads does
// not change with spec.adminCredentials, so the hash of what the tenant
// decides does not either: an operator template held for a maintenance
// window is not taken as the tenant's change when the operator's upgrade
// brings the field's defaults into every stored spec. A spec without the
// field writes no adminCredentials key (the JSON of specs of before).
func TestDeploymentInputs_LeaveTheAdminCredentialsOut(t *testing.T) {
	cfg := tenant("inputs", "inputs", nil)
	c, err := apiserver.Complete(cfg, apiserver.Inputs{})
	if err != nil {
		t.Fatal(err)
	}
	p := &pass{cfg: cfg, c: c, refs: &referenced{}, desired: &apiserver.Objects{ConfigMap: &corev1.ConfigMap{}}}
	before, err := p.deploymentInputs()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Spec.AdminCredentials = v1alpha1.AdminCredentialsSpec{Lifetime: &metav1.Duration{Duration: 8 * time.Hour}, KubeconfigSecret: v1alpha1.AdminKubeconfigSecretDisabled}
	after, err := p.deploymentInputs()
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("spec.adminCredentials changes the tenant's inputs hash from %s to %s", before, after)
	}
	cfg.Spec.Profiling = ptr.To(true)
	if changed, _ := p.deploymentInputs(); changed == before {
		t.Error("the inputs hash does not follow the spec at all")
	}
	data, err := json.Marshal(v1alpha1.ApiServerConfigSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "adminCredentials") {
		t.Errorf("a spec without adminCredentials writes it: %s", data)
	}
}
