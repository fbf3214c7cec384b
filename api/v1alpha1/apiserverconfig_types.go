package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ApiServerConfigSpec is the desired state of a kube-apiserver deployment. Its
// fields follow kube-apiserver's ServerRunOptions; whatever is not typed here
// can be passed through extraArgs.
//
// +kubebuilder:validation:XValidation:rule="!has(self.serving) || !has(self.serving.tls) || !has(self.serving.tls.cipherSuites) || size(self.serving.tls.cipherSuites) == 0 || (has(self.certificates) && has(self.certificates.keyAlgorithm) && self.certificates.keyAlgorithm != 'ECDSAP256' ? self.serving.tls.cipherSuites.exists(c, c.startsWith('TLS_ECDHE_RSA_')) : self.serving.tls.cipherSuites.exists(c, c.startsWith('TLS_ECDHE_ECDSA_')))",fieldPath=".serving.tls.cipherSuites",message="cipherSuites must include at least one suite that matches the serving key (TLS_ECDHE_ECDSA_* for ECDSAP256, TLS_ECDHE_RSA_* for RSA keys), or TLS 1.2 clients cannot connect"
// +kubebuilder:validation:XValidation:rule="!has(self.version) || self.version in ['v1.36.4', 'v1.37.1'] || has(self.image)",fieldPath=".version",messageExpression="self.version + ' is not a bundled version (v1.36.4, v1.37.1): choose one of them, or set image to a kube-apiserver image of this version'"
// +kubebuilder:validation:XValidation:rule="!has(self.authorization) || !has(self.authorization.modes) || !('Webhook' in self.authorization.modes) || has(self.authorization.webhook)",fieldPath=".authorization.webhook",message="webhook is required when authorization.modes contains Webhook"
// +kubebuilder:validation:XValidation:rule="!has(self.authorization) || !has(self.authorization.webhook) || (has(self.authorization.modes) && 'Webhook' in self.authorization.modes)",fieldPath=".authorization.modes",message="modes must contain Webhook when authorization.webhook is set"
// +kubebuilder:validation:XValidation:rule="!has(self.konnectivity) || (has(self.konnectivity.port) ? self.konnectivity.port : 8132) != (has(self.serving) && has(self.serving.securePort) ? self.serving.securePort : 6443)",fieldPath=".konnectivity.port",message="the agents' port must differ from spec.serving.securePort: both are ports of the apiserver pods and of the tenant's Service"
// +kubebuilder:validation:XValidation:rule="!has(self.konnectivity) || (has(self.konnectivity.port) ? self.konnectivity.port : 8132) != (has(self.serving) && has(self.serving.service) && has(self.serving.service.port) ? self.serving.service.port : 443)",fieldPath=".konnectivity.port",message="the agents' port must differ from spec.serving.service.port: both are ports of the tenant's Service"
// +kubebuilder:validation:XValidation:rule="!has(self.konnectivity) || (has(self.konnectivity.agent) && has(self.konnectivity.agent.host)) || (has(self.serving) && has(self.serving.externalHostname))",fieldPath=".konnectivity.agent.host",message="the agents need an address to dial: set konnectivity.agent.host, or spec.serving.externalHostname"
// +kubebuilder:validation:XValidation:rule="!has(self.konnectivity) || !has(self.serving) || !has(self.serving.securePort) || !(self.serving.securePort in [8133, 8134])",fieldPath=".serving.securePort",message="ports 8133 and 8134 are the konnectivity server's admin and health ports in the apiserver pods when spec.konnectivity is set: choose another securePort"
// +kubebuilder:validation:XValidation:rule="!has(self.konnectivity) || !has(self.konnectivity.nodePort) || (has(self.serving) && has(self.serving.service) && has(self.serving.service.type) && self.serving.service.type != 'ClusterIP')",fieldPath=".konnectivity.nodePort",message="nodePort requires spec.serving.service.type NodePort or LoadBalancer"
// +kubebuilder:validation:XValidation:rule="!has(self.konnectivity) || !has(self.konnectivity.nodePort) || !has(self.serving) || !has(self.serving.service) || !has(self.serving.service.nodePort) || self.konnectivity.nodePort != self.serving.service.nodePort",fieldPath=".konnectivity.nodePort",message="the agents' node port must differ from spec.serving.service.nodePort"
// +kubebuilder:validation:XValidation:rule="has(self.restore) == has(oldSelf.restore)",fieldPath=".restore",message="restore is immutable: it is set when the tenant is created, and read once, before its first start"
type ApiServerConfigSpec struct {
	// Version of kube-apiserver to run, as vMAJOR.MINOR.PATCH. Defaults to
	// the version bundled with the operator. It may be raised, never lowered:
	// kube-apiserver does not support a downgrade of the data it stored.
	// +kubebuilder:default="v1.37.1"
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^v1\.[0-9]+\.[0-9]+$`
	// +kubebuilder:validation:XValidation:rule="!semver(self, true).isLessThan(semver(oldSelf, true))",message="version may not be downgraded"
	// +optional
	Version string `json:"version,omitempty"`

	// Image is the container image that runs kube-apiserver. Defaults to the
	// operator's bundled image for the chosen version.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[^\s]+$`
	// +optional
	Image string `json:"image,omitempty"`

	// MasterCount is the number of kube-apiserver replicas. 0 hibernates the
	// control plane: pods are removed, certificates and data are kept. It is
	// the target of the scale subresource, so `kubectl scale` works.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=32
	// +optional
	MasterCount *int32 `json:"masterCount,omitempty"`

	// EndpointReconcilerType selects how the apiservers publish themselves in
	// the `kubernetes` Service endpoints: lease (default), master-count (its
	// --apiserver-count then follows masterCount) or none.
	// +kubebuilder:default=lease
	// +optional
	EndpointReconcilerType EndpointReconcilerType `json:"endpointReconcilerType,omitempty"`

	// Etcd is where the apiserver stores its data.
	Etcd EtcdSpec `json:"etcd"`

	// ServiceClusterIPRange is the CIDR range, or a pair of ranges of
	// different IP families for dual stack, from which Service ClusterIPs are
	// allocated. The first address of the first range becomes the ClusterIP of
	// the `kubernetes` Service. The first range cannot be changed once set.
	// +kubebuilder:default={"10.96.0.0/12"}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 10.96.0.0/12 or fd00:10:96::/108"
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || cidr(self) == cidr(self).masked()",message="must be the network address of the range (host bits must be zero)"
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || cidr(self).prefixLength() <= (cidr(self).ip().family() == 4 ? 29 : 125)",message="must hold at least 8 addresses (a /29 or larger for IPv4, /125 or larger for IPv6)"
	// +kubebuilder:validation:XValidation:rule="size(self) < 2 || !isCIDR(self[0]) || !isCIDR(self[1]) || cidr(self[0]).ip().family() != cidr(self[1]).ip().family()",message="the two ranges must be of different IP families (one IPv4, one IPv6)"
	// +kubebuilder:validation:XValidation:rule="self[0] == oldSelf[0]",message="the primary (first) range is immutable: Services already hold addresses from it"
	// +listType=atomic
	// +optional
	ServiceClusterIPRange []string `json:"serviceClusterIPRange,omitempty"`

	// ServiceNodePortRange is the port range reserved for NodePort Services,
	// as FIRST-LAST, both inclusive.
	// +kubebuilder:default="30000-32767"
	// +kubebuilder:validation:MaxLength=11
	// +kubebuilder:validation:Pattern=`^[0-9]{1,5}-[0-9]{1,5}$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]{1,5}-[0-9]{1,5}$') || (int(self.split('-')[0]) >= 1 && int(self.split('-')[1]) <= 65535 && int(self.split('-')[0]) <= int(self.split('-')[1]))",message="must be FIRST-LAST with 1 <= FIRST <= LAST <= 65535"
	// +optional
	ServiceNodePortRange string `json:"serviceNodePortRange,omitempty"`

	// ClusterDomain is the DNS domain of the tenant cluster, used for the
	// kubernetes.default.svc.<clusterDomain> name in the serving certificate.
	// +kubebuilder:default="cluster.local"
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	ClusterDomain string `json:"clusterDomain,omitempty"`

	// Serving configures the secure port, the serving certificate and the
	// Service that exposes the apiservers.
	// +kubebuilder:default={}
	// +optional
	Serving ServingSpec `json:"serving,omitempty"`

	// Authentication configures how requests are authenticated.
	// +kubebuilder:default={}
	// +optional
	Authentication AuthenticationSpec `json:"authentication,omitempty"`

	// Authorization configures how requests are authorized.
	// +kubebuilder:default={}
	// +optional
	Authorization AuthorizationSpec `json:"authorization,omitempty"`

	// Admission selects admission plugins on top of kube-apiserver's default
	// set.
	// +optional
	Admission AdmissionSpec `json:"admission,omitempty"`

	// Audit configures the audit log.
	// +kubebuilder:default={}
	// +optional
	Audit AuditSpec `json:"audit,omitempty"`

	// Encryption configures encryption of resources at rest in etcd: on by
	// default (secretbox over Secrets and ConfigMaps); provider identity
	// opts out.
	// +kubebuilder:default={provider: "secretbox"}
	// +optional
	Encryption *EncryptionSpec `json:"encryption,omitempty"`

	// FeatureGates turns kube-apiserver feature gates on or off
	// (--feature-gates).
	// +kubebuilder:validation:MaxProperties=128
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[A-Z][A-Za-z0-9]*$'))",message="feature gate names are CamelCase words such as StructuredAuthenticationConfiguration"
	// +optional
	FeatureGates map[string]bool `json:"featureGates,omitempty"`

	// RuntimeConfig enables or disables API groups and versions
	// (--runtime-config), for example {"api/all": "true"} or
	// {"batch/v2alpha1": "false"}.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[a-z0-9][a-z0-9.-]*(/[a-z0-9.]+)*$'))",message="keys are group/version, api/all, api/ga, api/beta or api/alpha"
	// +kubebuilder:validation:XValidation:rule="self.all(k, self[k] == 'true' || self[k] == 'false')",message="values must be \"true\" or \"false\""
	// +optional
	RuntimeConfig map[string]string `json:"runtimeConfig,omitempty"`

	// Requests bounds the requests the apiserver serves at once and how long
	// they may take.
	// +optional
	Requests RequestsSpec `json:"requests,omitempty"`

	// EventTTL is how long events are retained (--event-ttl).
	// +kubebuilder:default="1h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="must be at least 1m"
	// +optional
	EventTTL *metav1.Duration `json:"eventTTL,omitempty"`

	// Profiling exposes /debug/pprof (--profiling). Off by default, as the
	// CIS benchmark (1.2.15) requires.
	// +kubebuilder:default=false
	// +optional
	Profiling *bool `json:"profiling,omitempty"`

	// CacheSizing controls the watch cache and the memory-based sizing of the
	// apiserver.
	// +kubebuilder:default={}
	// +optional
	CacheSizing CacheSizingSpec `json:"cacheSizing,omitempty"`

	// Certificates configures the PKI the operator generates and rotates.
	// +kubebuilder:default={}
	// +optional
	Certificates CertificatesSpec `json:"certificates,omitempty"`

	// AdminCredentials says how long the admin kubeconfig's credential
	// lives and whether the operator publishes it in a Secret at all. Ask
	// for a credential of your own, with an expiry, with an
	// AdminCredentialRequest.
	// +kubebuilder:default={}
	// +optional
	AdminCredentials AdminCredentialsSpec `json:"adminCredentials,omitzero"`

	// DeletionPolicy says what deleting the ApiServerConfig does to the
	// tenant's data and to the keys that read it, together. Delete stops
	// the apiservers, removes every key under spec.etcd.prefix on the main
	// servers and on each override's, proves by a count that none is left,
	// then removes the Secrets; while etcd does not answer, or another
	// tenant's keys share the prefix, nothing is removed and the
	// ApiServerConfig stays, saying why. Retain keeps the data, the
	// encryption keys, the CAs and the service-account key: an
	// ApiServerConfig created again with the same namespace and name takes
	// them back. Unset, certificates.pkiRetention decides (Retain: Retain,
	// Delete: Delete), so that data is never kept without the keys that
	// read it.
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`

	// Maintenance says when the operator may do the disruptive work it
	// starts by itself: the start of a rotation that comes due by age (CA,
	// service-account key, encryption key), an automatic cache resize, and
	// a new pod template that only an upgrade of the operator brings. Each
	// rolls the apiserver pods. Outside the windows that work waits, and
	// status.maintenance says what waits and when the next window opens;
	// a change of the spec and a rotation requested with its annotation
	// are done at once. Unset: any time.
	// +optional
	Maintenance *MaintenanceSpec `json:"maintenance,omitempty"`

	// NetworkPolicy isolates the apiserver pods on the management
	// cluster's network: a NetworkPolicy of the tenant lets clients reach
	// the apiservers' port and lets the apiservers call only their etcd
	// servers, DNS and the destinations listed here. Without it, whoever
	// administers the tenant can register webhooks, aggregated APIs or
	// authentication webhooks that make its apiservers call any address
	// their pods reach. A new ApiServerConfig gets mode Enforced from
	// admission; one created before the field existed keeps None until
	// it is set. It takes a network plugin that enforces NetworkPolicy.
	// +optional
	NetworkPolicy *NetworkPolicySpec `json:"networkPolicy,omitempty"`

	// Konnectivity runs the upstream network proxy (konnectivity) server
	// beside each apiserver, so that the apiservers reach the tenant's
	// nodes, wherever those are, through tunnels the nodes' agents open:
	// kubectl logs, exec, attach, port-forward and proxy, webhooks and
	// aggregated APIs served from the tenant's pods. Without it (the
	// default) the apiservers dial nodes and pods directly, which works
	// only where the management cluster's network reaches them. Turning
	// it on rolls the apiservers once; kube-apiserver then sends all of
	// its traffic to the cluster through the proxy, so calls to nodes
	// fail until agents are connected: install the agent side first (see
	// docs/konnectivity.md).
	// +optional
	Konnectivity *KonnectivitySpec `json:"konnectivity,omitempty"`

	// Restore starts the tenant from a backup (an ApiServerBackup of its
	// namespace) instead of an empty prefix. It is read before the
	// tenant's first apiserver starts, and may not change afterwards.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="restore is immutable: it is read once, before the tenant's first start"
	// +optional
	Restore *RestoreSpec `json:"restore,omitempty"`

	// ExtraArgs passes kube-apiserver flags that have no typed field. A flag
	// may be repeated where kube-apiserver allows it. Flags managed by the
	// operator, and flags removed from kube-apiserver, are rejected rather
	// than silently ignored.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	ExtraArgs []ExtraArg `json:"extraArgs,omitempty"`

	// Resources are the compute resources of the kube-apiserver container.
	// The memory limit also feeds cache sizing when
	// cacheSizing.targetRAMMB is not set.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// NodeSelector constrains the apiserver pods to nodes with these labels.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations of the apiserver pods.
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// Affinity of the apiserver pods.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// TopologySpreadConstraints of the apiserver pods.
	// +listType=atomic
	// +optional
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`

	// PriorityClassName of the apiserver pods.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
}

// NetworkPolicyMode says whether the operator isolates a tenant's
// apiservers with a NetworkPolicy.
// +kubebuilder:validation:Enum=Enforced;None
type NetworkPolicyMode string

const (
	// NetworkPolicyEnforced renders the tenant's NetworkPolicy.
	NetworkPolicyEnforced NetworkPolicyMode = "Enforced"
	// NetworkPolicyNone renders none, and deletes the one the operator
	// made.
	NetworkPolicyNone NetworkPolicyMode = "None"
)

// NetworkPolicySpec is the tenant's network isolation.
// +kubebuilder:validation:XValidation:rule="self.mode == 'Enforced' || !has(self.egress) || size(self.egress) == 0",message="egress is only read with mode Enforced"
type NetworkPolicySpec struct {
	// Mode is Enforced (a NetworkPolicy selects the apiserver pods) or
	// None (no policy: the pods reach what the network lets them).
	Mode NetworkPolicyMode `json:"mode"`

	// Egress lists what the apiservers may call besides their etcd
	// servers (allowed by address and port when spec.etcd names them by
	// IP address) and DNS: admission, conversion and authentication
	// webhooks, OIDC issuers, aggregated APIs, audit webhooks. Each entry
	// is a NetworkPolicy egress rule; a destination reached through a
	// Service is matched on the pods behind it. An etcd server given by
	// host name needs an entry reaching it on its port, since a
	// NetworkPolicy names addresses, not names.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	Egress []networkingv1.NetworkPolicyEgressRule `json:"egress,omitempty"`
}

// KonnectivitySpec configures the network proxy between the apiservers
// and the tenant's nodes.
type KonnectivitySpec struct {
	// Port is where agents connect: a port of the apiserver pods, named
	// konnectivity, and of the agents' Service <name>-konnectivity. It
	// must differ from
	// spec.serving.securePort and from the server's own health (8134)
	// and admin (8133) ports; the server takes 1024 to 49151.
	// +kubebuilder:default=8132
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=49151
	// +kubebuilder:validation:XValidation:rule="self != 8133 && self != 8134",message="8133 and 8134 are the konnectivity server's admin and health ports"
	// +optional
	Port int32 `json:"port,omitempty"`

	// NodePort requests a fixed node port for the agents' port of a
	// NodePort or LoadBalancer Service; allocated by the cluster when
	// unset.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	NodePort *int32 `json:"nodePort,omitempty"`

	// ServiceAnnotations are the annotations of the agents' Service (of
	// spec.serving.service.type), such as a load balancer's settings.
	// Those of the tenant's Service are not copied: an external-dns name
	// or a fixed address of the apiservers' load balancer must not go to
	// the agents' one.
	// +optional
	ServiceAnnotations map[string]string `json:"serviceAnnotations,omitempty"`

	// Resources of the konnectivity-server sidecar. By default it
	// requests 25m CPU and 64Mi of memory and has no limit: the server
	// buffers what it relays, and an OOM kill would cut every tunnel of
	// the pod at once.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// Agent configures the agents of the tenant's nodes, which the
	// operator renders into the ConfigMap <name>-konnectivity-agent for
	// the platform to apply in the tenant.
	// +optional
	Agent KonnectivityAgentSpec `json:"agent,omitempty"`
}

// KonnectivityAgentSpec configures the agents that run on the tenant's
// nodes and dial the konnectivity servers.
type KonnectivityAgentSpec struct {
	// Host is the address the agents dial: a host name or IP address at
	// which the tenant's nodes reach the Service, and which the
	// apiservers' serving certificate names (spec.serving.externalHostname
	// or spec.serving.extraSANs, or the LoadBalancer's address). Defaults
	// to spec.serving.externalHostname.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="isIP(self) || self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="must be an IP address or a lower-case DNS name"
	// +optional
	Host string `json:"host,omitempty"`

	// Port is the port the agents dial, when it is not
	// spec.konnectivity.port (a node port, a load balancer's port).
	// Defaults to spec.konnectivity.nodePort on a NodePort Service that
	// has one, to spec.konnectivity.port otherwise.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port *int32 `json:"port,omitempty"`

	// APIPort is the port at which the agents reach the tenant's
	// apiservers on host, to count the konnectivity servers (each holds a
	// Lease in kube-system while it runs): the address a node behind NAT
	// has for its control plane, where the tenant's own kubernetes
	// Service (the pods' addresses) may be out of its reach. Defaults to
	// spec.serving.service.nodePort on a NodePort Service that has one,
	// to spec.serving.service.port otherwise.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	APIPort *int32 `json:"apiPort,omitempty"`

	// Resources of each agent. By default an agent requests 50m CPU and
	// 64Mi of memory and has no limit: an agent that relays a node's
	// logs and exec sessions is starved or killed under load otherwise.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// Tolerations of the agents. By default they tolerate every taint,
	// so that every node, tainted or not, is reachable.
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// NodeSelector limits the agents to some of the tenant's nodes; the
	// others are then reached through them.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
}

// EndpointReconcilerType is kube-apiserver's --endpoint-reconciler-type.
// +kubebuilder:validation:Enum=lease;master-count;none
type EndpointReconcilerType string

const (
	// EndpointReconcilerLease keeps one lease per apiserver (the default).
	EndpointReconcilerLease EndpointReconcilerType = "lease"
	// EndpointReconcilerMasterCount expects --apiserver-count apiservers.
	// Deprecated upstream; the operator keeps --apiserver-count equal to
	// masterCount.
	EndpointReconcilerMasterCount EndpointReconcilerType = "master-count"
	// EndpointReconcilerNone leaves the endpoints of the `kubernetes` Service
	// alone.
	EndpointReconcilerNone EndpointReconcilerType = "none"
)

// EtcdSpec says where and how the apiserver stores its data.
type EtcdSpec struct {
	// Servers are the etcd client URLs (--etcd-servers).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:XValidation:rule="isURL(self) && (url(self).getScheme() == 'http' || url(self).getScheme() == 'https') && url(self).getHostname() != '' && url(self).getPort() != ''",message="must be an http:// or https:// URL with a host and a port (kube-apiserver's etcd client dials the address as written), such as https://etcd-0.etcd:2379"
	// +kubebuilder:validation:items:XValidation:rule="!self.contains(',') && !self.contains(';') && !self.contains('#')",message="must not contain ',', ';' or '#': kube-apiserver uses them as separators"
	// +listType=atomic
	Servers []string `json:"servers"`

	// Prefix is the key prefix of this apiserver's data in etcd
	// (--etcd-prefix). Several control planes can share an etcd cluster
	// with prefixes that are neither within nor above each other's
	// (admission refuses an overlap). A new ApiServerConfig without one
	// gets /tenants/<namespace>/<name> from the operator's webhook; one
	// created before that default keeps /registry, the default then.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^/[A-Za-z0-9._/-]*$`
	// +optional
	Prefix string `json:"prefix,omitempty"`

	// TLS names the Secret that holds the client certificate the apiserver
	// presents to etcd and the CA that signed the etcd servers' certificates.
	// +optional
	TLS *EtcdTLS `json:"tls,omitempty"`

	// Overrides store some resources on other etcd servers
	// (--etcd-servers-overrides), typically events on an etcd of their own.
	// Each group/resource appears once.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self.all(o, self.exists_one(p, p.group == o.group && p.resource == o.resource))",message="each group/resource may be overridden once"
	// +listType=atomic
	// +optional
	Overrides []EtcdOverride `json:"overrides,omitempty"`
}

// EtcdTLS references the Secret with the etcd client credentials.
type EtcdTLS struct {
	// SecretName is a Secret in the ApiServerConfig's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	SecretName string `json:"secretName"`

	// CAKey is the key of the CA bundle in the Secret.
	// +kubebuilder:default="ca.crt"
	// +kubebuilder:validation:MaxLength=253
	// +optional
	CAKey string `json:"caKey,omitempty"`

	// CertKey is the key of the client certificate in the Secret.
	// +kubebuilder:default="tls.crt"
	// +kubebuilder:validation:MaxLength=253
	// +optional
	CertKey string `json:"certKey,omitempty"`

	// KeyKey is the key of the client private key in the Secret.
	// +kubebuilder:default="tls.key"
	// +kubebuilder:validation:MaxLength=253
	// +optional
	KeyKey string `json:"keyKey,omitempty"`
}

// EtcdOverride stores one resource on other etcd servers.
type EtcdOverride struct {
	// Group of the resource; empty for the core group (events, pods...).
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	Group string `json:"group"`

	// Resource is the plural, lower-case resource name, such as events.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9]*$`
	Resource string `json:"resource"`

	// Servers are the etcd client URLs for this resource.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:XValidation:rule="isURL(self) && (url(self).getScheme() == 'http' || url(self).getScheme() == 'https') && url(self).getHostname() != '' && url(self).getPort() != ''",message="must be an http:// or https:// URL with a host and a port (kube-apiserver's etcd client dials the address as written), such as https://etcd-events:2379"
	// +kubebuilder:validation:items:XValidation:rule="!self.contains(',') && !self.contains(';') && !self.contains('#')",message="must not contain ',', ';' or '#': kube-apiserver uses them as separators"
	// +listType=atomic
	Servers []string `json:"servers"`
}

// ServingSpec configures how the apiserver serves and is exposed.
type ServingSpec struct {
	// SecurePort is the HTTPS port the apiserver listens on in its pod
	// (--secure-port).
	// +kubebuilder:default=6443
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	SecurePort int32 `json:"securePort,omitempty"`

	// ExtraSANs are extra DNS names or IP addresses in the serving
	// certificate. Wildcard DNS names (*.example.com) are allowed.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:XValidation:rule="isIP(self) || self.matches('^(\\\\*\\\\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="must be an IP address or a lower-case DNS name"
	// +listType=set
	// +optional
	ExtraSANs []string `json:"extraSANs,omitempty"`

	// ExternalHostname is the name or address clients use to reach the
	// apiserver from outside; it goes in the serving certificate, the admin
	// kubeconfig and --external-hostname.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="isIP(self) || self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="must be an IP address or a lower-case DNS name"
	// +optional
	ExternalHostname string `json:"externalHostname,omitempty"`

	// TLS restricts the TLS versions and cipher suites the apiserver accepts.
	// +kubebuilder:default={}
	// +optional
	TLS TLSSpec `json:"tls,omitempty"`

	// Service is the Service the operator creates in front of the apiservers.
	// +kubebuilder:default={}
	// +optional
	Service ServiceSpec `json:"service,omitempty"`
}

// TLSSpec configures TLS for the secure port.
// +kubebuilder:validation:XValidation:rule="self.minVersion != 'VersionTLS13' || !has(self.cipherSuites) || size(self.cipherSuites) == 0",fieldPath=".cipherSuites",message="cipherSuites cannot be set with minVersion VersionTLS13: TLS 1.3 suites are not configurable"
type TLSSpec struct {
	// MinVersion is the lowest TLS version accepted (--tls-min-version).
	// +kubebuilder:default=VersionTLS12
	// +kubebuilder:validation:Enum=VersionTLS12;VersionTLS13
	// +optional
	MinVersion string `json:"minVersion,omitempty"`

	// CipherSuites limits the TLS 1.2 cipher suites (--tls-cipher-suites).
	// Only AEAD suites (AES-GCM, ChaCha20-Poly1305) are offered, as the CIS
	// benchmark (1.2.29) requires. Empty means Go's secure defaults.
	// +kubebuilder:validation:MaxItems=6
	// +kubebuilder:validation:items:Enum=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256;TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384;TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256;TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256;TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384;TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
	// +listType=set
	// +optional
	CipherSuites []string `json:"cipherSuites,omitempty"`
}

// ServiceSpec describes the Service in front of the apiservers.
// +kubebuilder:validation:XValidation:rule="!has(self.nodePort) || self.type != 'ClusterIP'",fieldPath=".nodePort",message="nodePort requires type NodePort or LoadBalancer"
type ServiceSpec struct {
	// Type of the Service.
	// +kubebuilder:default=ClusterIP
	// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
	// +optional
	Type corev1.ServiceType `json:"type,omitempty"`

	// Port the Service listens on.
	// +kubebuilder:default=443
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`

	// NodePort requests a fixed node port for NodePort and LoadBalancer
	// Services; allocated by the cluster when unset.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	NodePort *int32 `json:"nodePort,omitempty"`

	// Annotations added to the Service, for example for a cloud load
	// balancer.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// AuthenticationSpec configures authentication.
// +kubebuilder:validation:XValidation:rule="!has(self.anonymous) || !self.anonymous || !has(self.anonymousPaths) || size(self.anonymousPaths) == 0",fieldPath=".anonymousPaths",message="anonymousPaths are read only when anonymous is false: with anonymous true every path answers without credentials"
type AuthenticationSpec struct {
	// Anonymous allows unauthenticated requests everywhere. Off by default,
	// as CIS 1.2.1 recommends: only /livez, /readyz and /healthz then answer
	// without credentials, so that kubelet's probes work.
	// +kubebuilder:default=false
	// +optional
	Anonymous *bool `json:"anonymous,omitempty"`

	// AnonymousPaths are paths that answer requests without credentials
	// when anonymous is false, besides /livez, /readyz and /healthz, which
	// always do (kubelet's probes need them): for example
	// /.well-known/openid-configuration and /openid/v1/jwks, for systems
	// that read the ServiceAccount issuer's keys without credentials.
	// RBAC still decides what system:anonymous may do there. A change
	// restarts the apiservers, one at a time: kube-apiserver does not
	// reload its anonymous settings.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern=`^/`
	// +listType=set
	// +optional
	AnonymousPaths []string `json:"anonymousPaths,omitempty"`

	// OIDC authenticates users with tokens of an OpenID Connect provider.
	// It is kept for specs written before jwt: it becomes the first JWT
	// authenticator, with the meaning its flags had. A change of it
	// restarts the apiservers, one at a time, as it always has; prefer
	// jwt, whose changes are reloaded.
	// +optional
	OIDC *OIDCSpec `json:"oidc,omitempty"`

	// JWT authenticates users with tokens of JWT issuers (OpenID Connect
	// providers), each with its audiences, claim mappings and validation
	// rules in CEL: upstream's AuthenticationConfiguration jwt list, field
	// for field, except that an issuer's CA is read from a ConfigMap or a
	// Secret (issuer.certificateAuthorityRef). The bundled kube-apiserver's
	// own loader judges the list at admission: a wrong CEL expression is
	// refused at its field. Changes reach the running apiservers through
	// kube-apiserver's reload of its authentication configuration, without
	// a restart: the file reaches the pods within about a minute (kubelet's
	// sync), and kube-apiserver reads it again within a minute more. A new
	// list is taken only once every issuer in it answers discovery; until
	// then the one before keeps working.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	JWT []JWTAuthenticator `json:"jwt,omitempty"`

	// ServiceAccount configures the tokens of ServiceAccounts.
	// +kubebuilder:default={}
	// +optional
	ServiceAccount ServiceAccountSpec `json:"serviceAccount,omitempty"`
}

// OIDCSpec configures an OpenID Connect token authenticator.
type OIDCSpec struct {
	// IssuerURL is the provider's issuer; it must use https.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() == 'https' && url(self).getHostname() != ''",message="must be an https:// URL"
	IssuerURL string `json:"issuerURL"`

	// ClientID is the audience tokens must be issued for.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ClientID string `json:"clientID"`

	// UsernameClaim is the claim used as the user name.
	// +kubebuilder:default=sub
	// +kubebuilder:validation:MaxLength=253
	// +optional
	UsernameClaim string `json:"usernameClaim,omitempty"`

	// UsernamePrefix is put in front of user names, so that they cannot
	// clash with other authenticators' ("-" for none).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	UsernamePrefix string `json:"usernamePrefix,omitempty"`

	// GroupsClaim is the claim that holds the user's groups.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	GroupsClaim string `json:"groupsClaim,omitempty"`

	// GroupsPrefix is put in front of group names.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	GroupsPrefix string `json:"groupsPrefix,omitempty"`

	// CAConfigMapName names a ConfigMap, key ca.crt, with the CA that signed
	// the provider's serving certificate, when it is not publicly trusted.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	CAConfigMapName string `json:"caConfigMapName,omitempty"`
}

// JWTAuthenticator is one JWT issuer whose tokens authenticate users.
type JWTAuthenticator struct {
	// Issuer says where the tokens come from and whom they are for.
	Issuer JWTIssuer `json:"issuer"`

	// ClaimValidationRules must all hold for a token to be accepted.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	ClaimValidationRules []ClaimValidationRule `json:"claimValidationRules,omitempty"`

	// ClaimMappings says which claims become the user's name, groups, uid
	// and extra attributes.
	ClaimMappings ClaimMappings `json:"claimMappings"`

	// UserValidationRules must all hold for the user a token maps to, for
	// example that its name does not start with system:.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	UserValidationRules []UserValidationRule `json:"userValidationRules,omitempty"`
}

// JWTIssuer is an OpenID Connect provider.
type JWTIssuer struct {
	// URL is the issuer (https://...): the iss claim of its tokens, and
	// where its discovery document is fetched from unless discoveryURL
	// says otherwise. Unique among the authenticators.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	URL string `json:"url"`

	// DiscoveryURL, when set, is fetched for the discovery document
	// instead of {url}/.well-known/openid-configuration, for a provider
	// served elsewhere than its issuer URL (for example inside the
	// management cluster).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +optional
	DiscoveryURL *string `json:"discoveryURL,omitempty"`

	// CertificateAuthorityRef names the ConfigMap or Secret of the
	// tenant's namespace that holds the CA (PEM) of the provider's
	// serving certificate, when it is not publicly trusted. The operator
	// reads it and writes it into the authentication configuration: a
	// change of it is reloaded like the rest of jwt.
	// +optional
	CertificateAuthorityRef *CertificateAuthorityRef `json:"certificateAuthorityRef,omitempty"`

	// Audiences are the audiences a token must be issued for (its aud
	// claim): at least one of them.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=atomic
	Audiences []string `json:"audiences"`

	// AudienceMatchPolicy is MatchAny: a token is accepted when its aud
	// claim has any of audiences. It must be set when there are several
	// audiences.
	// +kubebuilder:validation:Enum=MatchAny
	// +optional
	AudienceMatchPolicy string `json:"audienceMatchPolicy,omitempty"`

	// EgressSelectorType routes the calls to the provider (discovery,
	// keys, distributed claims): "cluster" through the konnectivity
	// tunnel into the tenant's nodes (needs spec.konnectivity), for a
	// provider that runs there; "controlplane" and unset dial it from the
	// apiserver pods directly.
	// +kubebuilder:validation:Enum=controlplane;cluster
	// +optional
	EgressSelectorType string `json:"egressSelectorType,omitempty"`
}

// CertificateAuthorityRef names a key of a ConfigMap or of a Secret that
// holds PEM certificates.
// +kubebuilder:validation:XValidation:rule="has(self.configMapName) != has(self.secretName)",message="name exactly one of configMapName and secretName"
type CertificateAuthorityRef struct {
	// ConfigMapName names a ConfigMap of the tenant's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ConfigMapName string `json:"configMapName,omitempty"`

	// SecretName names a Secret of the tenant's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	SecretName string `json:"secretName,omitempty"`

	// Key is the key that holds the certificates.
	// +kubebuilder:default=ca.crt
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Key string `json:"key,omitempty"`
}

// ClaimValidationRule is a claim a token must carry with a value, or a CEL
// expression over its claims that must be true.
type ClaimValidationRule struct {
	// Claim is a claim that must be present, with value requiredValue.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Claim string `json:"claim,omitempty"`

	// RequiredValue is the value claim must have.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	RequiredValue string `json:"requiredValue,omitempty"`

	// Expression is a CEL expression over claims (claims.sub,
	// claims.email_verified) that must be true.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Expression string `json:"expression,omitempty"`

	// Message is the error a token gets when expression is false.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
}

// ClaimMappings says which claims make the user.
type ClaimMappings struct {
	// Username is the user's name: a claim with a prefix (set it, "" for
	// none), or a CEL expression.
	Username PrefixedClaimOrExpression `json:"username"`

	// Groups are the user's groups: a claim with a prefix, or a CEL
	// expression.
	// +optional
	Groups PrefixedClaimOrExpression `json:"groups,omitempty"`

	// UID is the user's uid: a claim or a CEL expression.
	// +optional
	UID ClaimOrExpression `json:"uid,omitempty"`

	// Extra are the user's extra attributes, each from a CEL expression.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Extra []ExtraMapping `json:"extra,omitempty"`
}

// PrefixedClaimOrExpression is a claim with a prefix, or a CEL expression.
type PrefixedClaimOrExpression struct {
	// Claim is the claim whose value is taken.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Claim string `json:"claim,omitempty"`

	// Prefix is put in front of the claim's value, so that names cannot
	// clash with other authenticators'; it must be set with claim ("" for
	// none).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Prefix *string `json:"prefix,omitempty"`

	// Expression is a CEL expression over claims.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Expression string `json:"expression,omitempty"`
}

// ClaimOrExpression is a claim, or a CEL expression.
type ClaimOrExpression struct {
	// Claim is the claim whose value is taken.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Claim string `json:"claim,omitempty"`

	// Expression is a CEL expression over claims.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Expression string `json:"expression,omitempty"`
}

// ExtraMapping is one extra attribute of the user.
type ExtraMapping struct {
	// Key is the attribute's name, a lowercase domain-prefixed path
	// (example.org/team).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`

	// ValueExpression is a CEL expression over claims that gives the
	// attribute's value, a string or a list of strings.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	ValueExpression string `json:"valueExpression"`
}

// UserValidationRule is a CEL expression over the user a token maps to
// (user.username, user.groups) that must be true.
type UserValidationRule struct {
	// Expression must be true for the token to be accepted.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Expression string `json:"expression"`

	// Message is the error a token gets when expression is false.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
}

// ServiceAccountSpec configures ServiceAccount tokens.
type ServiceAccountSpec struct {
	// Issuers of ServiceAccount tokens (--service-account-issuer). The first
	// one signs new tokens; the others are still accepted, which allows an
	// issuer to be changed without invalidating tokens. Defaults to
	// https://kubernetes.default.svc.<clusterDomain>.
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	// +kubebuilder:validation:items:XValidation:rule="!self.contains(':') || (isURL(self) && url(self).getScheme() == 'https')",message="an issuer that contains ':' must be an https:// URL"
	// +listType=set
	// +optional
	Issuers []string `json:"issuers,omitempty"`

	// JWKSURI is where systems outside the cluster (a cloud's workload
	// identity, a vault) fetch the keys that verify ServiceAccount tokens,
	// as the issuer's discovery document (/.well-known/openid-configuration)
	// names it (--service-account-jwks-uri): an https URL that serves the
	// content of /openid/v1/jwks, usually a public copy of it. Unset, the
	// document names the apiserver's own /openid/v1/jwks. See
	// docs/day-2.md for public discovery and for changing the issuer.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() == 'https' && url(self).getHostname() != ''",message="must be an https:// URL"
	// +optional
	JWKSURI string `json:"jwksURI,omitempty"`

	// MaxTokenExpiration caps the lifetime of requested tokens
	// (--service-account-max-token-expiration), between 1h and 2^32 s.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1h') && duration(self) <= duration('4294967296s')",message="must be between 1h and 4294967296s (2^32 seconds)"
	// +optional
	MaxTokenExpiration *metav1.Duration `json:"maxTokenExpiration,omitempty"`

	// ExtendTokenExpiration lets kube-apiserver issue longer-lived tokens to
	// pods during a migration (--service-account-extend-token-expiration).
	// Off by default, as CIS 1.2.30 requires.
	// +kubebuilder:default=false
	// +optional
	ExtendTokenExpiration *bool `json:"extendTokenExpiration,omitempty"`
}

// AuthorizationMode is one of kube-apiserver's --authorization-mode values.
// +kubebuilder:validation:Enum=Node;RBAC;Webhook;AlwaysAllow;AlwaysDeny
type AuthorizationMode string

// AuthorizationSpec configures authorization.
// +kubebuilder:validation:XValidation:rule="!has(self.authorizers) || size(self.authorizers) == 0 || ((!has(self.modes) || self.modes == ['Node', 'RBAC']) && !has(self.webhook))",message="authorizers replaces modes and webhook: leave modes at its default and webhook unset"
type AuthorizationSpec struct {
	// Modes are the authorizers, in order (--authorization-mode). Left at
	// its default when authorizers is set.
	// +kubebuilder:default={"Node","RBAC"}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=5
	// +listType=set
	// +optional
	Modes []AuthorizationMode `json:"modes,omitempty"`

	// Webhook configures the Webhook authorizer of modes.
	// +optional
	Webhook *AuthorizationWebhookSpec `json:"webhook,omitempty"`

	// Authorizers, when set, replace modes and webhook: kube-apiserver's
	// AuthorizationConfiguration, a chain asked in order, in which
	// webhooks may be several, each with its own timeout, failure policy,
	// caching and CEL matchConditions that choose the requests it is asked
	// about. The bundled kube-apiserver's own loader judges the chain at
	// admission (matchConditions compiled there). Changes of the webhooks
	// reach the running apiservers through kube-apiserver's reload, without
	// a restart; adding or removing Node or RBAC restarts them, one at a
	// time, since kube-apiserver builds those only at start.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	Authorizers []Authorizer `json:"authorizers,omitempty"`
}

// AuthorizerType is the kind of an authorizer of the chain.
// +kubebuilder:validation:Enum=Node;RBAC;Webhook;AlwaysAllow;AlwaysDeny
type AuthorizerType string

// Authorizer is one link of the authorization chain.
// +kubebuilder:validation:XValidation:rule="(self.type == 'Webhook') == has(self.webhook)",message="webhook is set for, and only for, type Webhook"
type Authorizer struct {
	// Type is Node, RBAC, Webhook, AlwaysAllow or AlwaysDeny.
	Type AuthorizerType `json:"type"`

	// Name names the authorizer in kube-apiserver's metrics and audit
	// annotations: a DNS label, unique in the chain.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Webhook configures an authorizer of type Webhook.
	// +optional
	Webhook *AuthorizerWebhook `json:"webhook,omitempty"`
}

// AuthorizerWebhook is a webhook of the authorization chain, asked with
// authorization.k8s.io/v1 SubjectAccessReviews.
type AuthorizerWebhook struct {
	// KubeconfigSecretName names a Secret of the tenant's namespace, key
	// kubeconfig, that tells how to reach the webhook. Its credentials must
	// be inline: no exec, auth-provider or file paths. A new kubeconfig is
	// taken up by kube-apiserver's reload.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	KubeconfigSecretName string `json:"kubeconfigSecretName"`

	// Timeout of a call, from 1s to 30s.
	// +kubebuilder:default="3s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// FailurePolicy says what a call that fails (or a matchCondition that
	// fails to evaluate) decides: NoOpinion (the default, as the webhook
	// of modes), to ask the next authorizer, or Deny. A Deny webhook
	// before RBAC that is down denies kubelet's probes of /livez and
	// /readyz unless its matchConditions leave them out.
	// +kubebuilder:default=NoOpinion
	// +kubebuilder:validation:Enum=NoOpinion;Deny
	// +optional
	FailurePolicy string `json:"failurePolicy,omitempty"`

	// AuthorizedTTL is how long an allow is cached (5m when unset).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +optional
	AuthorizedTTL *metav1.Duration `json:"authorizedTTL,omitempty"`

	// UnauthorizedTTL is how long a deny is cached (30s when unset).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +optional
	UnauthorizedTTL *metav1.Duration `json:"unauthorizedTTL,omitempty"`

	// CacheAuthorizedRequests caches allows (true when unset).
	// +optional
	CacheAuthorizedRequests *bool `json:"cacheAuthorizedRequests,omitempty"`

	// CacheUnauthorizedRequests caches denies (true when unset).
	// +optional
	CacheUnauthorizedRequests *bool `json:"cacheUnauthorizedRequests,omitempty"`

	// MatchConditions choose the requests the webhook is asked about: CEL
	// expressions over request (a SubjectAccessReviewSpec), all of which
	// must be true; a request that fails one goes to the next authorizer.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	MatchConditions []AuthorizerMatchCondition `json:"matchConditions,omitempty"`
}

// AuthorizerMatchCondition is a CEL expression over a SubjectAccessReview's
// spec, as request (request.resourceAttributes.namespace, request.user).
type AuthorizerMatchCondition struct {
	// Expression must be true for the webhook to be asked.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Expression string `json:"expression"`
}

// AuthorizationWebhookSpec configures the Webhook authorizer.
type AuthorizationWebhookSpec struct {
	// KubeconfigSecretName names a Secret, key kubeconfig, that tells how to
	// reach the authorization webhook.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	KubeconfigSecretName string `json:"kubeconfigSecretName"`
}

// AdmissionSpec selects admission plugins.
// +kubebuilder:validation:XValidation:rule="!has(self.enablePlugins) || !has(self.disablePlugins) || !self.enablePlugins.exists(p, p in self.disablePlugins)",message="a plugin cannot be both enabled and disabled"
// +kubebuilder:validation:XValidation:rule="!has(self.eventRateLimit) || !has(self.disablePlugins) || !self.disablePlugins.exists(p, p == 'EventRateLimit')",fieldPath=".disablePlugins",message="eventRateLimit turns EventRateLimit on: it cannot also be disabled"
type AdmissionSpec struct {
	// EnablePlugins are turned on in addition to the default set
	// (--enable-admission-plugins). NodeRestriction is always on, and so is
	// DenyServiceExternalIPs unless disablePlugins lists it.
	// +kubebuilder:validation:MaxItems=48
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^[A-Z][A-Za-z0-9.]*$`
	// +kubebuilder:validation:XValidation:rule="!self.exists(p, p == 'AlwaysAdmit')",message="AlwaysAdmit turns admission control off (CIS 1.2.10) and cannot be enabled"
	// +kubebuilder:validation:XValidation:rule="!self.exists(p, p == 'EventRateLimit')",message="EventRateLimit needs its limits: turn it on with spec.admission.eventRateLimit instead"
	// +listType=set
	// +optional
	EnablePlugins []string `json:"enablePlugins,omitempty"`

	// DisablePlugins are turned off even if on by default
	// (--disable-admission-plugins). The operator turns
	// DenyServiceExternalIPs on for every tenant (CIS 1.2.3): without it any
	// user who may create a Service can set its externalIPs and intercept
	// traffic to those addresses (CVE-2020-8554). A tenant that really
	// needs Service externalIPs lists DenyServiceExternalIPs here; Services
	// that already have externalIPs keep them either way.
	// +kubebuilder:validation:MaxItems=48
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^[A-Z][A-Za-z0-9.]*$`
	// +kubebuilder:validation:XValidation:rule="!self.exists(p, p == 'ServiceAccount' || p == 'NamespaceLifecycle' || p == 'NodeRestriction')",message="ServiceAccount, NamespaceLifecycle and NodeRestriction cannot be disabled (CIS 1.2.12-1.2.14)"
	// +listType=set
	// +optional
	DisablePlugins []string `json:"disablePlugins,omitempty"`

	// EventRateLimit turns the EventRateLimit admission plugin on (CIS
	// 1.2.9): Event writes beyond its limits are answered 429 Too Many
	// Requests, so that a flood of events (a crash-looping workload, a
	// controller in a hot loop) cannot swamp the apiserver and etcd. The
	// operator renders its configuration into --admission-control-config-file.
	// `eventRateLimit: {}` is enough: it gets the default limits. Off
	// unless set, because its configuration API is alpha
	// (eventratelimit.admission.k8s.io/v1alpha1) and a limit can drop the
	// events of a busy tenant (event recorders give up on a refused event).
	// +optional
	EventRateLimit *EventRateLimitSpec `json:"eventRateLimit,omitempty"`
}

// EventRateLimitType is what a limit keeps one token bucket for: Server
// (one for every event the apiserver receives), Namespace (one per
// namespace), User (one per user) or SourceAndObject (one per event source
// and involved object).
// +kubebuilder:validation:Enum=Server;Namespace;User;SourceAndObject
type EventRateLimitType string

// EventRateLimitSpec configures the EventRateLimit admission plugin (an
// eventratelimit.admission.k8s.io/v1alpha1 Configuration).
type EventRateLimitSpec struct {
	// Limits are the token buckets an Event write must get through, at most
	// one per type. The defaults are a Server limit of 5000 events per
	// second with a burst of 20000, a ceiling that a healthy cluster stays
	// far below and that bounds a storm (Rancher RKE's default when the
	// plugin is turned on), and a Namespace limit of 50 per second with a
	// burst of 100 (the example of the upstream documentation), so that one
	// namespace's storm cannot use up the server's budget. There is no
	// default User limit: kube-controller-manager and kube-scheduler each
	// write the events of every namespace as one user. Each apiserver
	// replica counts on its own.
	// +kubebuilder:default={{type: "Server", qps: 5000, burst: 20000}, {type: "Namespace", qps: 50, burst: 100}}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4
	// +listType=map
	// +listMapKey=type
	// +optional
	Limits []EventRateLimit `json:"limits,omitempty"`
}

// EventRateLimit is one token bucket per Type: it holds Burst events and
// refills with QPS events per second.
type EventRateLimit struct {
	// Type is what one bucket is kept for.
	Type EventRateLimitType `json:"type"`

	// QPS is how many events per second a bucket lets through once its
	// burst is used up.
	// +kubebuilder:validation:Minimum=1
	QPS int32 `json:"qps"`

	// Burst is how many events a full bucket lets through at once.
	// +kubebuilder:validation:Minimum=1
	Burst int32 `json:"burst"`

	// CacheSize is how many buckets of this type are kept, the least
	// recently used dropped first (a dropped bucket starts full again).
	// Unset means kube-apiserver's default, 4096. The Server type has one
	// bucket and ignores it.
	// +kubebuilder:validation:Minimum=1
	// +optional
	CacheSize *int32 `json:"cacheSize,omitempty"`
}

// AuditSpec configures auditing. The log is always written in the pod and
// rotated by size; the CIS benchmark (1.2.16-1.2.19) minimums are the
// defaults. A webhook may receive the same events besides.
type AuditSpec struct {
	// PolicyConfigMapName names a ConfigMap, key policy.yaml, holding an
	// audit.k8s.io Policy. Without it every request is logged at the
	// Metadata level.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PolicyConfigMapName string `json:"policyConfigMapName,omitempty"`

	// MaxAge is how many days old logs are kept (--audit-log-maxage).
	// +kubebuilder:default=30
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxAge *int32 `json:"maxAge,omitempty"`

	// MaxBackups is how many rotated logs are kept (--audit-log-maxbackup).
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxBackups *int32 `json:"maxBackups,omitempty"`

	// MaxSizeMB is the size at which the log is rotated
	// (--audit-log-maxsize).
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxSizeMB *int32 `json:"maxSizeMB,omitempty"`

	// Webhook sends the audit events, as the policy selects them, to a
	// webhook besides the log (--audit-webhook-config-file): an
	// audit.k8s.io/v1 EventList POSTed to the server its kubeconfig
	// names. With spec.networkPolicy Enforced, an entry of
	// spec.networkPolicy.egress must reach that server.
	// +optional
	Webhook *AuditWebhookSpec `json:"webhook,omitempty"`
}

// AuditWebhookMode is how kube-apiserver sends events to the audit
// webhook (--audit-webhook-mode).
// +kubebuilder:validation:Enum=batch;blocking;blocking-strict
type AuditWebhookMode string

// The modes of spec.audit.webhook.mode.
const (
	// AuditWebhookBatch buffers events and sends them in batches, in the
	// background: a slow or absent webhook delays no request, and events
	// beyond the buffer are dropped.
	AuditWebhookBatch AuditWebhookMode = "batch"
	// AuditWebhookBlocking sends each request's events before the
	// request is answered; a failure to send is logged and the request
	// goes on.
	AuditWebhookBlocking AuditWebhookMode = "blocking"
	// AuditWebhookBlockingStrict is blocking, and a request whose event
	// of stage RequestReceived cannot be sent fails.
	AuditWebhookBlockingStrict AuditWebhookMode = "blocking-strict"
)

// AuditWebhookSpec configures the audit webhook backend.
// +kubebuilder:validation:XValidation:rule="!has(self.batch) || !has(self.mode) || self.mode == 'batch'",fieldPath=".batch",message="batch is only read with mode batch"
type AuditWebhookSpec struct {
	// KubeconfigSecretName names a Secret of the tenant's namespace, key
	// kubeconfig, that tells how to reach the webhook: its server
	// (https://...), the CA that signed its certificate and the
	// credentials the apiservers present. kube-apiserver reads it at
	// start: a change of it restarts the apiservers, one at a time.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	KubeconfigSecretName string `json:"kubeconfigSecretName"`

	// Mode is batch (the default: events are buffered and sent in the
	// background), blocking (each request waits until its events are
	// sent; a failure is logged and the request goes on) or
	// blocking-strict (as blocking, and a request fails when its event of
	// stage RequestReceived cannot be sent) (--audit-webhook-mode). The
	// blocking modes make every request wait on the webhook. The default
	// policy omits stage RequestReceived, so that blocking-strict needs a
	// policy (policyConfigMapName) that keeps it.
	// +kubebuilder:default=batch
	// +optional
	Mode AuditWebhookMode `json:"mode,omitempty"`

	// Batch tunes mode batch; unset fields keep kube-apiserver's
	// defaults.
	// +optional
	Batch *AuditWebhookBatchSpec `json:"batch,omitempty"`

	// InitialBackoff is how long kube-apiserver waits before it retries a
	// failed send the first time; it waits 1.5 times longer before each
	// of the next retries, up to 5 tries in all
	// (--audit-webhook-initial-backoff). kube-apiserver's default is 10s.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +optional
	InitialBackoff *metav1.Duration `json:"initialBackoff,omitempty"`

	// Truncate, when set, shortens what is sent
	// (--audit-webhook-truncate-enabled): an event larger than
	// maxEventBytes loses its request and response objects, and is
	// dropped if still too large; a batch larger than maxBatchBytes is
	// split. maxBatchBytes must not be below maxEventBytes.
	// +optional
	Truncate *AuditWebhookTruncateSpec `json:"truncate,omitempty"`
}

// AuditWebhookBatchSpec tunes the batching of audit events
// (--audit-webhook-batch-*). Each apiserver keeps a buffer of its own.
type AuditWebhookBatchSpec struct {
	// BufferSize is how many events wait to be sent before new ones are
	// dropped (--audit-webhook-batch-buffer-size). kube-apiserver
	// allocates the whole buffer at start. Its default is 10000.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	// +optional
	BufferSize *int32 `json:"bufferSize,omitempty"`

	// MaxSize is the most events one request to the webhook carries
	// (--audit-webhook-batch-max-size). Its default is 400.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxSize *int32 `json:"maxSize,omitempty"`

	// MaxWait is the longest an event waits for its batch to fill before
	// the batch is sent (--audit-webhook-batch-max-wait). Its default is
	// 30s.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="must be more than 0: kube-apiserver would send batches in a loop without a pause"
	// +optional
	MaxWait *metav1.Duration `json:"maxWait,omitempty"`

	// ThrottleQPS is how many batches per second are sent at most, on
	// average (--audit-webhook-batch-throttle-qps). Its default is 10.
	// +kubebuilder:validation:Minimum=1
	// +optional
	ThrottleQPS *int32 `json:"throttleQPS,omitempty"`

	// ThrottleBurst is how many batches may be sent at once when the
	// average allows it (--audit-webhook-batch-throttle-burst). Its
	// default is 15.
	// +kubebuilder:validation:Minimum=1
	// +optional
	ThrottleBurst *int32 `json:"throttleBurst,omitempty"`
}

// AuditWebhookTruncateSpec bounds the size of what is sent to the audit
// webhook (--audit-webhook-truncate-*).
type AuditWebhookTruncateSpec struct {
	// MaxEventBytes is the largest event sent
	// (--audit-webhook-truncate-max-event-size). Its default is 102400
	// (100 KiB).
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxEventBytes *int64 `json:"maxEventBytes,omitempty"`

	// MaxBatchBytes is the largest batch sent; a larger one is split
	// (--audit-webhook-truncate-max-batch-size). Its default is 10485760
	// (10 MiB).
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxBatchBytes *int64 `json:"maxBatchBytes,omitempty"`
}

// EncryptionProvider encrypts resources at rest with a key the operator
// generates; identity stores them in plain text (the opt-out).
// +kubebuilder:validation:Enum=secretbox;aescbc;aesgcm;identity
type EncryptionProvider string

// The providers of spec.encryption.provider.
const (
	EncryptionSecretbox EncryptionProvider = "secretbox"
	EncryptionAESCBC    EncryptionProvider = "aescbc"
	EncryptionAESGCM    EncryptionProvider = "aesgcm"
	// EncryptionIdentity stores in plain text: the explicit opt-out.
	EncryptionIdentity EncryptionProvider = "identity"
)

// EncryptionSpec configures encryption at rest. By default the operator
// encrypts Secrets and ConfigMaps with secretbox and a key it generates,
// rotates the key periodically and proves in etcd that every stored value
// moved to the new key before it drops the old one. Either the operator
// keeps the key (provider), or the user supplies a whole
// EncryptionConfiguration (configSecretName) and rotates it.
// +kubebuilder:validation:XValidation:rule="has(self.provider) != has(self.configSecretName)",message="set exactly one of provider and configSecretName"
// +kubebuilder:validation:XValidation:rule="!has(self.configSecretName) || !has(self.resources)",fieldPath=".resources",message="resources are set in the EncryptionConfiguration when configSecretName is used"
// +kubebuilder:validation:XValidation:rule="!has(self.configSecretName) || !has(self.rotationPeriod)",fieldPath=".rotationPeriod",message="the operator rotates only the keys it generates (provider)"
type EncryptionSpec struct {
	// Provider the operator configures with a key it generates: secretbox
	// (the default: XSalsa20-Poly1305, CIS 1.2.28), aescbc or aesgcm; or
	// identity to store resources in plain text. Changing it (or
	// resources) re-encrypts, or decrypts, every stored object of the
	// resources concerned before the previous key is dropped.
	// +optional
	Provider EncryptionProvider `json:"provider,omitempty"`

	// Resources to encrypt, as resource or resource.group. Defaults to
	// secrets and configmaps: Secrets hold credentials by definition, and
	// ConfigMaps are where credentials end up when someone misfiles them
	// (OpenShift and HyperShift encrypt both for that reason).
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^(\*|[a-z][a-z0-9]*)(\.(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*))?$`
	// +listType=set
	// +optional
	Resources []string `json:"resources,omitempty"`

	// RotationPeriod is how often the operator replaces the key (and
	// re-encrypts everything with the new one); 0 turns periodic rotation
	// off. The annotation controlplane.apiserver-operator.dev/rotate-encryption-key
	// asks for a rotation at any time. Defaults to 28 days (Gardener's
	// period). A hibernated tenant (masterCount 0) rotates when it wakes.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration('0s') || duration(self) >= duration('1h')",message="must be 0 (never) or at least 1h"
	// +optional
	RotationPeriod *metav1.Duration `json:"rotationPeriod,omitempty"`

	// RewritesPerSecond bounds how fast the operator rewrites stored
	// objects through the tenant's API when it re-encrypts them. Defaults
	// to 100.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +optional
	RewritesPerSecond *int32 `json:"rewritesPerSecond,omitempty"`

	// ConfigSecretName names a Secret, key encryption-config.yaml, with a
	// complete EncryptionConfiguration.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ConfigSecretName string `json:"configSecretName,omitempty"`
}

// RequestsSpec bounds request handling.
type RequestsSpec struct {
	// MaxInflight caps non-mutating requests in flight
	// (--max-requests-inflight). Derived from cache sizing when unset.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	// +optional
	MaxInflight *int32 `json:"maxInflight,omitempty"`

	// MaxMutatingInflight caps mutating requests in flight
	// (--max-mutating-requests-inflight). Derived from cache sizing when
	// unset.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	// +optional
	MaxMutatingInflight *int32 `json:"maxMutatingInflight,omitempty"`

	// Timeout is the default deadline of non-long-running requests
	// (--request-timeout).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="must be at least 1s"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// MinTimeoutSeconds is the least time a watch is held open before it is
	// closed and clients reconnect (--min-request-timeout).
	// +kubebuilder:validation:Minimum=1
	// +optional
	MinTimeoutSeconds *int32 `json:"minTimeoutSeconds,omitempty"`
}

// CacheSizingPolicy chooses how cache sizing is decided.
// +kubebuilder:validation:Enum=Static;Auto
type CacheSizingPolicy string

const (
	// CacheSizingStatic sizes from the spec and the memory limit only.
	CacheSizingStatic CacheSizingPolicy = "Static"
	// CacheSizingAuto also follows the observed size of the cluster.
	CacheSizingAuto CacheSizingPolicy = "Auto"
)

// CacheSizingSpec controls the watch cache and memory-based sizing.
type CacheSizingSpec struct {
	// Policy is Static (from the spec and memory limit) or Auto (also from
	// the number of nodes and pods observed in etcd).
	// +kubebuilder:default=Static
	// +optional
	Policy CacheSizingPolicy `json:"policy,omitempty"`

	// TargetRAMMB is the memory the apiserver is sized for. Unset or 0 means
	// the container's memory limit.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4194304
	// +optional
	TargetRAMMB *int32 `json:"targetRAMMB,omitempty"`

	// WatchCache turns the watch cache on or off for every resource
	// (--watch-cache).
	// +kubebuilder:default=true
	// +optional
	WatchCache *bool `json:"watchCache,omitempty"`

	// ObservationInterval is how often Auto counts the tenant's nodes and
	// pods in etcd (count-only reads).
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('5s')",message="must be at least 5s"
	// +optional
	ObservationInterval *metav1.Duration `json:"observationInterval,omitempty"`

	// ResizeThresholdPercent is the change of the observed size below which
	// Auto does not resize, so that small changes roll nothing.
	// +kubebuilder:default=20
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=500
	// +optional
	ResizeThresholdPercent *int32 `json:"resizeThresholdPercent,omitempty"`

	// MinResizeInterval is the least time between two resizes.
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('5s')",message="must be at least 5s"
	// +optional
	MinResizeInterval *metav1.Duration `json:"minResizeInterval,omitempty"`

	// DisabledResources have their watch cache turned off
	// (--watch-cache-sizes=<resource>#0).
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(o, self.exists_one(p, p.group == o.group && p.resource == o.resource))",message="each group/resource may be listed once"
	// +listType=atomic
	// +optional
	DisabledResources []GroupResource `json:"disabledResources,omitempty"`
}

// GroupResource names a resource.
type GroupResource struct {
	// Group of the resource; empty for the core group.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	Group string `json:"group"`

	// Resource is the plural, lower-case resource name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9]*$`
	Resource string `json:"resource"`
}

// KeyAlgorithm is the algorithm of generated keys.
// +kubebuilder:validation:Enum=ECDSAP256;RSA2048;RSA3072;RSA4096
type KeyAlgorithm string

// MaintenanceSpec are the weekly windows of operator-initiated disruptive
// work.
type MaintenanceSpec struct {
	// TimeZone of the windows, an IANA name such as Europe/Berlin; the
	// windows follow its daylight saving time. Defaults to UTC.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:default=UTC
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
	// Windows are when the work may start. Work started in a window
	// finishes even past its end (a rotation's later phases wait for
	// rollouts, not for a window).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=14
	// +listType=atomic
	Windows []MaintenanceWindow `json:"windows"`
}

// MaintenanceWindow opens at Start on each of Days, for Duration.
type MaintenanceWindow struct {
	// Days the window opens on; empty: every day.
	// +kubebuilder:validation:MaxItems=7
	// +listType=set
	// +optional
	Days []Weekday `json:"days,omitempty"`
	// Start is the local time the window opens, HH:MM on a 24-hour clock.
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	Start string `json:"start"`
	// Duration is how long the window stays open: at least 30 minutes, at
	// most a day.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('30m') && duration(self) <= duration('24h')",message="duration must be between 30m and 24h"
	Duration metav1.Duration `json:"duration"`
}

// Weekday is a day of the week, in English.
// +kubebuilder:validation:Enum=Monday;Tuesday;Wednesday;Thursday;Friday;Saturday;Sunday
type Weekday string

// DeletionPolicy says what deleting an ApiServerConfig does to the
// tenant's data and to every key needed to read it.
// +kubebuilder:validation:Enum=Delete;Retain
type DeletionPolicy string

// The deletion policies.
const (
	// DeletionPolicyDelete removes the tenant's data from etcd, proves that
	// none is left, then its keys.
	DeletionPolicyDelete DeletionPolicy = "Delete"
	// DeletionPolicyRetain keeps the data and every key that reads it.
	DeletionPolicyRetain DeletionPolicy = "Retain"
)

// PKIRetention says what happens to the CA Secrets when the
// ApiServerConfig is deleted.
// +kubebuilder:validation:Enum=Delete;Retain
type PKIRetention string

// AdminKubeconfigSecretMode says whether the operator publishes the admin
// kubeconfig in a Secret.
// +kubebuilder:validation:Enum=Enabled;Disabled
type AdminKubeconfigSecretMode string

// The admin kubeconfig Secret modes.
const (
	// AdminKubeconfigSecretEnabled: the Secret <name>-admin-kubeconfig
	// holds a system:masters kubeconfig, renewed as its lifetime runs out.
	AdminKubeconfigSecretEnabled AdminKubeconfigSecretMode = "Enabled"
	// AdminKubeconfigSecretDisabled: no such Secret (one that exists is
	// deleted); admin credentials come only from AdminCredentialRequests.
	AdminKubeconfigSecretDisabled AdminKubeconfigSecretMode = "Disabled"
)

// AdminCredentialsSpec configures the admin kubeconfig.
type AdminCredentialsSpec struct {
	// Lifetime of the admin kubeconfig's client certificate, renewed after
	// certificates.renewalPercent of it: whoever copied the kubeconfig
	// out of its Secret holds a credential that works for this long at
	// most. Nothing but a CA revocation (the revoke-ca annotation) ends it
	// before then.
	// +kubebuilder:default="8h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10m')",message="must be at least 10m"
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('8760h')",message="must be at most 8760h (a year)"
	// +optional
	Lifetime *metav1.Duration `json:"lifetime,omitempty"`

	// KubeconfigSecret is Enabled to publish the admin kubeconfig in the
	// Secret <name>-admin-kubeconfig (status.adminKubeconfigSecretName),
	// Disabled to publish none: the operator keeps its own credential in
	// memory, and people and tools ask for theirs with an
	// AdminCredentialRequest.
	// +kubebuilder:default=Enabled
	// +optional
	KubeconfigSecret AdminKubeconfigSecretMode `json:"kubeconfigSecret,omitempty"`
}

// CertificatesSpec configures the generated PKI.
// +kubebuilder:validation:XValidation:rule="!has(self.validity) || !has(self.caValidity) || duration(self.validity) < duration(self.caValidity)",fieldPath=".validity",message="validity must be shorter than caValidity"
type CertificatesSpec struct {
	// Validity of leaf certificates (serving, the apiservers' clients), at
	// most a year: nothing but a CA revocation (the revoke-ca annotation)
	// ends one before then. The admin kubeconfig's lives
	// adminCredentials.lifetime.
	// +kubebuilder:default="8760h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1h')",message="must be at least 1h"
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('8760h')",message="must be at most 8760h (a year): nothing but a CA revocation (the revoke-ca annotation) ends a certificate before it expires"
	// +optional
	Validity *metav1.Duration `json:"validity,omitempty"`

	// CAValidity of the generated certificate authorities, at most ten
	// years.
	// +kubebuilder:default="87600h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('24h')",message="must be at least 24h"
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('87600h')",message="must be at most 87600h (ten years)"
	// +optional
	CAValidity *metav1.Duration `json:"caValidity,omitempty"`

	// RenewalPercent is the share of a certificate's validity after which it
	// is renewed.
	// +kubebuilder:default=80
	// +kubebuilder:validation:Minimum=50
	// +kubebuilder:validation:Maximum=95
	// +optional
	RenewalPercent int32 `json:"renewalPercent,omitempty"`

	// KeyAlgorithm of generated keys.
	// +kubebuilder:default=ECDSAP256
	// +optional
	KeyAlgorithm KeyAlgorithm `json:"keyAlgorithm,omitempty"`

	// CASecretName names a kubernetes.io/tls Secret with a CA certificate and
	// key to sign with, instead of a generated CA.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	CASecretName string `json:"caSecretName,omitempty"`

	// ServiceAccountKeyRotationPeriod is the age at which the
	// service-account signing key is replaced, in phases that keep every
	// token valid (see rotationOverlap). Unset: the key is rotated only on
	// request, by setting the annotation
	// controlplane.apiserver-operator.dev/rotate-service-account-key to a new
	// value.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('24h')",message="must be at least 24h"
	// +optional
	ServiceAccountKeyRotationPeriod *metav1.Duration `json:"serviceAccountKeyRotationPeriod,omitempty"`

	// RotationOverlap is how long a retired service-account key stays
	// trusted after its successor took over everywhere, for tokens handed
	// out of the cluster to be replaced; the maximum token lifetime applies
	// when it is longer, and with spec.konnectivity the agents' token
	// lifetime (1h). A retired CA stays trusted until it expires, unless
	// the rotation was asked for with the revoke-ca annotation.
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +optional
	RotationOverlap *metav1.Duration `json:"rotationOverlap,omitempty"`

	// PKIRetention is spec.deletionPolicy's former name, which decides
	// when deletionPolicy is unset: Retain keeps the data and the keys
	// that read it (the CA Secrets, the service-account key, the
	// encryption key), Delete removes the data with them.
	// +kubebuilder:default=Delete
	// +optional
	PKIRetention PKIRetention `json:"pkiRetention,omitempty"`
}

// ExtraArg is one kube-apiserver flag, without its leading dashes.
// +kubebuilder:validation:XValidation:rule="!(self.name in ['insecure-port', 'insecure-bind-address', 'port', 'address', 'target-ram-mb', 'deserialization-cache-size', 'default-watch-cache-size', 'kubelet-https', 'enable-swagger-ui'])",fieldPath=".name",messageExpression="'--' + self.name + ' was removed from kube-apiserver or has no effect in the versions the operator runs: remove it'"
// +kubebuilder:validation:XValidation:rule="self.name != 'apiserver-count'",fieldPath=".name",message="--apiserver-count is managed by the operator: it follows spec.masterCount when endpointReconcilerType is master-count"
// +kubebuilder:validation:XValidation:rule="!(self.name in ['token-auth-file', 'basic-auth-file'])",fieldPath=".name",message="static token files are insecure (CIS 1.2.2) and not supported"
type ExtraArg struct {
	// Name of the flag, such as goaway-chance (no leading --).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9-]*$`
	Name string `json:"name"`

	// Value of the flag; empty for a boolean flag that is set to true.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Value string `json:"value,omitempty"`
}

// ApiServerConfigStatus is the observed state of an ApiServerConfig.
type ApiServerConfigStatus struct {
	// ObservedGeneration is the generation the conditions describe. It is
	// 0 until the operator first looked at the object, so that GitOps tools
	// (kstatus) read a new object as in progress, not as healthy; Ready says
	// whether that generation is in place.
	// +kubebuilder:default=0
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, Reconciling and Stalled (read by GitOps tools),
	// CertificatesReady, EtcdAvailable, Available, Progressing, Degraded,
	// Encrypted, and KonnectivityAgentsConnected with spec.konnectivity.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Replicas is the number of apiserver pods.
	// +optional
	Replicas int32 `json:"replicas"`

	// ReadyReplicas is the number of apiserver pods that are ready.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`

	// Selector is the label selector of the apiserver pods, for the scale
	// subresource.
	// +optional
	Selector string `json:"selector,omitempty"`

	// Version is the kube-apiserver version every apiserver runs. During an
	// upgrade it stays the old version until the last apiserver of it is
	// gone; while the tenant is hibernated it is the version that ran last.
	// +optional
	Version string `json:"version,omitempty"`

	// Versions counts the apiserver pods of each kube-apiserver version,
	// oldest first: one entry, or two while an upgrade rolls.
	// +listType=map
	// +listMapKey=version
	// +optional
	Versions []VersionStatus `json:"versions,omitempty"`

	// Endpoint is the URL clients use to reach the apiservers.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// DataPrefix is the etcd prefix whose keys are this tenant's own data:
	// the operator found it empty, or holding what this tenant kept with
	// deletionPolicy Retain and can decrypt, before the tenant's first
	// apiserver started on it. A tenant never starts on a prefix that holds
	// keys it did not write (reason ForeignData).
	// +optional
	DataPrefix string `json:"dataPrefix,omitempty"`

	// DataServers are the etcd servers (host:port) that hold the data under
	// dataPrefix, as the operator checked them. A spec that moves to other
	// servers moves the data: the servers it adds are checked as a new
	// prefix is, and the tenant's etcd user gets no right there before.
	// +listType=set
	// +optional
	DataServers []string `json:"dataServers,omitempty"`

	// ObjectsProven says that every Secret and the Deployment of the
	// tenant carry the operator's proof that it wrote them (the annotation
	// controlplane.apiserver-operator.dev/proof): from then on, an object
	// of one of their names without a valid proof is never taken as the
	// tenant's, whatever its labels and owner references say. Unset, the
	// objects written before the operator proved ownership (created before
	// its ownership key) are taken as before, and proven when next
	// written.
	// +optional
	ObjectsProven bool `json:"objectsProven,omitempty"`

	// RestoredFrom names the ApiServerBackup the tenant's data came from
	// (spec.restore). It is set when the restore begins: one cut short
	// (dataPrefix still empty) starts over.
	// +optional
	RestoredFrom string `json:"restoredFrom,omitempty"`

	// EtcdDatastore names the platform's etcd datastore that holds the
	// tenant's etcd servers, where it has an etcd user of its own: set once
	// the tenant is on it, it stays, so that a datastore that goes away
	// stalls the tenant instead of moving its apiservers to another
	// certificate.
	// +optional
	EtcdDatastore string `json:"etcdDatastore,omitempty"`

	// NetworkPolicy is what the tenant's NetworkPolicy allows, as the
	// operator last applied it; unset when the tenant has none.
	// +optional
	NetworkPolicy *NetworkPolicyStatus `json:"networkPolicy,omitempty"`

	// Konnectivity says how many konnectivity agents hold a tunnel to the
	// konnectivity server of each apiserver pod, as last looked at (every
	// --konnectivity-watch-interval, and during rollouts); unset without
	// spec.konnectivity. The condition KonnectivityAgentsConnected says
	// whether the tenant's nodes can be reached through them.
	// +optional
	Konnectivity *KonnectivityStatus `json:"konnectivity,omitempty"`

	// AdminKubeconfigSecretName names the Secret, key value, that holds a
	// kubeconfig with cluster-admin rights; empty with
	// adminCredentials.kubeconfigSecret Disabled.
	// +optional
	AdminKubeconfigSecretName string `json:"adminKubeconfigSecretName,omitempty"`

	// Certificates lists when each generated certificate expires and is due
	// for renewal.
	// +listType=map
	// +listMapKey=name
	// +optional
	Certificates []CertificateStatus `json:"certificates,omitempty"`

	// CacheSizing is the sizing in force and what it was derived from.
	// +optional
	CacheSizing *CacheSizingStatus `json:"cacheSizing,omitempty"`

	// Rotations reports the phase of each CA and key rotation: Stable, or
	// TrustNew, SignWithNew and PruneOld while one is under way.
	// +listType=map
	// +listMapKey=name
	// +optional
	Rotations []RotationStatus `json:"rotations,omitempty"`

	// Maintenance says what disruptive work waits for a maintenance
	// window (spec.maintenance), and when the next one opens.
	// +optional
	Maintenance *MaintenanceStatus `json:"maintenance,omitempty"`
}

// VersionStatus is how many apiservers run one kube-apiserver version.
type VersionStatus struct {
	// Version is the kube-apiserver version.
	Version string `json:"version"`
	// Replicas counts its pods, those shutting down included.
	Replicas int32 `json:"replicas"`
	// ReadyReplicas counts those of them that are ready.
	ReadyReplicas int32 `json:"readyReplicas"`
}

// MaintenanceStatus is the operator-initiated work that waits for a
// maintenance window.
type MaintenanceStatus struct {
	// NextWindow is when the next window opens; while one is open, when it
	// opened.
	// +optional
	NextWindow *metav1.Time `json:"nextWindow,omitempty"`
	// Open is true while a window is open.
	// +optional
	Open bool `json:"open,omitempty"`
	// Pending lists the work that waits for the next window.
	// +listType=atomic
	// +optional
	Pending []string `json:"pending,omitempty"`
}

// RotationStatus is the phase of the rotation of one CA or key.
type RotationStatus struct {
	// Name is ca, service-account-key or encryption-key.
	Name string `json:"name"`
	// Phase is Stable, TrustNew, SignWithNew or PruneOld. For the
	// encryption key: TrustNew decrypts with the new key, SignWithNew
	// encrypts with it and re-encrypts what the old key encrypted.
	Phase string `json:"phase"`
	// Since is when the phase began.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// Message says what the phase waits for, such as the progress of a
	// re-encryption.
	// +optional
	Message string `json:"message,omitempty"`
}

// CertificateStatus reports one certificate.
type CertificateStatus struct {
	// Name of the certificate, such as serving or ca.
	Name string `json:"name"`
	// NotAfter is when the certificate expires.
	NotAfter metav1.Time `json:"notAfter"`
	// RenewAfter is when the operator renews it.
	// +optional
	RenewAfter *metav1.Time `json:"renewAfter,omitempty"`
}

// CacheSizingStatus reports the sizing in force and, under Auto, what the
// operator observed and decided.
type CacheSizingStatus struct {
	// TargetRAMMB is the memory the sizing was computed for.
	TargetRAMMB int64 `json:"targetRAMMB"`
	// CapacityNodes is the number of nodes TargetRAMMB carries.
	CapacityNodes int64 `json:"capacityNodes"`
	// EstimatedClusterSize is the number of nodes the limits are set for.
	EstimatedClusterSize int64 `json:"estimatedClusterSize"`
	// MaxInflight is the --max-requests-inflight in force.
	MaxInflight int64 `json:"maxInflight"`
	// MaxMutatingInflight is the --max-mutating-requests-inflight in force.
	MaxMutatingInflight int64 `json:"maxMutatingInflight"`
	// GoMemLimitBytes is the GOMEMLIMIT of the container; 0 for none.
	// +optional
	GoMemLimitBytes int64 `json:"goMemLimitBytes,omitempty"`
	// OverCapacity is true when the observed cluster is larger than the
	// memory budget carries: raise the memory limit.
	// +optional
	OverCapacity bool `json:"overCapacity,omitempty"`
	// ObservedNodes and ObservedPods are the counts last read from etcd
	// (Auto), at ObservationTime.
	// +optional
	ObservedNodes *int64 `json:"observedNodes,omitempty"`
	// +optional
	ObservedPods *int64 `json:"observedPods,omitempty"`
	// +optional
	ObservationTime *metav1.Time `json:"observationTime,omitempty"`
	// SizedForNodes and SizedForPods are the counts the sizing in force was
	// computed from; they change only when an observation moves far
	// enough, and not more often than the minimum interval.
	// +optional
	SizedForNodes *int64 `json:"sizedForNodes,omitempty"`
	// +optional
	SizedForPods *int64 `json:"sizedForPods,omitempty"`
	// LastResizeTime is when the sizing last changed.
	// +optional
	LastResizeTime *metav1.Time `json:"lastResizeTime,omitempty"`
}

// ApiServerConfig is a kube-apiserver deployment that the operator runs,
// secures and keeps sized: its PKI, its etcd wiring, its replicas and its
// caches.
//
// +kubebuilder:object:root=true
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 52 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label of at most 52 characters starting with a letter: it names the Service (<name>-apiserver) and labels the pods"
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.masterCount,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=asc,categories=controlplane
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.replicas`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`
// +kubebuilder:printcolumn:name="Paused",type=string,JSONPath=`.status.conditions[?(@.type=="Paused")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ApiServerConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ApiServerConfigSpec `json:"spec"`

	// Status is the observed state of the ApiServerConfig. It is defaulted,
	// so that observedGeneration reads 0 until the operator's first status.
	// +kubebuilder:default={}
	// +optional
	Status ApiServerConfigStatus `json:"status,omitempty"`
}

// ApiServerConfigList is a list of ApiServerConfig.
//
// +kubebuilder:object:root=true
type ApiServerConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ApiServerConfig `json:"items"`
}

// KonnectivityStatus is what the konnectivity servers of a tenant's
// apiserver pods hold.
type KonnectivityStatus struct {
	// Servers are the konnectivity servers of the apiserver pods that run,
	// by pod name.
	// +listType=map
	// +listMapKey=pod
	// +optional
	Servers []KonnectivityServerStatus `json:"servers,omitempty"`
}

// KonnectivityServerStatus is one apiserver pod's konnectivity server.
type KonnectivityServerStatus struct {
	// Pod is the apiserver pod's name.
	Pod string `json:"pod"`
	// Agents is the number of agents that hold a tunnel to the server (its
	// konnectivity_network_proxy_server_ready_backends); unset when the
	// server could not be looked at.
	// +optional
	Agents *int32 `json:"agents,omitempty"`
	// Ready: the pod takes requests. A pod that is not ready yet may be
	// waiting for an agent's tunnel (its readiness gate).
	Ready bool `json:"ready"`
}

// NetworkPolicyStatus says what a tenant's NetworkPolicy lets through.
type NetworkPolicyStatus struct {
	// Name is the NetworkPolicy's, in the tenant's namespace.
	Name string `json:"name"`
	// Ingress says who may reach the apiservers, and on which port.
	Ingress string `json:"ingress"`
	// Egress lists what the apiservers may call: each etcd server allowed
	// by address ("etcd 10.0.0.5:2379"), "DNS", and each rule of
	// spec.networkPolicy.egress ("spec.networkPolicy.egress[0]").
	// +listType=atomic
	Egress []string `json:"egress"`
}
