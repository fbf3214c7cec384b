package apiserver

import (
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// DefaultImageRepository is where the operator's bundled kube-apiserver
// image is found unless spec.image or the operator's configuration says
// otherwise; its tag is the version.
const DefaultImageRepository = "localhost/apiserver-operator/kube-apiserver"

// EtcdDialerVersion tags the etcd dialer sidecar's image: etcddialer.Version,
// which moves only when the dialer's code does (a test of the dialer holds
// the two equal), so that upgrading the operator rolls no tenant for an
// unchanged sidecar. It is repeated here so that rendering does not import
// the dialer, a network daemon.
const EtcdDialerVersion = "v4"

// DefaultEtcdDialerImage is the etcd dialer sidecar's image
// (apiserver/etcddialer). The operator's --etcd-dialer-image overrides it.
const DefaultEtcdDialerImage = "localhost/apiserver-operator/etcd-dialer:" + EtcdDialerVersion

// EtcdDialerCommand is the dialer's executable in its image.
const EtcdDialerCommand = "/etcd-dialer"

// Labels and annotations the operator puts on what it creates.
const (
	// NameLabel carries the name of the ApiServerConfig on every object and
	// pod of it.
	NameLabel = "controlplane.apiserver-operator.dev/name"
	// ConfigHashAnnotation on the pod template changes when anything that
	// kube-apiserver reads only at start changes, which rolls the pods.
	ConfigHashAnnotation = "controlplane.apiserver-operator.dev/config-hash"
	// VersionAnnotation on the pod template names the kube-apiserver
	// version its pods run, which an image (spec.image) does not always
	// tell: status counts the apiservers of each version from it.
	VersionAnnotation = "controlplane.apiserver-operator.dev/kube-apiserver-version"
	// FieldOwner is the server-side apply field manager of every object
	// the operator applies.
	FieldOwner = "apiserver-operator"
)

// nonRootUID runs kube-apiserver: it listens on a high port and needs no
// privilege, which lets its pods pass the restricted Pod Security level.
const nonRootUID = 65532

// Names of the objects of an ApiServerConfig.
func CASecretName(name string) string               { return name + "-ca" }
func ServingSecretName(name string) string          { return name + "-apiserver-serving" }
func KubeletClientSecretName(name string) string    { return name + "-apiserver-kubelet-client" }
func FrontProxyCASecretName(name string) string     { return name + "-front-proxy-ca" }
func FrontProxyClientSecretName(name string) string { return name + "-front-proxy-client" }
func ServiceAccountSecretName(name string) string   { return name + "-sa" }
func AdminKubeconfigSecretName(name string) string  { return name + "-admin-kubeconfig" }
func EncryptionSecretName(name string) string       { return name + "-encryption" }
func ConfigMapName(name string) string              { return name + "-apiserver-config" }
func DeploymentName(name string) string             { return name + "-apiserver" }
func EtcdUserSecretName(name string) string         { return name + "-etcd-user" }
func AuthorizationSecretName(name string) string    { return name + "-authorization" }

// Owned is an object the operator creates for an ApiServerConfig.
type Owned struct {
	// Kind is Secret, ConfigMap, Service, Deployment,
	// PodDisruptionBudget or NetworkPolicy.
	Kind string
	Name string
	// Retainable objects outlive the ApiServerConfig with deletionPolicy
	// Retain: the CAs, the service-account key and the encryption key,
	// without which a tenant created again could not trust or verify what
	// the old one issued, nor read what it stored.
	Retainable bool
}

// OwnedObjects are every object the operator may create for the
// ApiServerConfig name, the workload first (the order deletion follows).
func OwnedObjects(name string) []Owned {
	out := []Owned{
		{Kind: "PodDisruptionBudget", Name: DeploymentName(name)},
		{Kind: "NetworkPolicy", Name: NetworkPolicyName(name)},
		{Kind: "Deployment", Name: DeploymentName(name)},
		{Kind: "Service", Name: ServiceName(name)},
		// Only with spec.konnectivity: the Service the agents dial.
		{Kind: "Service", Name: KonnectivityServiceName(name)},
		{Kind: KindConfigMap, Name: ConfigMapName(name)},
		{Kind: KindConfigMap, Name: KonnectivityAgentConfigMapName(name)},
	}
	for _, s := range OwnedSecrets(name) {
		out = append(out, Owned{Kind: KindSecret, Name: s.Name, Retainable: s.Retainable})
	}
	return out
}

// Object is a Kubernetes object of a kind the operator writes (what
// controller-runtime's client.Object is).
type Object interface {
	metav1.Object
	runtime.Object
}

// ownedKinds make an empty object of each kind of OwnedObjects.
var ownedKinds = map[string]func() Object{
	"PodDisruptionBudget": func() Object { return &policyv1.PodDisruptionBudget{} },
	"NetworkPolicy":       func() Object { return &networkingv1.NetworkPolicy{} },
	"Deployment":          func() Object { return &appsv1.Deployment{} },
	"Service":             func() Object { return &corev1.Service{} },
	KindConfigMap:         func() Object { return &corev1.ConfigMap{} },
	KindSecret:            func() Object { return &corev1.Secret{} },
}

// NewOwned is an empty object of kind, one of OwnedObjects' kinds; nil for
// another kind.
func NewOwned(kind string) Object {
	if f := ownedKinds[kind]; f != nil {
		return f()
	}
	return nil
}

// OwnedKinds are an empty object of each kind of OwnedObjects, sorted by
// kind: what the operator's cache holds and its controller owns.
func OwnedKinds() []Object {
	var out []Object
	for _, k := range slices.Sorted(maps.Keys(ownedKinds)) {
		out = append(out, ownedKinds[k]())
	}
	return out
}

// OwnedSecret is a Secret the operator writes.
type OwnedSecret struct {
	Name string
	// Keys are the keys it always holds (a rotation adds more while it
	// lasts).
	Keys []string
	// Retainable: see Owned.
	Retainable bool
}

// OwnedSecrets are the Secrets the operator may write for the
// ApiServerConfig name, those Retain keeps last: desiredPKISecrets and
// desiredEncryptionSecret write them, the pods mount them
// (MountedObjects), deletion and render follow this list.
func OwnedSecrets(name string) []OwnedSecret {
	tls := []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey}
	ca := []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey, CABundleKey}
	return []OwnedSecret{
		{Name: ServingSecretName(name), Keys: tls},
		{Name: KubeletClientSecretName(name), Keys: tls},
		{Name: FrontProxyClientSecretName(name), Keys: tls},
		{Name: AdminKubeconfigSecretName(name), Keys: []string{KubeconfigKey}},
		// Only for a tenant of a datastore (Completed.EtcdUser).
		{Name: EtcdUserSecretName(name), Keys: ca},
		// Only with spec.konnectivity.
		{Name: KonnectivityServerSecretName(name), Keys: tls},
		{Name: KonnectivityClientSecretName(name), Keys: ca},
		{Name: KonnectivityAPIServerSecretName(name), Keys: tls},
		{Name: KonnectivityCASecretName(name), Keys: tls},
		// Only with spec.authorization.authorizers.
		{Name: AuthorizationSecretName(name), Keys: []string{AuthorizationConfigKey}},
		{Name: EncryptionSecretName(name), Keys: []string{EncryptionConfigKey, EncryptionKeysKey}, Retainable: true},
		{Name: CASecretName(name), Keys: ca, Retainable: true},
		{Name: FrontProxyCASecretName(name), Keys: ca, Retainable: true},
		{Name: ServiceAccountSecretName(name), Keys: []string{ServiceAccountPrivateKeyKey, ServiceAccountPublicKeysKey}, Retainable: true},
	}
}

// Retainable reports whether the Secret secret of the ApiServerConfig name
// outlives it with deletionPolicy Retain.
func Retainable(name, secret string) bool {
	for _, o := range OwnedObjects(name) {
		if o.Kind == KindSecret && o.Name == secret {
			return o.Retainable
		}
	}
	return false
}

// Keys in the Secrets and ConfigMaps the operator writes.
const (
	// CABundleKey holds the CAs clients trust: the current one, and the old
	// one during a rotation.
	CABundleKey = "ca-bundle.crt"
	// ServiceAccountPrivateKeyKey and ServiceAccountPublicKeysKey are the
	// keys of the service-account Secret.
	ServiceAccountPrivateKeyKey = "sa.key"
	ServiceAccountPublicKeysKey = "sa.pub"
	// KubeconfigKey holds a kubeconfig (Cluster API's convention).
	KubeconfigKey = "value"
	// EncryptionConfigKey holds the EncryptionConfiguration.
	EncryptionConfigKey = "encryption-config.yaml"
	// AuthenticationConfigKey, AuditPolicyKey, AdmissionConfigKey and
	// EgressSelectorConfigKey are the files of the operator's ConfigMap.
	AuthenticationConfigKey = "authentication-config.yaml"
	// AuthorizationConfigKey is the AuthorizationConfiguration in the
	// authorization Secret.
	AuthorizationConfigKey  = "authorization-config.yaml"
	AuditPolicyKey          = "audit-policy.yaml"
	AdmissionConfigKey      = "admission-config.yaml"
	EgressSelectorConfigKey = "egress-selector.yaml"
)

// SelectorLabels select the apiserver pods of an ApiServerConfig.
func SelectorLabels(name string) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":     "kube-apiserver",
		"app.kubernetes.io/instance": name,
		NameLabel:                    name,
	}
}

// Selector is SelectorLabels as a string, for status.selector (the scale
// subresource).
func Selector(name string) string {
	return labels.SelectorFromSet(SelectorLabels(name)).String()
}

// objectLabels are on every object of an ApiServerConfig.
func objectLabels(c *Completed) map[string]string {
	l := SelectorLabels(c.Name)
	l["app.kubernetes.io/managed-by"] = FieldOwner
	l["app.kubernetes.io/component"] = "control-plane"
	l["app.kubernetes.io/version"] = c.Spec.Version
	if c.WatchFilter != "" {
		l[WatchFilterLabel] = c.WatchFilter
	}
	return l
}

// objectMeta names the object name of c. Its owner is c's ApiServerConfig
// (deleting it deletes the object), except for what deletionPolicy Retain
// keeps (see Retainable).
func objectMeta(c *Completed, name string) metav1.ObjectMeta {
	m := metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: objectLabels(c)}
	if c.UID != "" && (DeletionPolicyOf(&c.Spec) != v1alpha1.DeletionPolicyRetain || !Retainable(c.Name, name)) {
		m.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: v1alpha1.GroupVersion.String(), Kind: "ApiServerConfig", Name: c.Name, UID: c.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
		}}
	}
	return m
}

// DesiredService is the Service in front of the apiservers.
func DesiredService(c *Completed) *corev1.Service {
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: objectMeta(c, c.ServiceName),
		Spec: corev1.ServiceSpec{
			Type:     c.Spec.Serving.Service.Type,
			Selector: SelectorLabels(c.Name),
			Ports: []corev1.ServicePort{{
				Name:       "https",
				Protocol:   corev1.ProtocolTCP,
				Port:       c.Spec.Serving.Service.Port,
				TargetPort: intstr.FromString("https"),
			}},
		},
	}
	if n := c.Spec.Serving.Service.NodePort; n != nil {
		svc.Spec.Ports[0].NodePort = *n
	}
	if a := c.Spec.Serving.Service.Annotations; len(a) > 0 {
		svc.Annotations = a
	}
	return svc
}

// desiredPodDisruptionBudget keeps all but one apiserver up during voluntary
// disruptions (node drains). With one replica or none it returns nil: a
// budget would then block every drain, so the controller deletes it.
func desiredPodDisruptionBudget(c *Completed) *policyv1.PodDisruptionBudget {
	if *c.Spec.MasterCount <= 1 {
		return nil
	}
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: objectMeta(c, DeploymentName(c.Name)),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: SelectorLabels(c.Name)},
		},
	}
}

// desiredConfigMap holds the files the operator renders without secrets:
// the authentication configuration, the egress selector configuration
// and, unless the user gave one, the audit policy.
func desiredConfigMap(c *Completed, issuerCAs map[string][]byte) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: objectMeta(c, ConfigMapName(c.Name)),
		Data:       map[string]string{},
	}
	if usesAuthenticationConfig(c) {
		authn, err := AuthenticationConfig(c, issuerCAs)
		if err != nil {
			return nil, err
		}
		cm.Data[AuthenticationConfigKey] = string(authn)
	}
	if c.Spec.Audit.PolicyConfigMapName == "" {
		policy, err := DefaultAuditPolicy()
		if err != nil {
			return nil, err
		}
		cm.Data[AuditPolicyKey] = string(policy)
	}
	if usesAdmissionConfig(c) {
		admission, err := AdmissionConfig(c)
		if err != nil {
			return nil, err
		}
		cm.Data[AdmissionConfigKey] = string(admission)
	}
	egress, err := EgressSelectorConfig(c)
	if err != nil {
		return nil, err
	}
	cm.Data[EgressSelectorConfigKey] = string(egress)
	if usesKonnectivity(c) {
		kubeconfig, err := konnectivityServerKubeconfig(c)
		if err != nil {
			return nil, err
		}
		cm.Data[KonnectivityServerKubeconfigKey] = string(kubeconfig)
	}
	return cm, nil
}
