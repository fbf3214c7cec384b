package apiserver

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"fmt"
	"maps"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
)

// The network proxy (spec.konnectivity): upstream's konnectivity server
// runs as a native sidecar of each apiserver pod. Agents on the tenant's
// nodes dial it on the agents' port (a port of the pod and of the tenant's
// Service) and hold gRPC tunnels open; kube-apiserver sends its "cluster"
// egress (kubelets, pods, Services of the tenant: logs, exec,
// port-forward, proxy, webhooks, aggregated APIs) to the server over a
// Unix socket, and the server picks a tunnel. The server authenticates an
// agent by its bound service-account token of the tenant (audience
// KonnectivityAudience), which it has the tenant's apiserver review with a
// client certificate of its own (KonnectivityServerUser).
const (
	// KonnectivityVersion is the upstream release (sigs.k8s.io/
	// apiserver-network-proxy) the server and agent images are built from
	// (apiserver/networkproxy/tools/go.mod), and their tag.
	KonnectivityVersion = "v0.36.0"
	// DefaultKonnectivityServerImage is the server sidecar's image
	// (make konnectivity); the operator's --konnectivity-server-image
	// overrides it.
	DefaultKonnectivityServerImage = "localhost/apiserver-operator/konnectivity-server:" + KonnectivityVersion
	// DefaultKonnectivityAgentImage is the agents' image.
	DefaultKonnectivityAgentImage = "localhost/apiserver-operator/konnectivity-agent:" + KonnectivityVersion
	// KonnectivityServerCommand is the server's executable in its image,
	// where upstream's image has it.
	KonnectivityServerCommand = "/proxy-server"

	// DefaultKonnectivityPort is spec.konnectivity.port's default, the
	// port upstream's documentation uses.
	DefaultKonnectivityPort = 8132
	// KonnectivityAdminPort (loopback only: metrics, pprof) and
	// KonnectivityHealthPort (kubelet's probes, and the /metrics the
	// operator counts the agents in, for the pods' gate and status) are
	// the server's other ports in the pod.
	KonnectivityAdminPort  = 8133
	KonnectivityHealthPort = 8134
	// KonnectivityServerContainer is the konnectivity server's container
	// in an apiserver pod (a native sidecar).
	KonnectivityServerContainer = "konnectivity-server"

	// KonnectivityServerUser is the user of the server's client
	// certificate: the tenant grants it system:auth-delegator, to review
	// agents' tokens.
	KonnectivityServerUser = "system:konnectivity-server"
	// KonnectivityAudience is the audience of the agents' tokens, and
	// KonnectivityAgentNamespace and KonnectivityAgentServiceAccount the
	// service account the server accepts them from.
	KonnectivityAudience            = "system:konnectivity-server"
	KonnectivityAgentNamespace      = "kube-system"
	KonnectivityAgentServiceAccount = "konnectivity-agent"

	// KonnectivityLeaseNamespace is the tenant's namespace where each
	// server holds a Lease labelled KonnectivityLeaseLabel while it runs
	// (upstream's lease controller renews it every 15 s, for 30 s): agents
	// count the live ones to know how many servers to hold a tunnel to.
	// The number of servers is then in no flag of the pod, and a scale
	// rolls nothing. A namespace of their own: upstream's agents watch
	// every Lease of the namespace (not only the servers'), and the
	// servers may write Leases there; kube-system's are the leader
	// elections' and the apiservers' identities.
	KonnectivityLeaseNamespace = "konnectivity-leases"
	KonnectivityLeaseLabel     = "k8s-app=konnectivity-server"

	// KonnectivityAgentTokenLifetime is how long an agent's bound token
	// lives (kubelet renews it at 80 % of that): a retired
	// service-account key must verify tokens for as long, so that an
	// agent that reconnects after the signer changed is not refused.
	KonnectivityAgentTokenLifetime = time.Hour

	// KonnectivityServerKubeconfigKey is the server's kubeconfig in the
	// operator's ConfigMap: it names the files of its client certificate.
	KonnectivityServerKubeconfigKey = "konnectivity-server.kubeconfig"

	// konnectivityServerVolume carries the server's own files (its
	// certificates, its kubeconfig), mounted in its container only;
	// konnectivitySocketVolume is the emptyDir of its socket, shared with
	// kube-apiserver.
	konnectivityServerVolume = "konnectivity-server"
	konnectivitySocketVolume = "konnectivity"
)

// Paths in the pod: the socket kube-apiserver dials (in an emptyDir both
// containers mount) and the server's files.
const (
	KonnectivityDir    = "/run/konnectivity"
	KonnectivitySocket = KonnectivityDir + "/konnectivity-server.socket"

	KonnectivityServerDir = "/etc/konnectivity-server"
	// The agents' serving certificate, for the apiservers' SANs, which
	// name the Service the agents dial.
	KonnectivityAgentServingCertFile = KonnectivityServerDir + "/serving.crt"
	KonnectivityAgentServingKeyFile  = KonnectivityServerDir + "/serving.key"
	// The client certificate that reviews agents' tokens, the CA bundle
	// that verifies the apiserver, and the kubeconfig naming them.
	KonnectivityClientCertFile = KonnectivityServerDir + "/client.crt"
	KonnectivityClientKeyFile  = KonnectivityServerDir + "/client.key"
	KonnectivityCAFile         = KonnectivityServerDir + "/ca.crt"
	KonnectivityKubeconfigFile = KonnectivityServerDir + "/kubeconfig"

	// kube-apiserver's certificate for KonnectivityAgentServerName, in
	// its own PKI directory.
	KonnectivityAPIServerCertFile = PKIDir + "/konnectivity-apiserver.crt"
	KonnectivityAPIServerKeyFile  = PKIDir + "/konnectivity-apiserver.key"
)

// KonnectivityServerSecretName is the Secret of the server's certificate
// for the agents (the apiservers' SANs: the agents dial the tenant's
// Service), and KonnectivityClientSecretName that of its client
// certificate, with the CA bundle that verifies its apiserver. Neither is
// kube-apiserver's own: the sidecar holds none of kube-apiserver's keys.
func KonnectivityServerSecretName(name string) string { return name + "-konnectivity-server" }
func KonnectivityClientSecretName(name string) string { return name + "-konnectivity-client" }

// KonnectivityCASecretName is the Secret of the konnectivity CA, the one
// CA the agents trust: it signs the server's certificate for the agents
// and kube-apiserver's certificate for KonnectivityAgentServerName, and
// nothing else. The cluster CA's rotation leaves it alone, so that the
// agents, which read their CA once, keep their tunnels through one.
// KonnectivityAPIServerSecretName is the Secret of kube-apiserver's
// certificate for the agents.
func KonnectivityCASecretName(name string) string        { return name + "-konnectivity-ca" }
func KonnectivityAPIServerSecretName(name string) string { return name + "-konnectivity-apiserver" }

// KonnectivitySecretNames are the Secrets only a tenant with
// spec.konnectivity has: the controller deletes them once its pods run
// without the server.
func KonnectivitySecretNames(name string) []string {
	return []string{KonnectivityServerSecretName(name), KonnectivityClientSecretName(name),
		KonnectivityAPIServerSecretName(name), KonnectivityCASecretName(name)}
}

// KonnectivityAgentServerName is the name the agents ask kube-apiserver
// for (TLS server name indication) when they list the servers' Leases:
// kube-apiserver answers it with a certificate of the konnectivity CA
// (--tls-sni-cert-key), its other names with its serving certificate of
// the cluster CA. A name under .invalid (RFC 6761), which no resolver
// answers: the agents dial an address, and only send the name.
const KonnectivityAgentServerName = "apiserver.konnectivity.invalid"

// KonnectivityCACommonName is the konnectivity CA's subject.
const KonnectivityCACommonName = "konnectivity-ca"

// KonnectivityServingCertConfig is the server's certificate for the
// agents: for the host they dial (konnectivityAgentEndpoint) and the
// agents' Service's names in the management cluster; not for the
// apiservers' SANs, since the server reads its certificate at start and
// each new extra SAN would roll the pods. KonnectivityAPIServerCertConfig
// is kube-apiserver's for KonnectivityAgentServerName; the konnectivity CA
// signs both.
func KonnectivityServingCertConfig(c *Completed) pki.CertConfig {
	svc := KonnectivityServiceName(c.Name)
	host, _, _ := konnectivityAgentEndpoint(c)
	dns, ips := pki.SplitSANs([]string{svc, svc + "." + c.Namespace, svc + "." + c.Namespace + ".svc", host})
	return pki.ServingCertConfig(dns, ips)
}

func KonnectivityAPIServerCertConfig() pki.CertConfig {
	return pki.ServingCertConfig([]string{KonnectivityAgentServerName}, nil)
}

// usesKonnectivity says whether c's pods run the konnectivity server.
func usesKonnectivity(c *Completed) bool { return c.Spec.Konnectivity != nil }

// KonnectivityServerCertConfig is the server's client certificate, signed
// by the cluster CA.
func KonnectivityServerCertConfig() pki.CertConfig {
	return pki.ClientCertConfigFor(KonnectivityServerUser)
}

// konnectivityServerKubeconfig is the server's kubeconfig: the apiserver
// of its own pod, over loopback (a SAN of the serving certificate), with
// the client certificate and CA bundle of its Secret as files.
func konnectivityServerKubeconfig(c *Completed) ([]byte, error) {
	const name = "apiserver"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{
		Server:               "https://127.0.0.1:" + strconv.Itoa(int(c.Spec.Serving.SecurePort)),
		CertificateAuthority: KonnectivityCAFile,
	}
	cfg.AuthInfos[KonnectivityServerUser] = &clientcmdapi.AuthInfo{
		ClientCertificate: KonnectivityClientCertFile,
		ClientKey:         KonnectivityClientKeyFile,
	}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: KonnectivityServerUser}
	cfg.CurrentContext = name
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("writing the konnectivity server's kubeconfig: %w", err)
	}
	return out, nil
}

// konnectivityServicePort is the agents' port of the tenant's Service.
func konnectivityServicePort(c *Completed) corev1.ServicePort {
	k := c.Spec.Konnectivity
	p := corev1.ServicePort{
		Name:       konnectivityPortName,
		Protocol:   corev1.ProtocolTCP,
		Port:       k.Port,
		TargetPort: intstr.FromString(konnectivityPortName),
	}
	if k.NodePort != nil {
		p.NodePort = *k.NodePort
	}
	return p
}

const (
	konnectivityPortName       = "konnectivity"
	konnectivityHealthPortName = "konn-health"
)

// konnectivityServer is the server's native sidecar: it starts before
// kube-apiserver and stops after it, so that kube-apiserver's socket is
// there for its whole life. It answers agents on the agents' port,
// kube-apiserver on the socket.
func konnectivityServer(c *Completed, image string, securityContext *corev1.SecurityContext) corev1.Container {
	k := c.Spec.Konnectivity
	resources := corev1.ResourceRequirements{
		// It relays every byte of logs, exec and port-forward, and
		// buffers what a slow side has not read: no memory limit, since
		// an OOM kill would cut every tunnel of the pod at once.
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("25m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
	}
	if k.Resources != nil {
		resources = *k.Resources.DeepCopy()
	}
	health := func(period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/healthz", Port: intstr.FromString(konnectivityHealthPortName), Scheme: corev1.URISchemeHTTP,
			}},
			PeriodSeconds:    period,
			TimeoutSeconds:   5,
			FailureThreshold: failures,
		}
	}
	return corev1.Container{
		Name:            KonnectivityServerContainer,
		Image:           cmp.Or(image, DefaultKonnectivityServerImage),
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{KonnectivityServerCommand},
		Args: []string{
			// Upstream's binary logs at -v=4 unless told, a line per
			// packet relayed: 2 keeps connections, streams and full
			// channels.
			"--v=2",
			"--mode=grpc",
			"--uds-name=" + KonnectivitySocket,
			"--delete-existing-uds-file=true",
			"--server-port=0",
			"--server-id=$(" + podNameEnv + ")",
			// Agents connect until they hold a tunnel to every server:
			// they count the servers' Leases (no --server-count, which
			// would roll every pod on a scale).
			"--enable-lease-controller=true",
			"--lease-namespace=" + KonnectivityLeaseNamespace,
			"--lease-label=" + KonnectivityLeaseLabel,
			"--agent-port=" + strconv.Itoa(int(k.Port)),
			"--admin-port=" + strconv.Itoa(KonnectivityAdminPort),
			"--admin-bind-address=127.0.0.1",
			"--health-port=" + strconv.Itoa(KonnectivityHealthPort),
			"--cluster-cert=" + KonnectivityAgentServingCertFile,
			"--cluster-key=" + KonnectivityAgentServingKeyFile,
			"--agent-namespace=" + KonnectivityAgentNamespace,
			"--agent-service-account=" + KonnectivityAgentServiceAccount,
			"--authentication-audience=" + KonnectivityAudience,
			"--kubeconfig=" + KonnectivityKubeconfigFile,
			// Every agent's token is reviewed when it connects: after a
			// roll, all of the tenant's agents at once (client-go's
			// default is 5 per second).
			"--kubeconfig-qps=100",
			"--kubeconfig-burst=200",
			// A tunnel through NAT is kept alive by traffic: the server
			// pings idle agents every 30 s (upstream's default is an hour).
			"--keepalive-time=30s",
			// A request for a node goes to that node's agent when it has
			// one, to any agent otherwise.
			"--proxy-strategies=destHost,default",
			// The agents' port takes the TLS of the apiservers' port.
			"--tls-min-version=" + c.Spec.Serving.TLS.MinVersion,
			"--cipher-suites=" + strings.Join(cipherSuites(c), ","),
		},
		Env: []corev1.EnvVar{{
			Name:      podNameEnv,
			ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
		}},
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Ports: []corev1.ContainerPort{
			{Name: konnectivityPortName, ContainerPort: k.Port, Protocol: corev1.ProtocolTCP},
			{Name: konnectivityHealthPortName, ContainerPort: KonnectivityHealthPort, Protocol: corev1.ProtocolTCP},
		},
		// Liveness only: the server is ready as soon as it listens, and
		// kubelet starts kube-apiserver once its startup probe passes.
		StartupProbe:  health(1, 60),
		LivenessProbe: health(10, 6),
		Resources:     resources,
		VolumeMounts: []corev1.VolumeMount{
			{Name: konnectivitySocketVolume, MountPath: KonnectivityDir},
			{Name: konnectivityServerVolume, MountPath: KonnectivityServerDir, ReadOnly: true},
		},
		SecurityContext:          securityContext.DeepCopy(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

// podNameEnv is the pod's name in the server's environment: its server ID,
// which agents and metrics report.
const podNameEnv = "POD_NAME"

// validateKonnectivity refuses what would leave the konnectivity server
// unable to review agents' tokens: it calls its apiserver at 127.0.0.1, so
// kube-apiserver must listen there (--bind-address all addresses, or
// 127.0.0.1). It refuses a user's --tls-sni-cert-key, which the operator
// manages with spec.konnectivity (and only then: ManagedFlagFields does
// not list it).
// It warns when the agents would dial the apiservers' load balancer, or a
// node port that is not known yet.
func validateKonnectivity(spec *v1alpha1.ApiServerConfigSpec, specPath *field.Path, warnings *[]string) field.ErrorList {
	if spec.Konnectivity == nil {
		return nil
	}
	if spec.Serving.Service.Type == corev1.ServiceTypeLoadBalancer {
		// Two load balancers: the apiservers' and the agents' own.
		if spec.Konnectivity.Agent.Host == "" {
			*warnings = append(*warnings, "spec.konnectivity.agent.host: the agents' Service gets a load balancer of its own, and the agents dial spec.serving.externalHostname, which names the apiservers' one: "+
				"set the host to the address of the agents' load balancer (or to a name of it)")
		}
		if spec.Serving.ExternalHostname == "" {
			*warnings = append(*warnings, "spec.serving.externalHostname: the konnectivity agents read the servers' Leases from the apiservers at this name, and without it at spec.konnectivity.agent.host, the agents' load balancer, which does not serve the apiservers' port: "+
				"set it to a name of the apiservers' load balancer")
		}
	}
	if k, svc := spec.Konnectivity, spec.Serving.Service; svc.Type == corev1.ServiceTypeNodePort {
		// The node ports a Service is given are not known when the
		// agents' manifests are rendered.
		if k.Agent.Port == nil && k.NodePort == nil {
			*warnings = append(*warnings, "spec.konnectivity.agent.port: on a NodePort Service the agents dial a node port, and without spec.konnectivity.nodePort it is allocated: "+
				"they would dial spec.konnectivity.port instead; set spec.konnectivity.nodePort (or agent.port)")
		}
		if k.Agent.APIPort == nil && svc.NodePort == nil {
			*warnings = append(*warnings, "spec.konnectivity.agent.apiPort: on a NodePort Service the agents reach the apiservers on a node port, and without spec.serving.service.nodePort it is allocated: "+
				"they would use spec.serving.service.port instead; set spec.serving.service.nodePort (or agent.apiPort)")
		}
	}
	var errs field.ErrorList
	for i, a := range spec.ExtraArgs {
		switch a.Name {
		case "bind-address":
			if ip := net.ParseIP(a.Value); ip == nil || !ip.IsUnspecified() && !ip.Equal(net.IPv4(127, 0, 0, 1)) {
				errs = append(errs, field.Invalid(specPath.Child("extraArgs").Index(i).Child("value"), a.Value,
					"with spec.konnectivity, the konnectivity server reviews the agents' tokens with its apiserver at 127.0.0.1: bind-address must be 0.0.0.0, :: or 127.0.0.1"))
			}
		case "tls-sni-cert-key":
			errs = append(errs, field.Forbidden(specPath.Child("extraArgs").Index(i).Child("name"), fmt.Sprintf(
				"--tls-sni-cert-key is managed by the operator with spec.konnectivity (kube-apiserver's certificate for the agents, for %s)", KonnectivityAgentServerName)))
		}
	}
	return errs
}

// The agent side, for the tenant (KonnectivityAgentConfigMap).
const (
	// KonnectivityAgentManifestsKey is the tenant's manifests in the
	// ConfigMap KonnectivityAgentConfigMapName names.
	KonnectivityAgentManifestsKey = "konnectivity-agent.yaml"
	// konnectivityAgentHealthPort and konnectivityAgentAdminPort are the
	// agents' own ports in their pods.
	konnectivityAgentHealthPort = 8093
	konnectivityAgentAdminPort  = 8094
	// konnectivityAgentTokenDir holds the agent's bound token (a path,
	// not a credential).
	konnectivityAgentTokenDir  = "/var/run/secrets/tokens"  //nolint:gosec // G101: a path.
	konnectivityAgentTokenFile = "konnectivity-agent-token" //nolint:gosec // G101: a file name.
	// konnectivityAgentAPITokenFile is the agent's token for its
	// apiservers, where a pod's automounted one would be.
	konnectivityAgentAPITokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token" //nolint:gosec // G101: a path.
	// KonnectivityAgentKubeconfigKey is the agents' kubeconfig in their
	// ConfigMap in the tenant (kube-system/konnectivity-agent), and
	// KonnectivityAgentCAKey the konnectivity CA beside it, the one CA
	// the agents trust (the servers and, by KonnectivityAgentServerName,
	// the apiservers): both mounted at konnectivityAgentConfigDir.
	KonnectivityAgentKubeconfigKey = "kubeconfig"
	KonnectivityAgentCAKey         = "ca.crt"
	// KonnectivityAgentKubeconfigHashAnnotation on the agents' pod
	// template is a hash of that ConfigMap, kubeconfig and CA.
	KonnectivityAgentKubeconfigHashAnnotation = "apiserver-operator.dev/kubeconfig-hash"
	konnectivityAgentConfigDir                = "/etc/konnectivity-agent"
	konnectivityAgentCAFile                   = konnectivityAgentConfigDir + "/" + KonnectivityAgentCAKey
)

// KonnectivityAgentConfigMapName is the ConfigMap of the agents'
// manifests, in the tenant's namespace of the management cluster.
func KonnectivityAgentConfigMapName(name string) string { return name + "-konnectivity-agent" }

// konnectivityAgentEndpoint is where the agents dial the servers (the
// agents' Service), host and port, and the apiservers' port (the tenant's
// Service) at konnectivityAgentAPIHost.
func konnectivityAgentEndpoint(c *Completed) (host string, port, apiPort int32) {
	k, svc := c.Spec.Konnectivity, c.Spec.Serving.Service
	host = cmp.Or(k.Agent.Host, c.Spec.Serving.ExternalHostname)
	port, apiPort = k.Port, svc.Port
	if svc.Type == corev1.ServiceTypeNodePort {
		port, apiPort = ptr.Deref(k.NodePort, port), ptr.Deref(svc.NodePort, apiPort)
	}
	return host, ptr.Deref(k.Agent.Port, port), ptr.Deref(k.Agent.APIPort, apiPort)
}

// konnectivityAgentAPIHost is where the agents reach the apiservers: the
// external host name, which names the tenant's Service (a load balancer of
// a LoadBalancer Service, other than the agents' one), or the agents' host
// without one (a NodePort Service: the nodes serve both Services' ports).
func konnectivityAgentAPIHost(c *Completed) string {
	host, _, _ := konnectivityAgentEndpoint(c)
	return cmp.Or(c.Spec.Serving.ExternalHostname, host)
}

// konnectivityAgentKubeconfig is the agents' kubeconfig (in the
// tenant's ConfigMap kube-system/konnectivity-agent): the tenant's
// apiservers where the node reaches them, asked for
// KonnectivityAgentServerName and verified with the konnectivity CA
// beside it (not the tenant's CA bundle, which a CA rotation changes
// under agents that read it once), with a bound token of the agents'
// service account.
func konnectivityAgentKubeconfig(c *Completed) ([]byte, error) {
	_, _, apiPort := konnectivityAgentEndpoint(c)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["tenant"] = &clientcmdapi.Cluster{
		Server:               "https://" + net.JoinHostPort(konnectivityAgentAPIHost(c), strconv.Itoa(int(apiPort))),
		CertificateAuthority: konnectivityAgentCAFile,
		TLSServerName:        KonnectivityAgentServerName,
	}
	// client-go reads the file again as kubelet renews the token.
	kc.AuthInfos[KonnectivityAgentServiceAccount] = &clientcmdapi.AuthInfo{TokenFile: konnectivityAgentAPITokenFile}
	kc.Contexts["tenant"] = &clientcmdapi.Context{Cluster: "tenant", AuthInfo: KonnectivityAgentServiceAccount}
	kc.CurrentContext = "tenant"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, fmt.Errorf("writing the konnectivity agents' kubeconfig: %w", err)
	}
	return data, nil
}

// KonnectivityAgentObjects are what the tenant runs for the agents: the
// right of the servers' user to review tokens, the servers' and agents'
// rights on the servers' Leases, the agents' service account, kubeconfig
// and CA (ca, the konnectivity CA's PEM), and a DaemonSet of agents (one
// per node, so that a node's own agent carries its traffic), each dialing
// every server through the Service with a bound token of that account.
func KonnectivityAgentObjects(c *Completed, ca []byte, image string) ([]runtime.Object, error) {
	k := c.Spec.Konnectivity
	if len(ca) == 0 {
		return nil, fmt.Errorf("writing the konnectivity agents' manifests: no konnectivity CA given")
	}
	host, port, _ := konnectivityAgentEndpoint(c)
	kubeconfig, err := konnectivityAgentKubeconfig(c)
	if err != nil {
		return nil, err
	}
	agentConfig := map[string]string{KonnectivityAgentKubeconfigKey: string(kubeconfig), KonnectivityAgentCAKey: string(ca)}
	labels := map[string]string{"k8s-app": KonnectivityAgentServiceAccount}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: KonnectivityAgentNamespace, Labels: labels}
	}
	resources := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
	}
	if k.Agent.Resources != nil {
		resources = *k.Agent.Resources.DeepCopy()
	}
	tolerations := []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	if k.Agent.Tolerations != nil {
		tolerations = k.Agent.Tolerations
	}
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(konnectivityAgentHealthPort)}},
			PeriodSeconds: 10, TimeoutSeconds: 5, FailureThreshold: 3,
		}
	}
	binding := &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: KonnectivityServerUser, Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: KonnectivityServerUser}},
	}
	// The servers' Leases: each server writes its own and deletes expired
	// ones, agents read them. Roles in the Leases' own namespace, so that
	// neither reads or writes any other namespace's Leases.
	leaseNamespace := &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: KonnectivityLeaseNamespace, Labels: labels},
	}
	leaseMeta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: KonnectivityLeaseNamespace, Labels: labels}
	}
	leaseRole := func(name string, verbs ...string) *rbacv1.Role {
		return &rbacv1.Role{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
			ObjectMeta: leaseMeta(name),
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: verbs}},
		}
	}
	leaseBinding := func(name string, subject rbacv1.Subject) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
			ObjectMeta: leaseMeta(name),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{subject},
		}
	}
	serverLeases := KonnectivityServerUser + ":leases"
	agentLeases := "system:" + KonnectivityAgentServiceAccount + ":leases"
	sa := &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: meta(KonnectivityAgentServiceAccount),
	}
	ds := &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: meta(KonnectivityAgentServiceAccount),
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
				Type:          appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromString("10%"))},
			},
			Template: corev1.PodTemplateSpec{
				// The agents read their kubeconfig and CA once: a new
				// one rolls them.
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{
					KonnectivityAgentKubeconfigHashAnnotation: configHash(agentConfig),
				}},
				Spec: corev1.PodSpec{
					// Two bound tokens of the account, an hour each:
					// one for the tenant's apiservers, which reads the
					// servers' Leases, the other for the servers only.
					// None for a year, as an automounted token may be
					// (extended expiration). No kube-root-ca.crt: the
					// konnectivity CA verifies both.
					ServiceAccountName:           KonnectivityAgentServiceAccount,
					AutomountServiceAccountToken: ptr.To(false),
					PriorityClassName:            "system-node-critical",
					NodeSelector:                 k.Agent.NodeSelector,
					Tolerations:                  tolerations,
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						RunAsUser:      ptr.To[int64](nonRootUID),
						RunAsGroup:     ptr.To[int64](nonRootUID),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:            KonnectivityAgentServiceAccount,
						Image:           cmp.Or(image, DefaultKonnectivityAgentImage),
						ImagePullPolicy: corev1.PullIfNotPresent,
						Command:         []string{"/proxy-agent"},
						Args: []string{
							// As the server's: no line per packet.
							"--v=2",
							"--proxy-server-host=" + host,
							"--proxy-server-port=" + strconv.Itoa(int(port)),
							"--ca-cert=" + konnectivityAgentCAFile,
							"--service-account-token-path=" + konnectivityAgentTokenDir + "/" + konnectivityAgentTokenFile,
							// The servers send a node's traffic to its own
							// agent (--proxy-strategies=destHost,default).
							"--agent-identifiers=ipv4=$(HOST_IP)",
							"--health-server-port=" + strconv.Itoa(konnectivityAgentHealthPort),
							"--admin-server-port=" + strconv.Itoa(konnectivityAgentAdminPort),
							"--admin-bind-address=127.0.0.1",
							// Idle tunnels through NAT are kept alive.
							"--keepalive-time=30s",
							// A tunnel to every server whose Lease is
							// live: the tenant's apiservers tell how many
							// there are (reached as the node reaches
							// them, with the bound token below).
							"--count-server-leases=true",
							// Servers of an earlier operator send their
							// count (masterCount): the larger one wins.
							"--server-count-source=max",
							"--kubeconfig=" + konnectivityAgentConfigDir + "/" + KonnectivityAgentKubeconfigKey,
							"--lease-namespace=" + KonnectivityLeaseNamespace,
							"--lease-label=" + KonnectivityLeaseLabel,
						},
						Env: []corev1.EnvVar{{
							Name:      "HOST_IP",
							ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}},
						}},
						Resources: resources,
						// The agent answers once it has listed the
						// servers' Leases: while it cannot reach its
						// apiservers, it is not killed every 30 s
						// (and backed off for minutes once they are back).
						StartupProbe:   &corev1.Probe{ProbeHandler: probe("/healthz").ProbeHandler, PeriodSeconds: 5, TimeoutSeconds: 5, FailureThreshold: 120},
						LivenessProbe:  probe("/healthz"),
						ReadinessProbe: probe("/readyz"),
						VolumeMounts: []corev1.VolumeMount{
							{Name: "token", MountPath: konnectivityAgentTokenDir, ReadOnly: true},
							{Name: "kubeconfig", MountPath: konnectivityAgentConfigDir, ReadOnly: true},
							{Name: "kube-api", MountPath: path.Dir(konnectivityAgentAPITokenFile), ReadOnly: true},
						},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
					Volumes: []corev1.Volume{
						{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
							ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: konnectivityAgentTokenFile, Audience: KonnectivityAudience, ExpirationSeconds: ptr.To(int64(KonnectivityAgentTokenLifetime.Seconds()))},
						}}}}},
						{Name: "kubeconfig", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: KonnectivityAgentServiceAccount},
						}}},
						{Name: "kube-api", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
							{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
								Path: path.Base(konnectivityAgentAPITokenFile), ExpirationSeconds: ptr.To(int64(KonnectivityAgentTokenLifetime.Seconds())),
							}},
						}}}},
					},
				},
			},
		},
	}
	kubeconfigMap := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: KindConfigMap},
		ObjectMeta: meta(KonnectivityAgentServiceAccount),
		Data:       agentConfig,
	}
	return []runtime.Object{
		binding,
		leaseNamespace,
		leaseRole(serverLeases, "get", "list", "create", "update", "delete"),
		leaseBinding(serverLeases, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: KonnectivityServerUser}),
		sa,
		leaseRole(agentLeases, "get", "list", "watch"),
		leaseBinding(agentLeases, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: KonnectivityAgentServiceAccount, Namespace: KonnectivityAgentNamespace}),
		kubeconfigMap,
		ds,
	}, nil
}

// configHash is a short hash of a ConfigMap's data, key by key.
func configHash(data map[string]string) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(data)) {
		// Lengths first: no two maps hash the same bytes. A hash's
		// Write never fails.
		_, _ = fmt.Fprintf(h, "%d:%s%d:%s", len(k), k, len(data[k]), data[k])
	}
	return fmt.Sprintf("%x", h.Sum(nil))[:16]
}

// desiredKonnectivityAgentConfigMap publishes KonnectivityAgentObjects,
// for the konnectivity CA ca, for the platform to apply in the tenant;
// nil without spec.konnectivity.
func desiredKonnectivityAgentConfigMap(c *Completed, ca []byte, image string) (*corev1.ConfigMap, error) {
	if !usesKonnectivity(c) {
		return nil, nil
	}
	objects, err := KonnectivityAgentObjects(c, ca, image)
	if err != nil {
		return nil, err
	}
	return KonnectivityAgentConfigMap(c, objects)
}

// KonnectivityAgentConfigMap publishes the agents' objects as one YAML
// stream (kubectl apply -f, a GitOps repository of the tenant), as
// applied: no status, no creation timestamps.
func KonnectivityAgentConfigMap(c *Completed, objects []runtime.Object) (*corev1.ConfigMap, error) {
	var stream bytes.Buffer
	for _, o := range objects {
		u, err := ApplyForm(o)
		if err != nil {
			return nil, fmt.Errorf("writing the konnectivity agent's manifests: %w", err)
		}
		data, err := yaml.Marshal(u.Object)
		if err != nil {
			return nil, fmt.Errorf("writing the konnectivity agent's manifests: %w", err)
		}
		stream.WriteString("---\n")
		stream.Write(data)
	}
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: KindConfigMap},
		ObjectMeta: objectMeta(c, KonnectivityAgentConfigMapName(c.Name)),
		Data:       map[string]string{KonnectivityAgentManifestsKey: stream.String()},
	}, nil
}
