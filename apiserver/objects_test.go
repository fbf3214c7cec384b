package apiserver

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

func toYAML(t *testing.T, objs ...any) []byte {
	t.Helper()
	var parts []string
	for _, o := range objs {
		out, err := yaml.Marshal(o)
		if err != nil {
			t.Fatalf("marshalling %T: %v", o, err)
		}
		parts = append(parts, string(out))
	}
	return []byte(strings.Join(parts, "---\n"))
}

func desiredObjects(t *testing.T, name string) (*Completed, *appsv1.Deployment, *corev1.Service, *corev1.ConfigMap) {
	t.Helper()
	c := complete(t, sample(t, name), Inputs{})
	a, err := Args(c)
	if err != nil {
		t.Fatal(err)
	}
	d, err := DesiredDeployment(c, a, DeploymentInputs{ConfigHash: ConfigHash(a, nil)})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := DesiredConfigMap(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, d, DesiredService(c), cm
}

func TestDesiredObjects_Golden(t *testing.T) {
	for _, name := range []string{"minimal", "ha", "dualstack", "autosizing"} {
		t.Run(name, func(t *testing.T) {
			c, d, svc, cm := desiredObjects(t, name)
			objs := []any{d, svc, cm}
			if pdb := DesiredPodDisruptionBudget(c); pdb != nil {
				objs = append(objs, pdb)
			}
			golden(t, "objects/"+name+".yaml", toYAML(t, objs...))
		})
	}
}

func TestDesiredDeployment_RollsOnlyWhenRestartInputsChange(t *testing.T) {
	c := complete(t, sample(t, "minimal"), Inputs{})
	a, err := Args(c)
	if err != nil {
		t.Fatal(err)
	}
	base := ConfigHash(a, map[string][]byte{"sa.pub": []byte("key-1")})
	if ConfigHash(a, map[string][]byte{"sa.pub": []byte("key-1")}) != base {
		t.Fatal("the same inputs gave two hashes")
	}
	if ConfigHash(a, map[string][]byte{"sa.pub": []byte("key-2")}) == base {
		t.Fatal("a new service-account key must change the hash (kube-apiserver reads it only at start)")
	}
	if ConfigHash(append(a, "--goaway-chance=0.01"), map[string][]byte{"sa.pub": []byte("key-1")}) == base {
		t.Fatal("a new flag must change the hash")
	}
	if ConfigHash(a, map[string][]byte{"sa.pub": []byte("key-"), "x": []byte("1")}) == ConfigHash(a, map[string][]byte{"sa.pub": []byte("key-1")}) {
		t.Fatal("file boundaries must count in the hash")
	}
}

func TestDesiredPodDisruptionBudget_FollowsMasterCount(t *testing.T) {
	cfg := sample(t, "ha")
	for replicas, want := range map[int32]bool{0: false, 1: false, 2: true, 3: true} {
		cfg.Spec.MasterCount = ptr.To(replicas)
		pdb := DesiredPodDisruptionBudget(complete(t, cfg, Inputs{}))
		if (pdb != nil) != want {
			t.Errorf("masterCount %d: budget present %v, want %v", replicas, pdb != nil, want)
		}
		if pdb != nil && pdb.Spec.MaxUnavailable.IntValue() != 1 {
			t.Errorf("masterCount %d: maxUnavailable %v, want 1", replicas, pdb.Spec.MaxUnavailable)
		}
	}
}

func TestDesiredDeployment_FlagsPointAtMountedFiles(t *testing.T) {
	_, d, _, _ := desiredObjects(t, "ha")
	pod := d.Spec.Template.Spec
	mounted := map[string]bool{}
	byName := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		byName[v.Name] = v
	}
	for _, m := range pod.Containers[0].VolumeMounts {
		v := byName[m.Name]
		switch {
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				var items []corev1.KeyToPath
				if src.Secret != nil {
					items = src.Secret.Items
				}
				if src.ConfigMap != nil {
					items = src.ConfigMap.Items
					if len(items) == 0 && src.ConfigMap.Name == ConfigMapName("ha") {
						items = []corev1.KeyToPath{{Path: AuthenticationConfigKey}, {Path: AuditPolicyKey}}
					}
				}
				for _, it := range items {
					mounted[m.MountPath+"/"+it.Path] = true
				}
			}
		case v.Secret != nil:
			for _, it := range v.Secret.Items {
				mounted[m.MountPath+"/"+it.Path] = true
			}
		}
	}
	for _, arg := range pod.Containers[0].Args {
		_, value, _ := strings.Cut(arg, "=")
		if strings.HasPrefix(value, "/etc/kubernetes/") && !mounted[value] {
			t.Errorf("%s names a file no volume provides; mounted: %v", arg, mounted)
		}
	}
}
