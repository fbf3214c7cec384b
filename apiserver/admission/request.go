package admission

import (
	"crypto/rand"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
	"github.com/apiserver-operator/apiserver-operator/apiserver/validatorpool"
)

// DefaultPodIP stands for the address a tenant's pod advertises when the
// operator does not know the pod network's family: IPv4, the common case.
const DefaultPodIP = "10.0.0.10"

// throwaway is key material that stands for a tenant's own in a
// validation request: what kube-apiserver accepts does not depend on which
// keys it is given, only on their being well formed.
type throwaway struct {
	pki        apiserver.PKISecrets
	etcd       map[string][]byte
	encryption apiserver.EncryptionKey
	authzHook  []byte
	auditHook  []byte
	oidcCA     []byte
}

var throwaways sync.Map // v1alpha1.KeyAlgorithm -> func() (*throwaway, error)

func throwawayFor(alg v1alpha1.KeyAlgorithm) (*throwaway, error) {
	f, _ := throwaways.LoadOrStore(alg, sync.OnceValues(func() (*throwaway, error) { return newThrowaway(alg) }))
	return f.(func() (*throwaway, error))()
}

func newThrowaway(alg v1alpha1.KeyAlgorithm) (*throwaway, error) {
	now := time.Now()
	const validity = 10 * 365 * 24 * time.Hour
	ca, err := pki.NewSelfSignedCA("validation-ca", alg, validity, now)
	if err != nil {
		return nil, err
	}
	issue := func(cfg pki.CertConfig) (*pki.KeyPair, error) {
		return pki.NewSignedCert(ca, cfg, alg, validity, now)
	}
	serving, err := issue(pki.ServingCertConfig([]string{"kubernetes"}, nil))
	if err != nil {
		return nil, err
	}
	kubelet, err := issue(pki.KubeletClientCertConfig())
	if err != nil {
		return nil, err
	}
	frontProxy, err := issue(pki.FrontProxyClientCertConfig())
	if err != nil {
		return nil, err
	}
	etcdClient, err := issue(pki.EtcdClientCertConfig())
	if err != nil {
		return nil, err
	}
	etcdKey, err := etcdClient.KeyPEM()
	if err != nil {
		return nil, err
	}
	sa, err := pki.NewServiceAccountKey(alg)
	if err != nil {
		return nil, err
	}
	saPrivate, err := sa.PrivateKeyPEM()
	if err != nil {
		return nil, err
	}
	saPublic, err := pki.PublicKeysPEM(sa.Public())
	if err != nil {
		return nil, err
	}
	bundle := pki.TrustBundle(now, ca.Cert())
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	authzHook, err := webhookKubeconfig("https://authorization-webhook.invalid", bundle)
	if err != nil {
		return nil, err
	}
	auditHook, err := webhookKubeconfig("https://audit-webhook.invalid", bundle)
	if err != nil {
		return nil, err
	}
	return &throwaway{
		pki: apiserver.PKISecrets{
			CA: ca, CABundle: bundle, Serving: serving, KubeletClient: kubelet,
			FrontProxyCA: ca, FrontProxyCABundle: bundle, FrontProxyClient: frontProxy,
			ServiceAccountSigningKey: saPrivate, ServiceAccountPublicKeys: saPublic,
			AdminKubeconfig: []byte("unused"),
			EtcdClient:      etcdClient, EtcdCA: bundle,
			// The konnectivity server's files are not kube-apiserver's:
			// any client certificate of the CA stands in. kube-apiserver
			// loads its certificate for the agents' name
			// (--tls-sni-cert-key) as any key pair: the serving
			// certificate stands in.
			KonnectivityCA: ca, KonnectivityServing: serving, KonnectivityClient: kubelet, KonnectivityAPIServer: serving,
		},
		etcd:       map[string][]byte{"ca": bundle, "cert": etcdClient.CertPEM(), "key": etcdKey},
		encryption: apiserver.EncryptionKey{Name: "validation", Provider: v1alpha1.EncryptionSecretbox, Secret: secret},
		authzHook:  authzHook,
		auditHook:  auditHook,
		oidcCA:     bundle,
	}, nil
}

// webhookKubeconfig is a kubeconfig that reaches a webhook at server,
// whose serving certificate ca signed: the shape of a user's.
func webhookKubeconfig(server string, ca []byte) ([]byte, error) {
	hook := clientcmdapi.NewConfig()
	hook.Clusters["webhook"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	hook.AuthInfos["apiserver"] = &clientcmdapi.AuthInfo{}
	hook.Contexts["webhook"] = &clientcmdapi.Context{Cluster: "webhook", AuthInfo: "apiserver"}
	hook.CurrentContext = "webhook"
	return clientcmd.Write(*hook)
}

// standIn is well-formed content for a file the pods read from one of the
// user's objects.
func (t *throwaway) standIn(path string) ([]byte, error) {
	switch path {
	case apiserver.EtcdCAFile:
		return t.etcd["ca"], nil
	case apiserver.OIDCCAFile:
		return t.oidcCA, nil
	case apiserver.EtcdCertFile:
		return t.etcd["cert"], nil
	case apiserver.EtcdKeyFile:
		return t.etcd["key"], nil
	case apiserver.AuthorizationWebhookKubeconfigFile:
		return t.authzHook, nil
	case apiserver.AuditWebhookKubeconfigFile:
		// Read at start, when kube-apiserver builds its audit backend;
		// nothing is sent before it serves.
		return t.auditHook, nil
	case apiserver.AuditPolicyFile:
		return apiserver.DefaultAuditPolicy()
	case apiserver.EncryptionConfigFile:
		// The user's own configuration: it is read where the operator
		// reads it.
		return apiserver.EncryptionKeys{Current: apiserver.EncryptionLayout{Key: t.encryption, Resources: apiserver.DefaultEncryptedResources}}.Config()
	default:
		return nil, fmt.Errorf("building the validation request: no stand-in for %s, which the pods read from a user's object", path)
	}
}

// StandIns are key material and an environment that stand for a tenant's
// own where only their shape matters (see throwaway). With the operator's
// encryption, the spec's layout comes with an older one, as a rotation
// renders it next to the one it replaces: the widest configuration the
// pods may get.
func StandIns(c *apiserver.Completed) (apiserver.Material, apiserver.Environment, error) {
	t, err := throwawayFor(c.Spec.Certificates.KeyAlgorithm)
	if err != nil {
		return apiserver.Material{}, apiserver.Environment{}, fmt.Errorf("issuing the stand-in certificates: %w", err)
	}
	m := apiserver.Material{PKI: t.pki}
	if c.EtcdUser == "" {
		m.PKI.EtcdClient, m.PKI.EtcdCA = nil, nil // the user's Secret, stood in for below
	}
	var env apiserver.Environment
	for _, ref := range apiserver.IssuerCARefs(&c.Spec) {
		if env.IssuerCAs == nil {
			env.IssuerCAs = map[string][]byte{}
		}
		env.IssuerCAs[ref.Key()] = t.oidcCA
	}
	// The authorization webhooks' kubeconfigs, which the operator copies
	// into a Secret of its own.
	hooks := map[string]bool{}
	for _, a := range c.Spec.Authorization.Authorizers {
		if a.Webhook != nil {
			hooks[a.Webhook.KubeconfigSecretName] = true
		}
	}
	if len(hooks) > 0 {
		env.Referenced = func(kind, name string) map[string][]byte {
			if kind == apiserver.KindSecret && hooks[name] {
				return map[string][]byte{"kubeconfig": t.authzHook}
			}
			return nil
		}
	}
	if e := c.Spec.Encryption; e != nil && e.Provider != "" {
		provider, resources := apiserver.EncryptionTarget(e)
		key := t.encryption
		if key.Provider = provider; provider == v1alpha1.EncryptionIdentity {
			key = apiserver.IdentityKey
		}
		previous := t.encryption
		previous.Name, previous.Provider = "previous", v1alpha1.EncryptionSecretbox
		m.Encryption = &apiserver.EncryptionMaterial{Keys: apiserver.EncryptionKeys{Current: apiserver.EncryptionLayout{Key: key, Resources: resources}, Old: &apiserver.EncryptionLayout{Key: previous, Resources: resources}}}
	}
	return m, env, nil
}

// ValidationRequest is what c's pods would run, their command line and
// every file they mount, for the validator of c's version, as Desired
// renders them with StandIns. Files that come from the user's own objects
// (the etcd client Secret, an authorization or audit webhook kubeconfig,
// an encryption configuration Secret, an audit policy ConfigMap) are stood in
// for by well-formed ones: their content is checked where the operator
// reads them. podIP is the address the pods advertise, for the family
// checks.
func ValidationRequest(c *apiserver.Completed, podIP string) (validatorpool.Request, error) {
	m, env, err := StandIns(c)
	if err != nil {
		return validatorpool.Request{}, err
	}
	objs, err := apiserver.Desired(c, m, env)
	if err != nil {
		return validatorpool.Request{}, err
	}
	t, err := throwawayFor(c.Spec.Certificates.KeyAlgorithm)
	if err != nil {
		return validatorpool.Request{}, err
	}
	files := objs.PodFiles(c, nil)
	// The user's own objects are stood in for.
	for _, o := range apiserver.MountedObjects(c) {
		if o.Owned {
			continue
		}
		for _, f := range o.Files {
			if files[f.Path], err = t.standIn(f.Path); err != nil {
				return validatorpool.Request{}, err
			}
		}
	}
	for path, data := range files {
		if len(data) == 0 {
			delete(files, path)
		}
	}
	if podIP == "" {
		podIP = DefaultPodIP
	}
	// Each namespace waits for a validator in a queue of its own.
	return validatorpool.Request{Args: objs.Args, Files: files, Env: map[string]string{apiserver.PodIPEnv: podIP}, Queue: c.Namespace}, nil
}
