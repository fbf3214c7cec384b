package localcluster

import (
	"path/filepath"
	"strconv"
	"strings"
)

// component is one process of the cluster, run in the node's network
// namespace.
type component struct {
	name   string
	binary string
	args   []string
}

// Names of the components, also the names of their logs and PID files.
const (
	compEtcd             = "etcd"
	compTenantEtcdMain   = "etcd-tenant-main"
	compTenantEtcdEvents = "etcd-tenant-events"
	compS3               = "s3"
	compAPIServer        = "kube-apiserver"
	compControllerMgr    = "kube-controller-manager"
	compScheduler        = "kube-scheduler"
	compContainerd       = "containerd"
	compKubelet          = "kubelet"
	compKubeProxy        = "kube-proxy"
)

// stopOrder stops the node before the control plane, and etcd last.
var stopOrder = []string{
	compMetricsServer, compKubeProxy, compKubelet, compContainerd, compScheduler, compControllerMgr,
	compAPIServer, compS3, compTenantEtcdEvents, compTenantEtcdMain, compEtcd,
}

// Names of the certificates and keys in the pki directory.
const (
	clusterCA            = "ca"
	frontProxyCA         = "front-proxy-ca"
	frontProxyClient     = "front-proxy-client"
	etcdCA               = "etcd-ca"
	apiserverServing     = "kube-apiserver"
	apiserverKubelet     = "kube-apiserver-kubelet-client"
	kubeletServing       = "kubelet-serving"
	serviceAccountKey    = "sa"
	etcdTenantMainServer = "etcd-tenant-main"
	etcdTenantEvents     = "etcd-tenant-events"
	etcdTenantClient     = "etcd-tenant-client"
)

func (l layout) bin(name string) string { return filepath.Join(l.BinDir, name) }

func (l layout) clusterEtcd() component {
	return component{name: compEtcd, binary: l.bin("etcd"), args: []string{
		"--name=" + NodeName,
		"--data-dir=" + filepath.Join(l.dataDir(), compEtcd),
		"--listen-client-urls=http://127.0.0.1:2379",
		"--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380",
		"--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=" + NodeName + "=http://127.0.0.1:2380",
		"--listen-metrics-urls=",
		// A throwaway cluster: losing the last writes on a crash is fine,
		// waiting for the disk on a shared machine is not.
		"--unsafe-no-fsync",
		"--log-level=warn",
	}}
}

// tenantEtcd is an etcd for tenants' kube-apiservers, served over TLS on the
// node's address with client certificate authentication; its peer port is
// only on the namespace's loopback.
func (l layout) tenantEtcdComponent(name, cert string, clientPort int) component {
	client := "https://" + l.NodeIP + ":" + strconv.Itoa(clientPort)
	peer := "http://127.0.0.1:" + strconv.Itoa(clientPort+1)
	return component{name: name, binary: l.bin("etcd"), args: []string{
		"--name=" + name,
		"--data-dir=" + filepath.Join(l.dataDir(), name),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=" + name + "=" + peer,
		"--listen-metrics-urls=",
		"--cert-file=" + l.pki.CertFile(cert),
		"--key-file=" + l.pki.KeyFile(cert),
		"--client-cert-auth",
		"--trusted-ca-file=" + l.pki.CertFile(etcdCA),
		"--unsafe-no-fsync",
		"--log-level=warn",
	}}
}

// s3 is an S3-compatible server (versitygw, its posix backend on a
// directory of the cluster's) on the node's address, where tenants keep
// their backups: plain HTTP, static credentials (S3AccessKeyID).
func (l layout) s3() component {
	return component{name: compS3, binary: l.bin("versitygw"), args: []string{
		"--access", S3AccessKeyID, "--secret", S3SecretAccessKey,
		"--port", l.NodeIP + ":" + strconv.Itoa(s3Port),
		"--quiet",
		"posix", l.s3Dir(),
	}}
}

func (l layout) s3Dir() string { return filepath.Join(l.dataDir(), compS3) }

func (l layout) apiserver() component {
	return component{name: compAPIServer, binary: l.bin("kube-apiserver"), args: []string{
		"--advertise-address=" + l.NodeIP,
		"--bind-address=0.0.0.0",
		"--secure-port=" + strconv.Itoa(apiserverPort),
		"--etcd-servers=http://127.0.0.1:2379",
		"--tls-cert-file=" + l.pki.CertFile(apiserverServing),
		"--tls-private-key-file=" + l.pki.KeyFile(apiserverServing),
		"--client-ca-file=" + l.pki.CertFile(clusterCA),
		"--kubelet-client-certificate=" + l.pki.CertFile(apiserverKubelet),
		"--kubelet-client-key=" + l.pki.KeyFile(apiserverKubelet),
		"--kubelet-certificate-authority=" + l.pki.CertFile(clusterCA),
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + l.pki.KeyFile(serviceAccountKey),
		"--service-account-signing-key-file=" + l.pki.KeyFile(serviceAccountKey),
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--authorization-mode=Node,RBAC",
		// The aggregation layer, as kubeadm sets it up; controllers also
		// read the request header CA to authenticate their clients.
		"--requestheader-client-ca-file=" + l.pki.CertFile(frontProxyCA),
		"--requestheader-allowed-names=" + frontProxyClient,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + l.pki.CertFile(frontProxyClient),
		"--proxy-client-key-file=" + l.pki.KeyFile(frontProxyClient),
		"--allow-privileged=true",
		"--cert-dir=" + filepath.Join(l.runDir(), compAPIServer),
		"--profiling=false",
	}}
}

func (l layout) controllerManager() component {
	kc := l.kubeconfig(compControllerMgr)
	return component{name: compControllerMgr, binary: l.bin(compControllerMgr), args: []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + l.pki.KeyFile(serviceAccountKey),
		"--root-ca-file=" + l.pki.CertFile(clusterCA),
		"--cluster-signing-cert-file=" + l.pki.CertFile(clusterCA),
		"--cluster-signing-key-file=" + l.pki.KeyFile(clusterCA),
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--cluster-name=" + NodeName,
		// Autoscalers act within seconds of metrics-server's scrape.
		"--horizontal-pod-autoscaler-sync-period=5s",
		"--profiling=false",
	}}
}

func (l layout) scheduler() component {
	kc := l.kubeconfig(compScheduler)
	return component{name: compScheduler, binary: l.bin(compScheduler), args: []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		"--leader-elect=false",
		"--profiling=false",
	}}
}

func (l layout) containerd() component {
	return component{name: compContainerd, binary: l.bin("containerd"), args: []string{
		"--config=" + filepath.Join(l.configDir(), "containerd.toml"),
	}}
}

func (l layout) kubelet() component {
	return component{name: compKubelet, binary: l.bin(compKubelet), args: []string{
		"--config=" + filepath.Join(l.configDir(), "kubelet.yaml"),
		"--kubeconfig=" + l.kubeconfig(compKubelet),
		"--root-dir=" + filepath.Join(l.dataDir(), compKubelet),
		"--hostname-override=" + l.nodeName,
		"--node-ip=" + l.NodeIP,
	}}
}

func (l layout) kubeProxy() component {
	return component{name: compKubeProxy, binary: l.bin(compKubeProxy), args: []string{
		"--config=" + filepath.Join(l.configDir(), "kube-proxy.yaml"),
	}}
}

// commandLine is how a component shows in its log, for people reading it.
func (c component) commandLine() string {
	return c.binary + " " + strings.Join(c.args, " ")
}
