package localcluster

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// networkPolicyTestObjects decodes the rendered manifest.
func networkPolicyTestObjects(t *testing.T) (*appsv1.DaemonSet, *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding, *corev1.ServiceAccount) {
	t.Helper()
	manifest := networkPolicyManifest(testLayout())
	if strings.Contains(manifest, "${") {
		t.Fatalf("manifest has unreplaced variables:\n%s", manifest)
	}
	var (
		ds  appsv1.DaemonSet
		cr  rbacv1.ClusterRole
		crb rbacv1.ClusterRoleBinding
		sa  corev1.ServiceAccount
	)
	for _, doc := range strings.Split(manifest, "\n---\n") {
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("manifest document is not YAML: %v\n%s", err, doc)
		}
		into := map[string]any{"DaemonSet": &ds, "ClusterRole": &cr, "ClusterRoleBinding": &crb, "ServiceAccount": &sa}[meta.Kind]
		if into == nil {
			t.Fatalf("unexpected %q in the manifest", meta.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
			t.Fatalf("decoding the %s: %v", meta.Kind, err)
		}
	}
	return &ds, &cr, &crb, &sa
}

func TestNetworkPolicyManifest(t *testing.T) {
	ds, _, crb, sa := networkPolicyTestObjects(t)
	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork {
		t.Error("kube-network-policies must run in the node's network namespace (hostNetwork)")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != networkPolicyImage || c.ImagePullPolicy != corev1.PullNever {
		t.Errorf("image %s (pull %s), want the imported %s, never pulled", c.Image, c.ImagePullPolicy, networkPolicyImage)
	}
	for _, want := range []string{
		"--hostname-override=$(NODE_NAME)",
		"--nfqueue-id=98",
		"--metrics-bind-address=127.0.0.1:9080",
		"--disable-nri",
	} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %v lack %s", c.Args, want)
		}
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if e := env["NODE_NAME"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("NODE_NAME = %+v, want the pod's spec.nodeName", e)
	}
	if env["KUBERNETES_SERVICE_HOST"].Value != DefaultNodeIP || env["KUBERNETES_SERVICE_PORT"].Value != "6443" {
		t.Errorf("in-cluster apiserver %s:%s, want the node's address %s:6443", env["KUBERNETES_SERVICE_HOST"].Value, env["KUBERNETES_SERVICE_PORT"].Value, DefaultNodeIP)
	}
	if sc := c.SecurityContext; sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Add, "NET_ADMIN") {
		t.Errorf("security context %+v, want NET_ADMIN for nftables and nfqueue", c.SecurityContext)
	}
	if pod.ServiceAccountName != sa.Name || sa.Namespace != ds.Namespace {
		t.Errorf("pod runs as %s, ServiceAccount is %s/%s", pod.ServiceAccountName, sa.Namespace, sa.Name)
	}
	if len(crb.Subjects) != 1 || crb.Subjects[0].Name != sa.Name || crb.Subjects[0].Namespace != sa.Namespace {
		t.Errorf("ClusterRoleBinding subjects %+v, want the ServiceAccount %s/%s", crb.Subjects, sa.Namespace, sa.Name)
	}
}

// TestNetworkPolicyRights checks the reads the controller's informers make.
func TestNetworkPolicyRights(t *testing.T) {
	_, cr, _, _ := networkPolicyTestObjects(t)
	allowed := func(group, resource, verb string) bool {
		for _, r := range cr.Rules {
			if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
				return true
			}
		}
		return false
	}
	for _, tc := range []struct{ group, resource string }{
		{"", "pods"},
		{"", "namespaces"},
		{"networking.k8s.io", "networkpolicies"},
	} {
		for _, verb := range []string{"list", "watch"} {
			if !allowed(tc.group, tc.resource, verb) {
				t.Errorf("ClusterRole does not allow %s on %s.%s", verb, tc.resource, tc.group)
			}
		}
	}
}

// TestNetworkPolicyQueueRules checks that the chain queues the pods' new
// connections to the queue the controller reads, and nothing of the node's.
func TestNetworkPolicyQueueRules(t *testing.T) {
	rules := strings.Split(networkPolicyQueueRules(), "\n")
	// The queue of the controller's --nfqueue-id (TestNetworkPolicyManifest),
	// bypassed while nothing reads it.
	queue := "--queue-num 98 --queue-bypass"
	index := func(substr string) int {
		return slices.IndexFunc(rules, func(r string) bool { return strings.Contains(r, substr) })
	}
	tests := []struct {
		name string
		rule string
	}{
		{"established connections pass", "--ctstate ESTABLISHED,RELATED -j RETURN"},
		{"the node's root processes pass", "--uid-owner 0 -j RETURN"},
		{"packets from pods are queued", "-s " + PodCIDR + " -j NFQUEUE " + queue},
		{"packets to pods are queued", "-d " + PodCIDR + " -j NFQUEUE " + queue},
	}
	prev := -1
	for _, tc := range tests {
		i := index(tc.rule)
		if i < 0 {
			t.Errorf("%s: no rule with %q in\n%s", tc.name, tc.rule, strings.Join(rules, "\n"))
			continue
		}
		if i < prev {
			t.Errorf("%s: rule %q comes too early in\n%s", tc.name, tc.rule, strings.Join(rules, "\n"))
		}
		prev = i
	}
	if rules[0] != "*mangle" || !slices.Contains(rules, ":"+networkPolicyChain+" - [0:0]") || !slices.Contains(rules, "COMMIT") {
		t.Errorf("not an iptables-restore input that replaces the chain %s of the mangle table:\n%s", networkPolicyChain, strings.Join(rules, "\n"))
	}
}

func TestQueueBound(t *testing.T) {
	tests := []struct {
		name, content string
		want          bool
	}{
		{"no queue", "", false},
		{"queue 98", "   98  12345     0 2   128     0     0        0  1\n", true},
		{"another queue", "  100  12345     0 2   128     0     0        0  1\n", false},
		{"queue 980", "  980  12345     0 2   128     0     0        0  1\n", false},
		{"among others", "    1  11     0 2   128     0     0        0  1\n   98  12     0 2   128     0     0        0  1\n", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := queueBound(strings.NewReader(tc.content), 98)
			if err != nil || got != tc.want {
				t.Errorf("queueBound(%q, 98) = %v, %v; want %v", tc.content, got, err, tc.want)
			}
		})
	}
}
