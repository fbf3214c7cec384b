package apiserver

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/apiserver-operator/apiserver-operator/apiserver/rotation"
)

// Material is the key material of one tenant, as the caller of Desired
// holds it: the controller the tenant's own, after deciding what to keep,
// renew or rotate; admission and render a throwaway one (StandInMaterial).
type Material struct {
	PKI PKISecrets
	// Encryption is the operator's encryption keys and where their
	// rotation stands; nil when the spec leaves encryption to the user's
	// own configuration, or to none.
	Encryption *EncryptionMaterial
}

// EncryptionMaterial is the operator's encryption keys and where their
// rotation stands.
type EncryptionMaterial struct {
	Keys  EncryptionKeys
	State rotation.State
}

// Environment is what a tenant's objects depend on besides its spec and
// its material.
type Environment struct {
	// IssuerCAs are the CAs of the JWT issuers (IssuerCARefs), as read
	// from the objects the spec names, by Reference.Key. The operator
	// writes them into the authentication configuration.
	IssuerCAs map[string][]byte
	// Referenced finds the data of the users' objects the pods mount (the
	// etcd client Secret, an audit policy ConfigMap...): the pod
	// template's ConfigHash covers it. Nil knows none.
	Referenced ObjectData
	// ImageRepository overrides DefaultImageRepository (operator setting).
	ImageRepository string
	// EtcdDialerImage overrides DefaultEtcdDialerImage (operator setting).
	EtcdDialerImage string
	// KonnectivityServerImage overrides DefaultKonnectivityServerImage
	// and KonnectivityAgentImage DefaultKonnectivityAgentImage (operator
	// settings).
	KonnectivityServerImage string
	KonnectivityAgentImage  string
	// Egress are the platform's ranges of the pods' egress filter
	// (operator settings).
	Egress EgressRanges
}

// Objects are everything the operator owns for one tenant, and the
// command line its apiservers run.
type Objects struct {
	// Args is kube-apiserver's command line in the Deployment.
	Args    []string
	Service *corev1.Service
	// ConfigMap holds the files rendered without secrets.
	ConfigMap *corev1.ConfigMap
	// Secrets are the PKI Secrets, then the encryption Secret when the
	// operator manages encryption (Encryption, the same object).
	Secrets    []*corev1.Secret
	Encryption *corev1.Secret
	// Authorization is the Secret of spec.authorization.authorizers'
	// configuration and webhook kubeconfigs (also in Secrets); nil
	// without authorizers: one the operator made is deleted.
	Authorization *corev1.Secret
	Deployment    *appsv1.Deployment
	// PodDisruptionBudget is nil when the tenant has none (one apiserver
	// or none): one that exists is deleted.
	PodDisruptionBudget *policyv1.PodDisruptionBudget
	// NetworkPolicy is nil when the tenant has none (spec.networkPolicy
	// not Enforced): one the operator made is deleted.
	NetworkPolicy *networkingv1.NetworkPolicy
	// KonnectivityService is the Service the konnectivity agents dial;
	// nil without spec.konnectivity: one the operator made is deleted.
	KonnectivityService *corev1.Service
	// KonnectivityAgent publishes the agents' manifests for the tenant;
	// nil without spec.konnectivity: one the operator made is deleted.
	KonnectivityAgent *corev1.ConfigMap
}

// desiredAuthorizationSecret holds the AuthorizationConfiguration of
// spec.authorization.authorizers and the kubeconfigs of its webhooks,
// copied from the users' Secrets that referenced finds: one object, so
// that kubelet updates the configuration and the files it names at once
// (kube-apiserver does not try again a configuration whose kubeconfig
// was missing when it read it).
func desiredAuthorizationSecret(c *Completed, referenced ObjectData) (*corev1.Secret, error) {
	files, err := AuthorizationConfig(c, func(name string) []byte {
		if referenced == nil {
			return nil
		}
		return referenced(KindSecret, name)["kubeconfig"]
	})
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: objectMeta(c, AuthorizationSecretName(c.Name)),
		Type:       corev1.SecretTypeOpaque,
		Data:       files,
	}, nil
}

// data finds the data of the objects the pods mount: the operator's own,
// then the users'.
func (o *Objects) data(referenced ObjectData) ObjectData {
	owned := ObjectsData(o.Secrets, o.ConfigMap)
	return func(kind, name string) map[string][]byte {
		if d := owned(kind, name); d != nil {
			return d
		}
		if referenced == nil {
			return nil
		}
		return referenced(kind, name)
	}
}

// Desired is everything a tenant gets, for its completed spec c, its key
// material m and env: the one place the operator's objects are assembled.
// The controller applies what it returns, admission judges its command
// line and files with the bundled kube-apiserver, render prints it.
func Desired(c *Completed, m Material, env Environment) (*Objects, error) {
	args, err := Args(c)
	if err != nil {
		return nil, err
	}
	o := &Objects{Args: args, Service: DesiredService(c), KonnectivityService: DesiredKonnectivityService(c), PodDisruptionBudget: desiredPodDisruptionBudget(c)}
	o.NetworkPolicy, _ = desiredNetworkPolicy(c)
	if o.ConfigMap, err = desiredConfigMap(c, env.IssuerCAs); err != nil {
		return nil, err
	}
	var konnectivityCA []byte
	if kp := m.PKI.KonnectivityCA; kp != nil {
		konnectivityCA = kp.CertPEM()
	}
	if o.KonnectivityAgent, err = desiredKonnectivityAgentConfigMap(c, konnectivityCA, env.KonnectivityAgentImage); err != nil {
		return nil, err
	}
	if o.Secrets, err = desiredPKISecrets(c, m.PKI); err != nil {
		return nil, err
	}
	if usesAuthorizers(c) {
		if o.Authorization, err = desiredAuthorizationSecret(c, env.Referenced); err != nil {
			return nil, err
		}
		o.Secrets = append(o.Secrets, o.Authorization)
	}
	if e := m.Encryption; e != nil {
		if o.Encryption, err = desiredEncryptionSecret(c, e.Keys, e.State); err != nil {
			return nil, err
		}
		if o.Encryption != nil {
			o.Secrets = append(o.Secrets, o.Encryption)
		}
	}
	o.Deployment, err = desiredDeployment(c, args, DeploymentInputs{
		Objects: o.data(env.Referenced), ImageRepository: env.ImageRepository, EtcdDialerImage: env.EtcdDialerImage,
		KonnectivityServerImage: env.KonnectivityServerImage, Egress: env.Egress})
	if err != nil {
		return nil, err
	}
	return o, nil
}

// PodFiles are the contents of every file the pods read that Desired
// knows: the operator's objects' and those env.Referenced finds.
func (o *Objects) PodFiles(c *Completed, referenced ObjectData) map[string][]byte {
	return PodFiles(c, o.data(referenced))
}

// ApplyForm is obj as the operator server-side applies it: no status (the
// cluster's to write) and no creation timestamps, which would claim
// ownership of fields nobody sets.
func ApplyForm(obj runtime.Object) (*unstructured.Unstructured, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting %T: %w", obj, err)
	}
	delete(u, "status")
	unstructured.RemoveNestedField(u, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u, "spec", "template", "metadata", "creationTimestamp")
	return &unstructured.Unstructured{Object: u}, nil
}
