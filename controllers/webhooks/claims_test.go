package webhooks

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantindex"
)

func testNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// createWhenCached creates cfg and waits until the webhook's index holds
// it.
func createWhenCached(t *testing.T, cfg *v1alpha1.ApiServerConfig) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for tenants.Reader().Get(ctx, client.ObjectKeyFromObject(cfg), &v1alpha1.ApiServerConfig{}) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the webhook's cache does not hold %s", cfg.Name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestApiServerConfigValidator_RefusesNamesThatCollideWithAnotherTenants(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t, "names-")
	createWhenCached(t, newConfig(ns, "x", func(*v1alpha1.ApiServerConfigSpec) {}))

	// x-front-proxy would name its CA x-front-proxy-ca, x's front-proxy CA.
	err := env.Client.Create(ctx, newConfig(ns, "x-front-proxy", func(*v1alpha1.ApiServerConfigSpec) {}))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "metadata.name: Invalid value") ||
		!strings.Contains(err.Error(), "ApiServerConfig x in this namespace") || !strings.Contains(err.Error(), "Secret/x-front-proxy-ca") {
		t.Fatalf("want x-front-proxy refused at metadata.name, naming x and the Secret, got %v", err)
	}
	// And the other way round: x beside an x-front-proxy.
	other := testNamespace(t, "names-")
	createWhenCached(t, newConfig(other, "x-front-proxy", func(*v1alpha1.ApiServerConfigSpec) {}))
	err = env.Client.Create(ctx, newConfig(other, "x", func(*v1alpha1.ApiServerConfigSpec) {}))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "ApiServerConfig x-front-proxy in this namespace") {
		t.Fatalf("want x refused beside x-front-proxy, got %v", err)
	}
	// Names that only look alike, and the same name in another namespace,
	// are fine.
	for _, cfg := range []*v1alpha1.ApiServerConfig{
		newConfig(ns, "x-front", func(*v1alpha1.ApiServerConfigSpec) {}),
		newConfig(ns, "front-proxy", func(*v1alpha1.ApiServerConfigSpec) {}),
		newConfig(testNamespace(t, "names-"), "x-front-proxy", func(*v1alpha1.ApiServerConfigSpec) {}),
	} {
		if err := env.Client.Create(ctx, cfg); err != nil {
			t.Errorf("%s/%s was refused: %v", cfg.Namespace, cfg.Name, err)
		}
	}
}

func TestApiServerConfigValidator_RefusesANewTenantWhoseDeploymentNameIsTaken(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t, "taken-")
	theirs := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-apiserver"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "example.com/web:1"}}},
			},
		},
	}
	if err := env.Client.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	err := env.Client.Create(ctx, newConfig(ns, "web", func(*v1alpha1.ApiServerConfigSpec) {}))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "metadata.name: Invalid value") ||
		!strings.Contains(err.Error(), ns+"/web-apiserver exists and belongs to no ApiServerConfig") {
		t.Fatalf("want the tenant refused at metadata.name, naming the Deployment in the way, got %v", err)
	}
}

func TestApiServerConfigValidator_RefusesAnEtcdPrefixThatAnotherTenantsOverlaps(t *testing.T) {
	ctx := context.Background()
	ns, elsewhere := testNamespace(t, "keys-"), testNamespace(t, "keys-")
	onEtcd := func(prefix string, servers ...string) func(*v1alpha1.ApiServerConfigSpec) {
		return func(s *v1alpha1.ApiServerConfigSpec) {
			s.Etcd.Servers, s.Etcd.Prefix = servers, prefix
		}
	}
	createWhenCached(t, newConfig(ns, "a", onEtcd("/shared/a", "https://etcd-1:2379", "https://etcd-2:2379")))
	createWhenCached(t, newConfig(elsewhere, "b", onEtcd("/shared/b", "https://etcd-1:2379")))

	for _, tc := range []struct {
		name, ns, prefix, names string
		servers                 []string
	}{
		{"the same prefix, another server of the same etcd", ns, "/shared/a", "ApiServerConfig a (prefix /shared/a)", []string{"https://etcd-2:2379"}},
		{"a prefix within another's", ns, "/shared/a/more", "ApiServerConfig a (prefix /shared/a)", []string{"https://etcd-1:2379"}},
		{"a prefix above two others", ns, "/shared", "ApiServerConfig a (prefix /shared/a) and an ApiServerConfig in another namespace", []string{"https://etcd-1:2379"}},
		{"another namespace's prefix, with a trailing slash", ns, "/shared/b/", "an ApiServerConfig in another namespace", []string{"https://ETCD-1:2379"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := env.Client.Create(ctx, newConfig(tc.ns, "c", onEtcd(tc.prefix, tc.servers...)))
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.etcd.prefix: Invalid value") ||
				!strings.Contains(err.Error(), "also the data of "+tc.names+":") {
				t.Fatalf("want the prefix refused, naming %s, got %v", tc.names, err)
			}
			if strings.Contains(err.Error(), elsewhere) || strings.Contains(err.Error(), "ApiServerConfig b") {
				t.Fatalf("the refusal tells another namespace's tenant or prefix: %v", err)
			}
		})
	}
	// Moving a tenant onto another's etcd is refused as well.
	c := newConfig(ns, "c", onEtcd("/shared/b", "https://etcd-3:2379"))
	createWhenCached(t, c)
	c.Spec.Etcd.Servers = append(c.Spec.Etcd.Servers, "https://etcd-1:2379")
	if err := env.Client.Update(ctx, c); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.etcd.prefix") {
		t.Fatalf("want the move onto etcd-1 refused, got %v", err)
	}
	// Siblings and other servers are fine.
	for _, cfg := range []*v1alpha1.ApiServerConfig{
		newConfig(ns, "d", onEtcd("/shared/ab", "https://etcd-1:2379")),
		newConfig(ns, "e", onEtcd("/shared/a", "https://etcd-4:2379")),
	} {
		if err := env.Client.Create(ctx, cfg); err != nil {
			t.Errorf("%s was refused: %v", cfg.Name, err)
		}
	}
}

func TestApiServerConfigValidator_RefusesAnImageFromOutsideTheAdmittedRepositories(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t, "image-")
	image := func(ref string) func(*v1alpha1.ApiServerConfigSpec) {
		return func(s *v1alpha1.ApiServerConfigSpec) { s.Image = ref }
	}
	err := env.Client.Create(ctx, newConfig(ns, "elsewhere", image("evil.example.com/kube-apiserver:v1.37.1")))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.image: Forbidden") || !strings.Contains(err.Error(), "localhost/apiserver-operator/") {
		t.Fatalf("want the image refused, naming the admitted repositories, got %v", err)
	}
	if err := env.Client.Create(ctx, newConfig(ns, "bundled", image(apiserver.DefaultImageRepository+":v1.37.1"))); err != nil {
		t.Fatalf("the bundled image was refused: %v", err)
	}
}

func TestApiServerConfigDefaulter_ANewTenantGetsAnEtcdPrefixOfItsOwnAndKeepsIt(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t, "prefix-")
	unprefixed := func(name string) *v1alpha1.ApiServerConfig {
		return newConfig(ns, name, func(s *v1alpha1.ApiServerConfigSpec) { s.Etcd.Prefix = "" })
	}
	// Two tenants on one etcd, neither naming a prefix: both admitted.
	a, b := unprefixed("a"), unprefixed("b")
	for _, cfg := range []*v1alpha1.ApiServerConfig{a, b} {
		createWhenCached(t, cfg)
		if want := "/tenants/" + ns + "/" + cfg.Name; cfg.Spec.Etcd.Prefix != want {
			t.Fatalf("%s got the prefix %q, want %q", cfg.Name, cfg.Spec.Etcd.Prefix, want)
		}
	}
	// Replacing it with its manifest (kubectl replace, an update that
	// names no prefix) keeps it, rather than having the change of an
	// immutable field refused.
	replaced := unprefixed("a")
	replaced.ResourceVersion = a.ResourceVersion
	replaced.Spec.MasterCount = ptr.To[int32](2)
	if err := env.Client.Update(ctx, replaced); err != nil {
		t.Fatalf("replacing a with its manifest: %v", err)
	}
	if replaced.Spec.Etcd.Prefix != "/tenants/"+ns+"/a" || *replaced.Spec.MasterCount != 2 {
		t.Fatalf("after the replace: prefix %q, masterCount %d", replaced.Spec.Etcd.Prefix, *replaced.Spec.MasterCount)
	}
	// A server-side apply of the manifest (a GitOps tool's sync) keeps it
	// too: the webhook's value belongs to no field manager.
	manifest := unprefixed("a")
	manifest.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ApiServerConfig"}
	manifest.Spec.MasterCount = ptr.To[int32](3)
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u}), client.FieldOwner("gitops"), client.ForceOwnership); err != nil {
		t.Fatalf("applying the manifest: %v", err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(a), a); err != nil {
		t.Fatal(err)
	}
	if a.Spec.Etcd.Prefix != "/tenants/"+ns+"/a" || *a.Spec.MasterCount != 3 {
		t.Fatalf("after the apply: prefix %q, masterCount %d", a.Spec.Etcd.Prefix, *a.Spec.MasterCount)
	}
	// generateName: the name comes after admission; the prefix is unique
	// all the same.
	var prefixes []string
	for range 2 {
		g := unprefixed("")
		g.GenerateName = "gen-"
		createWhenCached(t, g)
		if !strings.HasPrefix(g.Spec.Etcd.Prefix, "/tenants/"+ns+"/gen-") {
			t.Fatalf("a generated name's tenant got the prefix %q", g.Spec.Etcd.Prefix)
		}
		prefixes = append(prefixes, g.Spec.Etcd.Prefix)
	}
	if prefixes[0] == prefixes[1] {
		t.Fatalf("two tenants of generated names got the same prefix %s", prefixes[0])
	}
}

// The webhook's ServiceAccount reads no Secret (config/rbac/webhook): its
// index, made WithoutRetainedData under exactly the rights that role gives,
// fills and compares tenants, and the retained data is left to the
// controllers.
func TestTenantIndex_WorksWithTheWebhooksRightsAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := testNamespace(t, "webhook-rights-")
	index, err := tenantindex.New(webhookRights(t), env.Scheme, tenantindex.WithoutRetainedData())
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = index.Start(ctx) }()
	createWhenCached(t, newConfig(ns, "a", func(s *v1alpha1.ApiServerConfigSpec) { s.Etcd.Prefix = "/rights/a" }))
	other := newConfig(ns, "b", func(s *v1alpha1.ApiServerConfigSpec) { s.Etcd.Prefix = "/rights/a/b" })
	var overlapping []v1alpha1.ApiServerConfig
	for len(overlapping) == 0 && ctx.Err() == nil {
		if overlapping, err = index.Overlapping(ctx, other); err != nil {
			t.Fatalf("the index under the webhook's rights: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(overlapping) != 1 || overlapping[0].Name != "a" {
		t.Fatalf("the index under the webhook's rights finds %v overlapping /rights/a/b, want a", overlapping)
	}
	if index.HoldsRetainedData() {
		t.Error("an index made WithoutRetainedData says it holds the retained data")
	}
	if _, err := index.RetainedOverlapping(ctx, other); err == nil {
		t.Error("an index without the retained data answered for it")
	}
}

// webhookRights is a configuration of the test apiserver for the webhook's
// ServiceAccount, which holds exactly the rights of config/rbac/webhook's
// ClusterRole, until the test ends.
func webhookRights(t *testing.T) *rest.Config {
	t.Helper()
	ctx := context.Background()
	const user = "system:serviceaccount:apiserver-operator-system:apiserver-operator-webhook"
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "webhook-role-"},
		Rules:      webhookClusterRules(t),
	}
	if err := env.Client.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "webhook-role-"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	if err := env.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), binding)
		_ = env.Client.Delete(context.Background(), role)
	})
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return cfg
}

// webhookClusterRules are the rules of config/rbac/webhook's ClusterRole.
func webhookClusterRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "webhook", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(doc), &role); err != nil {
			t.Fatal(err)
		}
		if role.Kind == "ClusterRole" {
			return role.Rules
		}
	}
	t.Fatal("config/rbac/webhook/role.yaml has no ClusterRole")
	return nil
}
