package apiserver

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
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
const EtcdDialerVersion = "v1"

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

// Owned is an object the operator creates for an ApiServerConfig.
type Owned struct {
	// Kind is Secret, ConfigMap, Service, Deployment or
	// PodDisruptionBudget.
	Kind string
	Name string
	// Retainable objects outlive the ApiServerConfig with pkiRetention
	// Retain: the CAs and the service-account key, without which a tenant
	// created again could not trust or verify what the old one issued.
	Retainable bool
}

// OwnedObjects are every object the operator may create for the
// ApiServerConfig name, the workload first (the order deletion follows).
func OwnedObjects(name string) []Owned {
	out := []Owned{
		{Kind: "PodDisruptionBudget", Name: DeploymentName(name)},
		{Kind: "Deployment", Name: DeploymentName(name)},
		{Kind: "Service", Name: ServiceName(name)},
		{Kind: KindConfigMap, Name: ConfigMapName(name)},
	}
	for _, s := range OwnedSecrets(name) {
		out = append(out, Owned{Kind: KindSecret, Name: s.Name, Retainable: s.Retainable})
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
		{Name: EncryptionSecretName(name), Keys: []string{EncryptionConfigKey, EncryptionKeysKey}, Retainable: true},
		{Name: CASecretName(name), Keys: ca, Retainable: true},
		{Name: FrontProxyCASecretName(name), Keys: ca, Retainable: true},
		{Name: ServiceAccountSecretName(name), Keys: []string{ServiceAccountPrivateKeyKey, ServiceAccountPublicKeysKey}, Retainable: true},
	}
}

// Retainable reports whether the Secret secret of the ApiServerConfig name
// outlives it with pkiRetention Retain.
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
// (deleting it deletes the object), except for what pkiRetention Retain
// keeps (see Retainable).
func objectMeta(c *Completed, name string) metav1.ObjectMeta {
	m := metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: objectLabels(c)}
	if c.UID != "" && (c.Spec.Certificates.PKIRetention != "Retain" || !Retainable(c.Name, name)) {
		m.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: v1alpha1.GroupVersion.String(), Kind: "ApiServerConfig", Name: c.Name, UID: c.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
		}}
	}
	return m
}

// Image is the container image of kube-apiserver: spec.image, or the
// bundled image of spec.version from repository (DefaultImageRepository
// when empty).
func Image(c *Completed, repository string) string {
	if c.Spec.Image != "" {
		return c.Spec.Image
	}
	if repository == "" {
		repository = DefaultImageRepository
	}
	return repository + ":" + c.Spec.Version
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
func desiredConfigMap(c *Completed, oidcCA []byte) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: objectMeta(c, ConfigMapName(c.Name)),
		Data:       map[string]string{},
	}
	if usesAuthenticationConfig(c) {
		authn, err := AuthenticationConfig(c, oidcCA)
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
	egress, err := EgressSelectorConfig()
	if err != nil {
		return nil, err
	}
	cm.Data[EgressSelectorConfigKey] = string(egress)
	return cm, nil
}

// ConfigHash summarizes what kube-apiserver reads only when it starts: its
// command line and the content of the files it does not re-read (see
// MountedFile.HotReloaded), keyed by their path in the container. A change
// of it rolls the pods; a renewed serving certificate or a CA bundle that
// gains a CA restarts nothing.
func ConfigHash(c *Completed, args []string, files map[string][]byte) string {
	h := sha256.New()
	// Writes to a hash.Hash never fail.
	for _, a := range args {
		_, _ = fmt.Fprintf(h, "arg %d %s\n", len(a), a)
	}
	hashed := restartFiles(c)
	// The etcd client files count, empty, even without etcd TLS: hashes
	// stay those of earlier releases, so that upgrading the operator
	// rolls no tenant.
	for _, f := range []string{EtcdCAFile, EtcdCertFile, EtcdKeyFile} {
		hashed[f] = true
	}
	names := slices.Sorted(maps.Keys(hashed))
	for _, name := range names {
		_, _ = fmt.Fprintf(h, "file %s %d\n", name, len(files[name]))
		h.Write(files[name])
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// DeploymentInputs are what the Deployment depends on besides the spec.
type DeploymentInputs struct {
	// Objects has the data of every object the pods mount (MountedObjects):
	// the pod template's ConfigHash is computed from it.
	Objects ObjectData
	// ImageRepository overrides DefaultImageRepository (operator setting).
	ImageRepository string
	// EtcdDialerImage overrides DefaultEtcdDialerImage (operator setting).
	EtcdDialerImage string
}

// desiredDeployment runs masterCount kube-apiservers with args. It rolls
// one pod at a time and only after the new one is ready (maxUnavailable 0),
// so scaling and rotations never leave the Service without a ready
// apiserver.
func desiredDeployment(c *Completed, args []string, in DeploymentInputs) (*appsv1.Deployment, error) {
	if in.Objects == nil {
		return nil, fmt.Errorf("building the Deployment of %s/%s: the content of its files is not given", c.Namespace, c.Name)
	}
	configHash := ConfigHash(c, args, PodFiles(c, in.Objects))
	port := c.Spec.Serving.SecurePort
	probe := func(path string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: path, Port: intstr.FromString("https"), Scheme: corev1.URISchemeHTTPS,
			}},
			PeriodSeconds:    period,
			TimeoutSeconds:   5,
			FailureThreshold: failures,
		}
	}
	env := []corev1.EnvVar{{
		Name:      PodIPEnv,
		ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}},
	}}
	if b := c.Sizing.GoMemLimitBytes; b > 0 {
		env = append(env, corev1.EnvVar{Name: "GOMEMLIMIT", Value: strconv.FormatInt(b, 10)})
	}
	volumes, mounts := podVolumes(c)
	livez, readyz := ProbePaths(c)

	container := corev1.Container{
		Name:            "kube-apiserver",
		Image:           Image(c, in.ImageRepository),
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"kube-apiserver"},
		Args:            args,
		Env:             env,
		Ports:           []corev1.ContainerPort{{Name: "https", ContainerPort: port, Protocol: corev1.ProtocolTCP}},
		// Up to 5 minutes to become ready (a large etcd), probed every
		// second. The startup probe asks for readiness, not liveness as
		// kubeadm's does: kubelet runs the readiness probe the moment the
		// startup probe passes, so the new apiserver joins the Service at
		// once instead of up to a period later. Readiness is probed every
		// second, as kubeadm does. Then restarted after 6 failed liveness
		// probes, 10 s apart; out of the Service after 3 failed readiness
		// probes (3 s when /readyz answers an error, up to 15 s when it
		// hangs until the 5 s timeout). What each probe leaves out of
		// kube-apiserver's checks: see ProbePaths.
		StartupProbe:   probe(readyz, 1, 300),
		LivenessProbe:  probe(livez, 10, 6),
		ReadinessProbe: probe(readyz, 1, 3),
		Resources:      c.Spec.Resources,
		VolumeMounts:   mounts,
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			RunAsNonRoot:             ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}

	// The etcd dialer, a native sidecar: it starts before kube-apiserver
	// and stops after it, so that kube-apiserver reaches etcd from its
	// first request to the end of its graceful shutdown.
	dialer := corev1.Container{
		Name:            "etcd-dialer",
		Image:           cmp.Or(in.EtcdDialerImage, DefaultEtcdDialerImage),
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{EtcdDialerCommand},
		Args:            []string{"--socket=" + EtcdDialerSocket, "--allow=" + strings.Join(c.Etcd.Addresses, ",")},
		RestartPolicy:   ptr.To(corev1.ContainerRestartPolicyAlways),
		// It relays etcd's bytes (spliced by the kernel) and holds idle
		// connections during an outage: little of either. No memory
		// limit: its pipes and socket buffers grow with kube-apiserver's
		// etcd traffic (a client per resource, large lists), and an OOM
		// kill would cut every etcd connection of the pod at once.
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
		},
		VolumeMounts:             []corev1.VolumeMount{{Name: etcdDialerVolume, MountPath: EtcdDialerDir}},
		SecurityContext:          container.SecurityContext.DeepCopy(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}

	podLabels := SelectorLabels(c.Name)
	spread := c.Spec.TopologySpreadConstraints
	if len(spread) == 0 {
		// One apiserver per node where the nodes allow it, so a node
		// failure takes down one replica at most; ScheduleAnyway keeps a
		// one-node cluster schedulable.
		spread = []corev1.TopologySpreadConstraint{{
			MaxSkew:           1,
			TopologyKey:       corev1.LabelHostname,
			WhenUnsatisfiable: corev1.ScheduleAnyway,
			LabelSelector:     &metav1.LabelSelector{MatchLabels: SelectorLabels(c.Name)},
		}}
	}
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: objectMeta(c, DeploymentName(c.Name)),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(*c.Spec.MasterCount),
			Selector: &metav1.LabelSelector{MatchLabels: SelectorLabels(c.Name)},
			Strategy: appsv1.DeploymentStrategy{
				Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{
					MaxUnavailable: ptr.To(intstr.FromInt32(0)),
					MaxSurge:       ptr.To(intstr.FromInt32(1)),
				},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels: podLabels,
					Annotations: map[string]string{
						ConfigHashAnnotation: configHash,
						VersionAnnotation:    c.Spec.Version,
						// kubectl logs and exec pick kube-apiserver, not the sidecar.
						"kubectl.kubernetes.io/default-container": container.Name,
					},
				},
				Spec: corev1.PodSpec{
					InitContainers: []corev1.Container{dialer},
					Containers:     []corev1.Container{container},
					Volumes:        volumes,
					// kube-apiserver needs no credentials of the management
					// cluster.
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						RunAsUser:      ptr.To[int64](nonRootUID),
						RunAsGroup:     ptr.To[int64](nonRootUID),
						FSGroup:        ptr.To[int64](nonRootUID),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					// kube-apiserver drains in-flight requests and waits for
					// endpoints to drop it (--shutdown-delay-duration) before
					// exiting.
					TerminationGracePeriodSeconds: ptr.To[int64](60),
					NodeSelector:                  c.Spec.NodeSelector,
					Tolerations:                   c.Spec.Tolerations,
					Affinity:                      c.Spec.Affinity,
					TopologySpreadConstraints:     spread,
					PriorityClassName:             c.Spec.PriorityClassName,
				},
			},
		},
	}
	return d, nil
}

// ProbePaths are the paths kubelet probes, chosen for what a restart or a
// removal from the Service can fix:
//
//   - liveness leaves out every etcd check (the "etcd" group: the main etcd
//     and each etcd-override-N). A restart cannot bring etcd back; it only
//     adds a cold start, and at scale a herd of apiservers re-listing
//     everything when etcd returns. HyperShift's probe does the same.
//   - readiness (and startup) follow the main etcd but leave out the
//     override etcds' checks (etcd-override-N and
//     etcd-override-readiness-N): an apiserver whose events etcd is down
//     still serves everything else, and requests for the override's
//     resources fail on their own. An apiserver that cannot reach its main
//     etcd serves almost nothing and leaves the Service, so that, when only
//     some apiservers lost etcd, clients are sent to the others.
//
// kube-apiserver installs one pair of override checks per distinct set of
// override servers (k8s.io/apiserver's EtcdOptions.addEtcdHealthEndpoint);
// excluding a check it does not have is harmless.
func ProbePaths(c *Completed) (livez, readyz string) {
	sets := len(c.Etcd.OverrideSets)
	overrides := url.Values{}
	for i := range sets {
		overrides.Add("exclude", fmt.Sprintf("etcd-override-%d", i))
		overrides.Add("exclude", fmt.Sprintf("etcd-override-readiness-%d", i))
	}
	readyz = "/readyz"
	if len(overrides) > 0 {
		readyz += "?" + overrides.Encode()
	}
	// The group holds them all; the override checks are named too, in case
	// a version installs them outside it.
	live := url.Values{"exclude": {"etcd"}}
	for i := range sets {
		live.Add("exclude", fmt.Sprintf("etcd-override-%d", i))
	}
	return "/livez?" + live.Encode(), readyz
}
