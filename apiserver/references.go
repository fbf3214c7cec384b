package apiserver

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// Kinds of the objects a spec may reference.
const (
	KindSecret    = "Secret"
	KindConfigMap = "ConfigMap"
)

// Reference is an object of the user's, in the ApiServerConfig's namespace,
// that a spec names: the operator reads it or mounts it into the pods, so
// it must exist with its keys before the apiservers can start.
type Reference struct {
	// Kind is KindSecret or KindConfigMap.
	Kind string
	Name string
	// Keys must be present and not empty.
	Keys []string
	// Field is the spec field that names the object, for messages.
	Field string
	// PEM says that Keys hold PEM certificates (an issuer's CA): the
	// operator checks that they parse before it writes them anywhere.
	PEM bool
	// Kubeconfig says that Keys hold a webhook's kubeconfig, which the
	// operator checks with CheckWebhookKubeconfig before the pods mount
	// it.
	Kubeconfig bool
}

// Key names the reference's first key in its object, "Kind/name/key":
// how the data read from it is found again (Environment.IssuerCAs).
func (r Reference) Key() string { return r.Kind + "/" + r.Name + "/" + r.Keys[0] }

// IssuerCARefs are the objects that hold the CAs of the spec's JWT
// issuers: spec.authentication.oidc's, then each of jwt's.
func IssuerCARefs(spec *v1alpha1.ApiServerConfigSpec) []Reference {
	var refs []Reference
	if o := spec.Authentication.OIDC; o != nil && o.CAConfigMapName != "" {
		refs = append(refs, Reference{Kind: KindConfigMap, Name: o.CAConfigMapName, Field: "spec.authentication.oidc.caConfigMapName", Keys: []string{"ca.crt"}, PEM: true})
	}
	for i, j := range spec.Authentication.JWT {
		if ref, ok := jwtCARef(j, i); ok {
			refs = append(refs, ref)
		}
	}
	return refs
}

// jwtCARef is the object that holds the CA of jwt[i]'s issuer, when it
// names one.
func jwtCARef(j v1alpha1.JWTAuthenticator, i int) (Reference, bool) {
	r := j.Issuer.CertificateAuthorityRef
	if r == nil {
		return Reference{}, false
	}
	ref := Reference{Kind: KindConfigMap, Name: r.ConfigMapName, Keys: []string{orDefault(r.Key, "ca.crt")}, PEM: true,
		Field: fmt.Sprintf("spec.authentication.jwt[%d].issuer.certificateAuthorityRef", i)}
	if r.SecretName != "" {
		ref.Kind, ref.Name = KindSecret, r.SecretName
	}
	return ref, true
}

// References are the objects spec names, in a fixed order.
func References(spec *v1alpha1.ApiServerConfigSpec) []Reference {
	var refs []Reference
	if t := spec.Etcd.TLS; t != nil {
		refs = append(refs, Reference{Kind: KindSecret, Name: t.SecretName, Field: "spec.etcd.tls.secretName",
			Keys: dedupe(orDefault(t.CAKey, "ca.crt"), orDefault(t.CertKey, "tls.crt"), orDefault(t.KeyKey, "tls.key"))})
	}
	if name := spec.Certificates.CASecretName; name != "" {
		refs = append(refs, Reference{Kind: KindSecret, Name: name, Field: "spec.certificates.caSecretName", Keys: []string{"tls.crt", "tls.key"}})
	}
	refs = append(refs, IssuerCARefs(spec)...)
	if w := spec.Authorization.Webhook; w != nil {
		refs = append(refs, Reference{Kind: KindSecret, Name: w.KubeconfigSecretName, Field: "spec.authorization.webhook.kubeconfigSecretName", Keys: []string{"kubeconfig"}, Kubeconfig: true})
	}
	for i, a := range spec.Authorization.Authorizers {
		if w := a.Webhook; w != nil {
			refs = append(refs, Reference{Kind: KindSecret, Name: w.KubeconfigSecretName, Field: fmt.Sprintf("spec.authorization.authorizers[%d].webhook.kubeconfigSecretName", i),
				Keys: []string{"kubeconfig"}, Kubeconfig: true})
		}
	}
	if name := spec.Audit.PolicyConfigMapName; name != "" {
		refs = append(refs, Reference{Kind: KindConfigMap, Name: name, Field: "spec.audit.policyConfigMapName", Keys: []string{"policy.yaml"}})
	}
	if w := spec.Audit.Webhook; w != nil {
		refs = append(refs, Reference{Kind: KindSecret, Name: w.KubeconfigSecretName, Field: "spec.audit.webhook.kubeconfigSecretName", Keys: []string{"kubeconfig"}, Kubeconfig: true})
	}
	if e := spec.Encryption; e != nil && e.ConfigSecretName != "" {
		refs = append(refs, Reference{Kind: KindSecret, Name: e.ConfigSecretName, Field: "spec.encryption.configSecretName", Keys: []string{EncryptionConfigKey}})
	}
	return refs
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func dedupe(keys ...string) []string {
	var out []string
	for _, k := range keys {
		seen := false
		for _, o := range out {
			seen = seen || o == k
		}
		if !seen {
			out = append(out, k)
		}
	}
	return out
}

// CheckWebhookKubeconfig refuses a webhook kubeconfig that would make
// kube-apiserver do more than call a server with the credentials written
// in it: a command to run (exec), an auth-provider plugin, or a file to
// read. kube-apiserver reads files in its own pod, where the tenant's
// keys are: a tokenFile naming the ServiceAccount signing key would send
// it to the webhook as a bearer token. Certificates, keys and tokens must
// be inline (certificate-authority-data, client-certificate-data,
// client-key-data, token).
func CheckWebhookKubeconfig(data []byte) error {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return fmt.Errorf("it is not a kubeconfig: %w", err)
	}
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(cfg.Clusters)) {
		if c := cfg.Clusters[name]; c.CertificateAuthority != "" {
			problems = append(problems, fmt.Sprintf("cluster %q reads certificate-authority from a file: use certificate-authority-data", name))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.AuthInfos)) {
		u := cfg.AuthInfos[name]
		for _, f := range []struct {
			set            bool
			field, instead string
		}{
			{u.ClientCertificate != "", "client-certificate", "client-certificate-data"},
			{u.ClientKey != "", "client-key", "client-key-data"},
			{u.TokenFile != "", "tokenFile", "token"},
		} {
			if f.set {
				problems = append(problems, fmt.Sprintf("user %q reads %s from a file: use %s", name, f.field, f.instead))
			}
		}
		if u.Exec != nil {
			problems = append(problems, fmt.Sprintf("user %q runs a command (exec): give a token or a client certificate inline", name))
		}
		if u.AuthProvider != nil {
			problems = append(problems, fmt.Sprintf("user %q uses the auth-provider plugin %q: give a token or a client certificate inline", name, u.AuthProvider.Name))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("kube-apiserver would read files of its pod or run commands for it, which tenants may not make it do: %s", strings.Join(problems, "; "))
	}
	// What kube-apiserver loads: the current context's cluster and user.
	rc, err := clientcmd.NewNonInteractiveClientConfig(*cfg, cfg.CurrentContext, nil, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("kube-apiserver could not load it: %w: set current-context to a context whose cluster has the webhook's server", err)
	}
	if u, err := url.Parse(rc.Host); err != nil || u.Scheme != "https" {
		return fmt.Errorf("the server %q of its current context is not an https:// URL: the apiservers would send their credentials in the clear", rc.Host)
	}
	return nil
}
