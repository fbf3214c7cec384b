package apiserver

// Where things live inside the kube-apiserver container. The flags refer to
// these paths and the Deployment mounts the Secrets and ConfigMaps there, so
// both are built from these constants.
const (
	// PKIDir holds the certificates the operator generates.
	PKIDir = "/etc/kubernetes/pki"
	// CAFile is the client CA bundle (old and new CAs during a rotation).
	CAFile = PKIDir + "/ca.crt"
	// ServingCertFile and ServingKeyFile are the serving certificate.
	ServingCertFile = PKIDir + "/apiserver.crt"
	ServingKeyFile  = PKIDir + "/apiserver.key"
	// KubeletClientCertFile and KubeletClientKeyFile authenticate the
	// apiserver to kubelets.
	KubeletClientCertFile = PKIDir + "/apiserver-kubelet-client.crt"
	KubeletClientKeyFile  = PKIDir + "/apiserver-kubelet-client.key"
	// FrontProxyCAFile, FrontProxyClientCertFile and FrontProxyClientKeyFile
	// serve the aggregation layer.
	FrontProxyCAFile         = PKIDir + "/front-proxy-ca.crt"
	FrontProxyClientCertFile = PKIDir + "/front-proxy-client.crt"
	FrontProxyClientKeyFile  = PKIDir + "/front-proxy-client.key"
	// ServiceAccountKeyFile holds the public keys that verify tokens (the
	// old one too during a rotation); ServiceAccountSigningKeyFile the
	// private key that signs them.
	ServiceAccountKeyFile        = PKIDir + "/sa.pub"
	ServiceAccountSigningKeyFile = PKIDir + "/sa.key"

	// EtcdDir holds the etcd client credentials from the user's Secret.
	EtcdDir          = "/etc/kubernetes/pki/etcd"
	EtcdCAFile       = EtcdDir + "/ca.crt"
	EtcdCertFile     = EtcdDir + "/client.crt"
	EtcdKeyFile      = EtcdDir + "/client.key"
	etcdCAFileName   = "ca.crt"
	etcdCertFileName = "client.crt"
	etcdKeyFileName  = "client.key"

	// ConfigDir holds the configuration files the operator renders.
	ConfigDir = "/etc/kubernetes/config"
	// AuthenticationConfigFile is the AuthenticationConfiguration
	// (anonymous access and OIDC issuers).
	AuthenticationConfigFile = ConfigDir + "/authentication-config.yaml"
	// AuditPolicyFile is the audit policy.
	AuditPolicyFile = ConfigDir + "/audit-policy.yaml"
	// AdmissionConfigFile is the AdmissionConfiguration: the
	// configuration of the admission plugins that need one.
	AdmissionConfigFile = ConfigDir + "/admission-config.yaml"
	// EgressSelectorConfigFile sends kube-apiserver's etcd connections
	// through the pod's etcd dialer (EgressSelectorConfig).
	EgressSelectorConfigFile = ConfigDir + "/egress-selector.yaml"
	// OIDCCAFile is the CA of the OIDC issuer, when given.
	OIDCCAFile = "/etc/kubernetes/oidc/ca.crt"

	// EncryptionConfigFile is the EncryptionConfiguration.
	EncryptionConfigFile = "/etc/kubernetes/encryption/encryption-config.yaml"
	// AuthorizationWebhookKubeconfigFile tells how to reach the
	// authorization webhook.
	AuthorizationWebhookKubeconfigFile = "/etc/kubernetes/authz-webhook/kubeconfig"
	// AuthorizationDir holds the AuthorizationConfiguration of
	// spec.authorization.authorizers and the kubeconfigs of its webhooks,
	// from one Secret, which kubelet updates all at once.
	AuthorizationDir = "/etc/kubernetes/authorization"
	// AuthorizationConfigFile is the AuthorizationConfiguration.
	AuthorizationConfigFile = AuthorizationDir + "/" + AuthorizationConfigKey
	// AuthorizationKubeconfigDir is where the configuration names the
	// webhooks' kubeconfigs: kubelet's ..data, the directory of the
	// volume's current content. kubelet makes the file of a key new to
	// the Secret only after it points ..data at the new content, and
	// kube-apiserver does not read again a configuration whose kubeconfig
	// it could not open: read in that moment, the configuration would
	// stay refused. Through ..data a kubeconfig is there as soon as the
	// configuration that names it.
	AuthorizationKubeconfigDir = AuthorizationDir + "/..data"
	// AuditWebhookKubeconfigFile tells how to reach the audit webhook.
	AuditWebhookKubeconfigFile = "/etc/kubernetes/audit-webhook/kubeconfig"

	// EtcdDialerDir is an emptyDir shared by kube-apiserver and the etcd
	// dialer sidecar; EtcdDialerSocket is the dialer's socket in it.
	EtcdDialerDir    = "/run/etcd-dialer"
	EtcdDialerSocket = EtcdDialerDir + "/etcd.sock"
	// EgressFilterSocket is the socket of the sidecar's egress filter, in
	// the same directory: kube-apiserver's "controlplane" egress, and its
	// "cluster" egress without the network proxy, go through it
	// (EgressSelectorConfig).
	EgressFilterSocket = EtcdDialerDir + "/egress.sock"
	// EgressClusterSocket is the filter's socket of the "cluster" egress
	// without the network proxy: a socket, and connections, of its own,
	// so that long exec and log streams never take the controlplane's.
	EgressClusterSocket = EtcdDialerDir + "/egress-cluster.sock"

	// AuditLogDir and AuditLogFile are where the audit log is written.
	AuditLogDir  = "/var/log/kubernetes/audit"
	AuditLogFile = AuditLogDir + "/audit.log"
)

// EgressHostIPsEnv and EgressPodIPsEnv hold the addresses of the pod's node
// and of the pod (status.hostIPs, status.podIPs) in the dialer sidecar,
// whose egress filter refuses them: etcddialer.HostIPsEnv and PodIPsEnv,
// repeated (the root does not import the daemon).
const (
	EgressHostIPsEnv = "HOST_IPS"
	EgressPodIPsEnv  = "POD_IPS"
)

// PodIPEnv is the environment variable that holds the pod's IP (from the
// downward API); --advertise-address refers to it as $(POD_IP).
const PodIPEnv = "POD_IP"
