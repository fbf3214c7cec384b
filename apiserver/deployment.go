package apiserver

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

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

// ConfigHash summarizes what kube-apiserver reads only when it starts: its
// command line and the content of the files it does not re-read (see
// MountedFile.HotReloaded), keyed by their path in the container. A change
// of it rolls the pods; a renewed serving certificate or a CA bundle that
// gains a CA restarts nothing, nor does a change of
// spec.authentication.jwt, which kube-apiserver reloads
// (authenticationStartPart).
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
	if usesAuthorizers(c) {
		_, _ = fmt.Fprintf(h, "authorizers built at start %s\n", strings.Join(authorizersBuiltAtStart(c), ","))
	}
	names := slices.Sorted(maps.Keys(hashed))
	for _, name := range names {
		data := files[name]
		if name == AuthenticationConfigFile {
			data = authenticationStartPart(c, data)
		}
		_, _ = fmt.Fprintf(h, "file %s %d\n", name, len(data))
		h.Write(data)
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
	// KonnectivityServerImage overrides DefaultKonnectivityServerImage
	// (operator setting).
	KonnectivityServerImage string
	// Egress are the platform's ranges of the egress filter (operator
	// setting).
	Egress EgressRanges
}

// EgressRanges are the platform's address ranges for the egress filter of
// every tenant's pods (package etcddialer), besides what it always refuses
// (the pod's node, the pod, the management kube-apiserver's Service, the
// link-local, loopback and metadata ranges).
type EgressRanges struct {
	// Denied are the management cluster's networks: its nodes, pods and
	// Services.
	Denied []netip.Prefix
	// Allowed are let through although a refused range holds them.
	Allowed []netip.Prefix
}

// args are the filter's flags of the dialer sidecar, each range once, in
// order: its controlplane socket, and its cluster socket for a tenant
// without the network proxy.
func (e EgressRanges) args(c *Completed) []string {
	args := []string{"--egress-socket=" + EgressFilterSocket}
	if !usesKonnectivity(c) {
		args = append(args, "--egress-cluster-socket="+EgressClusterSocket)
	}
	for _, r := range []struct {
		flag   string
		ranges []netip.Prefix
	}{{"--egress-deny=", e.Denied}, {"--egress-allow=", e.Allowed}} {
		if len(r.ranges) == 0 {
			continue
		}
		set := make([]string, 0, len(r.ranges))
		for _, p := range r.ranges {
			set = append(set, p.Masked().String())
		}
		slices.Sort(set)
		args = append(args, r.flag+strings.Join(slices.Compact(set), ","))
	}
	return args
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
	// first request to the end of its graceful shutdown. Its postStart
	// hook returns once every etcd the tenant stores in accepts
	// connections: kubelet starts kube-apiserver only then, so that a pod created
	// during an etcd outage (a scale-up, a drain, a rollout) waits for etcd
	// instead of exiting after its storage's 20 s and crash-looping.
	dialerArgs := []string{"--socket=" + EtcdDialerSocket, "--allow=" + strings.Join(c.Etcd.Addresses, ",")}
	// Its egress filter (EgressSelectorConfig) refuses the node's and the
	// pod's addresses, which the downward API gives.
	dialerArgs = append(dialerArgs, in.Egress.args(c)...)
	dialerEnv := []corev1.EnvVar{
		{Name: EgressHostIPsEnv, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIPs"}}},
		{Name: EgressPodIPsEnv, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIPs"}}},
	}
	for _, set := range c.Etcd.Sets {
		var addrs []string
		for _, s := range set {
			if u, err := url.Parse(s); err == nil && u.Host != "" {
				addrs = append(addrs, u.Host)
			}
		}
		dialerArgs = append(dialerArgs, "--wait-for="+strings.Join(addrs, ","))
	}
	dialer := corev1.Container{
		Name:            "etcd-dialer",
		Image:           cmp.Or(in.EtcdDialerImage, DefaultEtcdDialerImage),
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{EtcdDialerCommand},
		Args:            dialerArgs,
		Env:             dialerEnv,
		RestartPolicy:   ptr.To(corev1.ContainerRestartPolicyAlways),
		// kubelet starts kube-apiserver once this hook has returned: at
		// once when etcd answers (a startup probe would cost up to its
		// period, a second, on every start), and not before etcd does,
		// so that an apiserver started during an outage waits instead of
		// giving up on etcd and crash-looping. A deletion of the pod ends
		// it; the hook of a sidecar restarted later returns at once (the
		// pod is marked started). What it does not cover: a kubelet
		// restarted while the hook waits runs no hook again and starts
		// kube-apiserver, which then restarts until etcd is back, as
		// without the hook.
		Lifecycle: &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{
			Exec: &corev1.ExecAction{Command: []string{EtcdDialerCommand, "--probe", "--wait=" + etcdDialerStartWait.String(), "--socket=" + EtcdDialerSocket}},
		}},
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

	initContainers := []corev1.Container{dialer}
	if usesKonnectivity(c) {
		initContainers = append(initContainers, konnectivityServer(c, in.KonnectivityServerImage, container.SecurityContext))
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
					InitContainers: initContainers,
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
	if usesKonnectivity(c) {
		// Ready once its server can carry calls to nodes (the
		// controller opens the gate).
		d.Spec.Template.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: KonnectivityAgentsGate}}
	}
	return d, nil
}

// etcdDialerStartWait bounds the sidecar's postStart hook: it waits out an
// outage of a day rather than fail, which would restart the sidecar and
// change nothing.
const etcdDialerStartWait = 24 * time.Hour

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
