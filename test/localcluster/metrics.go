package localcluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// metrics-server serves the resource metrics API (metrics.k8s.io) that
// `kubectl top` and HorizontalPodAutoscalers read. It runs as a process of
// the node like the rest of the cluster, behind a Service without selector
// whose EndpointSlice names the node's address; the aggregation layer
// reaches it through that Service, as it would reach the usual pod.
const (
	compMetricsServer = "metrics-server"
	metricsServerPort = 4443
	// metricsServerCert is its serving certificate, valid for the Service's
	// name, which is the name the aggregation layer checks.
	metricsServerCert = "metrics-server"
	metricsServerUser = "system:metrics-server"
	// metricsResolution is how often it scrapes the kubelet: the lowest it
	// takes, so that an autoscaler sees load within seconds.
	metricsResolution = "10s"
)

func (l layout) metricsServer() component {
	kc := l.kubeconfig(compMetricsServer)
	return component{name: compMetricsServer, binary: l.bin("metrics-server"), args: []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=" + l.NodeIP,
		"--secure-port=" + strconv.Itoa(metricsServerPort),
		"--tls-cert-file=" + l.pki.CertFile(metricsServerCert),
		"--tls-private-key-file=" + l.pki.KeyFile(metricsServerCert),
		"--kubelet-certificate-authority=" + l.pki.CertFile(clusterCA),
		"--kubelet-preferred-address-types=InternalIP",
		"--metric-resolution=" + metricsResolution,
		// Shorter than the resolution, as metrics-server requires.
		"--kubelet-request-timeout=5s",
		"--profiling=false",
	}}
}

// metricsServerObjects are what the cluster needs for metrics-server: its
// rights (read nodes' metrics and pods, delegate authentication and
// authorization), the Service without selector and its EndpointSlice, and
// the APIService that trusts the cluster CA for it.
const metricsServerObjects = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:metrics-server
rules:
- apiGroups: [""]
  resources: [nodes/metrics]
  verbs: [get]
- apiGroups: [""]
  resources: [pods, nodes]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:metrics-server
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:metrics-server}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: ${USER}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: metrics-server:system:auth-delegator
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:auth-delegator}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: ${USER}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: metrics-server-auth-reader
  namespace: kube-system
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: extension-apiserver-authentication-reader}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: ${USER}}
---
apiVersion: v1
kind: Service
metadata:
  name: metrics-server
  namespace: kube-system
spec:
  ports:
  - {name: https, port: 443, targetPort: ${PORT}, protocol: TCP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: metrics-server
  namespace: kube-system
  labels:
    kubernetes.io/service-name: metrics-server
    endpointslice.kubernetes.io/managed-by: localcluster
addressType: IPv4
endpoints:
- addresses: ["${NODE_IP}"]
  conditions: {ready: true}
ports:
- {name: https, port: ${PORT}, protocol: TCP}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1beta1.metrics.k8s.io
spec:
  group: metrics.k8s.io
  version: v1beta1
  service: {name: metrics-server, namespace: kube-system, port: 443}
  caBundle: ${CA_BUNDLE}
  groupPriorityMinimum: 100
  versionPriority: 100
`

// applyMetricsServerObjects applies metricsServerObjects.
func (l layout) applyMetricsServerObjects(ctx context.Context) error {
	ca, err := os.ReadFile(l.pki.CertFile(clusterCA))
	if err != nil {
		return fmt.Errorf("reading the cluster CA for metrics-server's APIService: %w", err)
	}
	manifest := strings.NewReplacer(
		"${USER}", metricsServerUser,
		"${PORT}", strconv.Itoa(metricsServerPort),
		"${NODE_IP}", l.NodeIP,
		"${CA_BUNDLE}", base64.StdEncoding.EncodeToString(ca),
	).Replace(metricsServerObjects)
	return l.applyManifest(ctx, "metrics-server's Service, APIService and rights", manifest)
}

// applyManifest applies manifest, which holds what, with kubectl
// (server-side, so a second Up changes nothing).
func (l layout) applyManifest(ctx context.Context, what, manifest string) error {
	cmd := exec.CommandContext(ctx, l.bin("kubectl"), "--kubeconfig", l.kubeconfig("admin"),
		"apply", "--server-side", "--field-manager=localcluster", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("applying %s: %w: %s", what, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// metricsAPIReady: the aggregation layer serves metrics.k8s.io through
// metrics-server (its first metrics follow two scrapes later).
func (l layout) metricsAPIReady(ctx context.Context) error {
	return l.adminGetOK(ctx, "/apis/metrics.k8s.io/v1beta1")
}
