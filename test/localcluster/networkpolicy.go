package localcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// NetworkPolicy is enforced by SIG Network's kube-network-policies, built
// from its module at a pinned version (hack/localcluster.mk). It runs as a
// DaemonSet pod, as upstream's install.yaml deploys it, with upstream's own
// main: that main only takes in-cluster credentials (rest.InClusterConfig),
// which a pod has and a process of the node does not.
//
// It decides in user space, on the first packet of each connection, which
// netfilter queues to it. Upstream queues these packets with nftables' queue
// expression, which some kernels are built without (CONFIG_NFT_QUEUE unset,
// as in the 6.18 kernel this was written on): there it cannot create its
// table, and logs "syncing nftables rules" errors that do no harm. So the
// cluster queues the packets itself, with iptables' NFQUEUE target in the
// node's namespace: the packets of upstream's postrouting chain (routed or
// bridged, before source NAT, of new connections, not sent by the node's
// root processes), for the whole pod range instead of the pods that
// policies select, with bypass so that pods keep their network while the
// controller is not listening. Where the kernel has the queue expression,
// upstream's chain queues the same packets a second time, for the same
// verdict.
const (
	networkPolicyName = "kube-network-policies"
	// networkPolicyImage is written to networkPolicyImageTarball by `make
	// localcluster-binaries` (KUBE_NETWORK_POLICIES_IMAGE in
	// hack/localcluster.mk, which pins the version).
	networkPolicyImage        = "localhost/apiserver-operator/kube-network-policies:local"
	networkPolicyImageTarball = "kube-network-policies.tar"
	// networkPolicyQueue is the netfilter queue, upstream install.yaml's.
	networkPolicyQueue = 98
	// networkPolicyChain is the cluster's chain of the node's mangle
	// table, run from POSTROUTING: before the nat table's source NAT, so
	// that the controller sees pods' own addresses.
	networkPolicyChain = "LOCALCLUSTER-NETWORK-POLICY"
	// networkPolicyMetrics is where it serves metrics: only on the node's
	// loopback, where nothing else listens on that port.
	networkPolicyMetrics = "127.0.0.1:9080"
)

// networkPolicyQueueRules is the cluster's chain, for iptables-restore
// --noflush, which replaces the chain's rules at once.
func networkPolicyQueueRules() string {
	queue := "-j NFQUEUE --queue-num " + strconv.Itoa(networkPolicyQueue) + " --queue-bypass"
	return strings.Join([]string{
		"*mangle",
		":" + networkPolicyChain + " - [0:0]",
		"-A " + networkPolicyChain + " -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN",
		// Kubelet's probes and the control plane's calls to webhooks:
		// traffic from the node is always allowed.
		"-A " + networkPolicyChain + " -m owner --uid-owner 0 -j RETURN",
		"-A " + networkPolicyChain + " -s " + PodCIDR + " " + queue,
		"-A " + networkPolicyChain + " -d " + PodCIDR + " " + queue,
		"COMMIT",
		"",
	}, "\n")
}

// ensureNetworkPolicyQueue writes the cluster's chain into the node's
// namespace and runs it from POSTROUTING.
func (l layout) ensureNetworkPolicyQueue(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "nsenter", "--net="+l.netnsPath(), "--", "iptables-restore", "--noflush")
	cmd.Stdin = strings.NewReader(networkPolicyQueueRules())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("writing the iptables chain %s that queues pods' packets for kube-network-policies: %w: %s", networkPolicyChain, err, strings.TrimSpace(string(out)))
	}
	jump := func(op string) []string { return []string{"-t", "mangle", op, "POSTROUTING", "-j", networkPolicyChain} }
	if l.inNetns(ctx, "iptables", jump("-C")...) == nil {
		return nil
	}
	if err := l.inNetns(ctx, "iptables", jump("-A")...); err != nil {
		return fmt.Errorf("running the iptables chain %s from POSTROUTING: %w", networkPolicyChain, err)
	}
	return nil
}

// networkPolicyObjects are upstream install.yaml's, with these changes: the
// image is the local one; it reaches the apiserver at the node's address
// rather than through the kubernetes Service, so that it does not wait for
// kube-proxy's rules; it has NET_ADMIN rather than all privileges, and a
// small CPU request on this two-core node. It gets no NRI socket: the
// cluster's containerd runs without NRI. --disable-nri says so too, though
// v0.8.0's main parses that flag and does not apply it.
const networkPolicyObjects = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: ${NAME}
rules:
- apiGroups: [""]
  resources: [pods, namespaces]
  verbs: [list, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: ${NAME}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: ${NAME}}
subjects:
- {kind: ServiceAccount, name: ${NAME}, namespace: kube-system}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: ${NAME}
  namespace: kube-system
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: ${NAME}
  namespace: kube-system
  labels: {app: ${NAME}}
spec:
  selector:
    matchLabels: {app: ${NAME}}
  template:
    metadata:
      labels: {app: ${NAME}}
    spec:
      hostNetwork: true
      serviceAccountName: ${NAME}
      tolerations:
      - {operator: Exists, effect: NoSchedule}
      containers:
      - name: ${NAME}
        image: ${IMAGE}
        imagePullPolicy: Never
        args:
        - --hostname-override=$(NODE_NAME)
        - --nfqueue-id=${QUEUE}
        - --metrics-bind-address=${METRICS}
        - --disable-nri
        - --netfilter-bug-1766-fix=false
        - --v=2
        env:
        - name: NODE_NAME
          valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
        - {name: KUBERNETES_SERVICE_HOST, value: "${NODE_IP}"}
        - {name: KUBERNETES_SERVICE_PORT, value: "${APISERVER_PORT}"}
        resources:
          requests: {cpu: 10m, memory: 50Mi}
        securityContext:
          capabilities: {add: [NET_ADMIN]}
`

// networkPolicyManifest renders networkPolicyObjects for the cluster.
// --netfilter-bug-1766-fix=false: the cluster's chain queues DNS like any
// other packet, and kernels since 6.12 have the fix. --v=2 logs each
// verdict, with the pods and policies it came from, in the pod's log.
func networkPolicyManifest(l layout) string {
	return strings.NewReplacer(
		"${NAME}", networkPolicyName,
		"${IMAGE}", networkPolicyImage,
		"${QUEUE}", strconv.Itoa(networkPolicyQueue),
		"${METRICS}", networkPolicyMetrics,
		"${NODE_IP}", l.NodeIP,
		"${APISERVER_PORT}", strconv.Itoa(apiserverPort),
	).Replace(networkPolicyObjects)
}

// applyNetworkPolicyObjects applies kube-network-policies' DaemonSet and
// rights.
func (l layout) applyNetworkPolicyObjects(ctx context.Context) error {
	return l.applyManifest(ctx, "kube-network-policies' DaemonSet and rights", networkPolicyManifest(l))
}

// networkPolicyReady: kube-network-policies listens on its queue in the
// node's namespace, which it does once it has read the cluster's pods,
// namespaces and policies. The queues of a namespace are listed under any
// of its processes': kubelet's.
func (l layout) networkPolicyReady(context.Context) error {
	pid, ok := l.running(l.kubelet())
	if !ok {
		return errors.New("kubelet is not running")
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/netfilter/nfnetlink_queue", pid))
	if err != nil {
		return fmt.Errorf("reading the node's netfilter queues: %w", err)
	}
	defer func() { _ = f.Close() }()
	bound, err := queueBound(f, networkPolicyQueue)
	if err != nil {
		return fmt.Errorf("reading the node's netfilter queues: %w", err)
	}
	if !bound {
		return fmt.Errorf("nothing listens on netfilter queue %d in the node's namespace: see `kubectl -n kube-system logs ds/%s`", networkPolicyQueue, networkPolicyName)
	}
	return nil
}

// queueBound reports whether a listener has bound netfilter queue num, from
// the content of /proc/net/netfilter/nfnetlink_queue: one line per bound
// queue, its number first.
func queueBound(content io.Reader, num int) (bool, error) {
	sc := bufio.NewScanner(content)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 0 && fields[0] == strconv.Itoa(num) {
			return true, nil
		}
	}
	return false, sc.Err()
}
