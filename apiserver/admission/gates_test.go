package admission

import (
	"strings"
	"testing"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

func TestGates(t *testing.T) {
	gates := Gates{ImageRepositories: DefaultImageRepositories("registry.example.com/platform/kube-apiserver")}
	gates.ImageRepositories = append(gates.ImageRepositories, "mirror.example.com/kube-apiserver")
	with := func(image, class string) *v1alpha1.ApiServerConfig {
		return &v1alpha1.ApiServerConfig{Spec: v1alpha1.ApiServerConfigSpec{Image: image, PriorityClassName: class}}
	}
	namespaced := Gates{NamespacedEtcdPrefixes: true}
	prefixed := func(prefix string) *v1alpha1.ApiServerConfig {
		cfg := with("", "")
		cfg.Namespace, cfg.Name, cfg.Spec.Etcd.Prefix = "team-a", "x", prefix
		return cfg
	}
	for _, tc := range []struct {
		name    string
		gates   Gates
		old     *v1alpha1.ApiServerConfig
		cfg     *v1alpha1.ApiServerConfig
		refused string // the field, "" when admitted
	}{
		{"no image: the bundled one", gates, nil, with("", ""), ""},
		{"under the operator's registry path", gates, nil, with("registry.example.com/platform/kube-apiserver:v1.37.1", ""), ""},
		{"another image of the operator's registry path", gates, nil, with("registry.example.com/platform/debug-shell:1", ""), "spec.image"},
		{"a path that admits everything under it", Gates{ImageRepositories: []string{"registry.example.com/platform/"}}, nil, with("registry.example.com/platform/patched-apiserver@sha256:0123", ""), ""},
		{"a listed repository, by tag", gates, nil, with("mirror.example.com/kube-apiserver:v1.37.1", ""), ""},
		{"a listed repository, by digest", gates, nil, with("mirror.example.com/kube-apiserver@sha256:0123", ""), ""},
		{"another registry", gates, nil, with("evil.example.com/kube-apiserver:v1.37.1", ""), "spec.image"},
		{"a registry whose name starts like an admitted one", gates, nil, with("registry.example.com/platform-evil/x:1", ""), "spec.image"},
		{"a repository that starts like a listed one", gates, nil, with("mirror.example.com/kube-apiserver-evil:1", ""), "spec.image"},
		{"no registry named", gates, nil, with("kube-apiserver:v1.37.1", ""), "spec.image"},
		{"an image admitted before is kept", gates, with("evil.example.com/x:1", ""), with("evil.example.com/x:1", ""), ""},
		{"a change to another is judged", gates, with("evil.example.com/x:1", ""), with("evil.example.com/x:2", ""), "spec.image"},
		{"no repository admitted", Gates{}, nil, with("registry.example.com/platform/kube-apiserver:v1.37.1", ""), "spec.image"},
		{"any class by default", gates, nil, with("", "tenant-high"), ""},
		{"not the system's", gates, nil, with("", "system-cluster-critical"), "spec.priorityClassName"},
		{"a listed class", Gates{PriorityClasses: []string{"tenants"}}, nil, with("", "tenants"), ""},
		{"another class than those listed", Gates{PriorityClasses: []string{"tenants"}}, nil, with("", "tenant-high"), "spec.priorityClassName"},
		{"none listed", Gates{PriorityClasses: []string{}}, nil, with("", "tenants"), "spec.priorityClassName"},
		{"a prefix of the namespace's own", namespaced, nil, prefixed("/tenants/team-a/x"), ""},
		{"deeper in the namespace's own", namespaced, nil, prefixed("/tenants/team-a/x/y/"), ""},
		{"the namespace's whole subtree", namespaced, nil, prefixed("/tenants/team-a"), "spec.etcd.prefix"},
		{"above every namespace", namespaced, nil, prefixed("/tenants"), "spec.etcd.prefix"},
		{"the root", namespaced, nil, prefixed("/"), "spec.etcd.prefix"},
		{"another namespace's", namespaced, nil, prefixed("/tenants/team-b/x"), "spec.etcd.prefix"},
		{"a namespace whose name starts alike", namespaced, nil, prefixed("/tenants/team-ab/x"), "spec.etcd.prefix"},
		{"dot segments out of it", namespaced, nil, prefixed("/tenants/team-a/../team-b/x"), "spec.etcd.prefix"},
		{"none: /registry, as the CRD defaulted before", namespaced, nil, prefixed(""), "spec.etcd.prefix"},
		{"an existing tenant keeps its prefix", namespaced, prefixed("/registry"), prefixed("/registry"), ""},
		{"any prefix without the gate", gates, nil, prefixed("/registry"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.gates.Check(tc.old, tc.cfg)
			switch {
			case tc.refused == "" && len(errs) > 0:
				t.Fatalf("refused: %v", errs)
			case tc.refused != "" && (len(errs) != 1 || errs[0].Field != tc.refused):
				t.Fatalf("want %s refused, got %v", tc.refused, errs)
			case tc.refused != "" && !strings.Contains(errs[0].Error(), "operator's --"):
				t.Fatalf("the refusal does not say which operator flag decides: %v", errs)
			}
		})
	}
}

func TestGates_CheckDeleteAsksForAConfirmationWhereDataWouldGo(t *testing.T) {
	tenant := func(policy v1alpha1.DeletionPolicy, dataPrefix string, annotations map[string]string) *v1alpha1.ApiServerConfig {
		cfg := &v1alpha1.ApiServerConfig{}
		cfg.Name, cfg.Annotations = "t", annotations
		cfg.Spec.DeletionPolicy = policy
		cfg.Status.DataPrefix = dataPrefix
		return cfg
	}
	protected := map[string]string{v1alpha1.DeletionProtectionAnnotation: "true"}
	confirmed := map[string]string{v1alpha1.ConfirmDeletionAnnotation: "true"}
	for _, c := range []struct {
		name    string
		gates   Gates
		cfg     *v1alpha1.ApiServerConfig
		refused bool
	}{
		{"unprotected", Gates{}, tenant(v1alpha1.DeletionPolicyDelete, "/p", nil), false},
		{"protected by its annotation", Gates{}, tenant(v1alpha1.DeletionPolicyDelete, "/p", protected), true},
		{"protected by the operator", Gates{DeletionConfirmation: true}, tenant(v1alpha1.DeletionPolicyDelete, "/p", nil), true},
		{"unset policy, pkiRetention Delete", Gates{DeletionConfirmation: true}, tenant("", "/p", nil), true},
		{"confirmed", Gates{DeletionConfirmation: true}, tenant(v1alpha1.DeletionPolicyDelete, "/p", confirmed), false},
		{"Retain", Gates{DeletionConfirmation: true}, tenant(v1alpha1.DeletionPolicyRetain, "/p", nil), false},
		{"no data stored", Gates{DeletionConfirmation: true}, tenant(v1alpha1.DeletionPolicyDelete, "", nil), false},
	} {
		err := c.gates.CheckDelete(c.cfg)
		if (err != nil) != c.refused {
			t.Errorf("%s: refused is %v (%v)", c.name, err != nil, err)
		}
	}
}
