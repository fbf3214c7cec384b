package apiserver

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
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
	return desiredObjectsOf(t, sample(t, name))
}

func desiredObjectsOf(t *testing.T, cfg *v1alpha1.ApiServerConfig) (*Completed, *appsv1.Deployment, *corev1.Service, *corev1.ConfigMap) {
	t.Helper()
	c := complete(t, cfg, Inputs{})
	a, err := Args(c)
	if err != nil {
		t.Fatal(err)
	}
	d, err := desiredDeployment(c, a, DeploymentInputs{Objects: func(string, string) map[string][]byte { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := desiredConfigMap(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, d, DesiredService(c), cm
}

// goldenSpecs are the representative specs of the golden files: the
// samples, and variants of them.
var goldenSpecs = map[string]func(t *testing.T) *v1alpha1.ApiServerConfig{
	"minimal":      func(t *testing.T) *v1alpha1.ApiServerConfig { return sample(t, "minimal") },
	"ha":           func(t *testing.T) *v1alpha1.ApiServerConfig { return sample(t, "ha") },
	"dualstack":    func(t *testing.T) *v1alpha1.ApiServerConfig { return sample(t, "dualstack") },
	"autosizing":   func(t *testing.T) *v1alpha1.ApiServerConfig { return sample(t, "autosizing") },
	"konnectivity": func(t *testing.T) *v1alpha1.ApiServerConfig { return sample(t, "konnectivity") },
	"ha-dualstack-master-count": func(t *testing.T) *v1alpha1.ApiServerConfig {
		cfg := sample(t, "ha")
		cfg.Spec.ServiceClusterIPRange = append(cfg.Spec.ServiceClusterIPRange, "fd00:10:100::/108")
		cfg.Spec.EndpointReconcilerType = v1alpha1.EndpointReconcilerMasterCount
		return cfg
	},
	"hibernated": func(t *testing.T) *v1alpha1.ApiServerConfig {
		cfg := sample(t, "minimal")
		cfg.Spec.MasterCount = ptr.To[int32](0)
		return cfg
	},
	"audit-webhook": auditWebhookSpec,
}

// auditWebhookSpec is the minimal sample with audit events sent to a
// webhook too, with some of its settings.
func auditWebhookSpec(t *testing.T) *v1alpha1.ApiServerConfig {
	t.Helper()
	cfg := sample(t, "minimal")
	cfg.Spec.Audit.Webhook = &v1alpha1.AuditWebhookSpec{
		KubeconfigSecretName: "audit-webhook",
		InitialBackoff:       &metav1.Duration{Duration: 5 * time.Second},
		Batch:                &v1alpha1.AuditWebhookBatchSpec{MaxSize: ptr.To[int32](100), MaxWait: &metav1.Duration{Duration: 10 * time.Second}},
		Truncate:             &v1alpha1.AuditWebhookTruncateSpec{MaxEventBytes: ptr.To[int64](200000)},
	}
	return cfg
}

func TestDesiredObjects_Golden(t *testing.T) {
	for name, spec := range goldenSpecs {
		t.Run(name, func(t *testing.T) {
			c, d, svc, cm := desiredObjectsOf(t, spec(t))
			objs := []any{d, svc, cm}
			if pdb := desiredPodDisruptionBudget(c); pdb != nil {
				objs = append(objs, pdb)
			}
			if ks := DesiredKonnectivityService(c); ks != nil {
				objs = append(objs, ks)
			}
			agent, err := desiredKonnectivityAgentConfigMap(c, testKonnectivityCA, "")
			if err != nil {
				t.Fatal(err)
			}
			if agent != nil {
				objs = append(objs, agent)
			}
			golden(t, "objects/"+name+".yaml", toYAML(t, objs...))
		})
	}
}

func TestConfigHash_RollsOnlyForWhatKubeAPIServerReadsAtStart(t *testing.T) {
	c := complete(t, sample(t, "minimal"), Inputs{})
	a, err := Args(c)
	if err != nil {
		t.Fatal(err)
	}
	files := func(changes map[string]string) map[string][]byte {
		f := map[string][]byte{
			ServingCertFile: []byte("serving-1"), ServingKeyFile: []byte("serving-key-1"),
			CAFile: []byte("ca-1"), FrontProxyCAFile: []byte("fp-ca-1"),
			ServiceAccountKeyFile: []byte("sa-pub-1"), ServiceAccountSigningKeyFile: []byte("sa-key-1"),
			KubeletClientCertFile: []byte("kubelet-1"), EtcdCertFile: []byte("etcd-1"),
			FrontProxyClientCertFile: []byte("fp-client-1"), AuthenticationConfigFile: []byte("authn-1"),
		}
		for path, v := range changes {
			f[path] = []byte(v)
		}
		return f
	}
	base := ConfigHash(c, a, files(nil))
	if ConfigHash(c, a, files(nil)) != base {
		t.Fatal("the same inputs gave two hashes")
	}
	for path, rolls := range map[string]bool{
		ServingCertFile: false, ServingKeyFile: false, CAFile: false, FrontProxyCAFile: false,
		ServiceAccountKeyFile: true, ServiceAccountSigningKeyFile: true, KubeletClientCertFile: true,
		EtcdCertFile: true, FrontProxyClientCertFile: true, AuthenticationConfigFile: true,
	} {
		if changed := ConfigHash(c, a, files(map[string]string{path: "renewed"})) != base; changed != rolls {
			t.Errorf("a new %s: pods roll %v, want %v", path, changed, rolls)
		}
	}
	if ConfigHash(c, append(a, "--goaway-chance=0.01"), files(nil)) == base {
		t.Error("a new flag must roll the pods")
	}
	if ConfigHash(c, a, files(map[string]string{EtcdCertFile: "etcd-", EtcdKeyFile: "1"})) == ConfigHash(c, a, files(map[string]string{EtcdKeyFile: ""})) {
		t.Error("file boundaries must count in the hash")
	}
}

// TestConfigHash_UnchangedAcrossReleases pins the hash of fixed content: a
// change of the hash for the same files rolls every tenant when the
// operator is upgraded. The values are those the previous release computed
// for the same inputs, except where the defaults changed on purpose
// (DenyServiceExternalIPs turned on, CIS 1.2.3; encryption at rest on by
// default, CIS 1.2.27/1.2.28; etcd reached through the etcd dialer, which
// adds --egress-selector-config-file and its file): docs/upgrades.md then
// says that every tenant rolls once.
func TestConfigHash_UnchangedAcrossReleases(t *testing.T) {
	for _, tt := range []struct {
		name string
		spec func(*v1alpha1.ApiServerConfig)
		want string
	}{
		{"minimal", nil, "44e1e612f5b4c9dd1b1d6bd826822b56"},
		{"ha", func(cfg *v1alpha1.ApiServerConfig) {
			cfg.Spec.Encryption = &v1alpha1.EncryptionSpec{Provider: "secretbox"}
			// The sample gained EventRateLimit after these values were taken.
			cfg.Spec.Admission.EventRateLimit = nil
		}, "7610bd9f2dde106da0fc60a616f10dfb"},
		{"minimal", func(cfg *v1alpha1.ApiServerConfig) { cfg.Spec.Etcd.TLS = nil }, "f0421962795da2875e0aacdc42c16f89"},
	} {
		cfg := sample(t, tt.name)
		if tt.spec != nil {
			tt.spec(cfg)
		}
		c := complete(t, cfg, Inputs{})
		a, err := Args(c)
		if err != nil {
			t.Fatal(err)
		}
		data := func(kind, name string) map[string][]byte {
			out := map[string][]byte{}
			for _, o := range MountedObjects(c) {
				if o.Kind == kind && o.Name == name {
					for _, f := range o.Files {
						out[f.Key] = []byte("content of " + name + "/" + f.Key)
					}
				}
			}
			return out
		}
		if got := ConfigHash(c, a, PodFiles(c, data)); got != tt.want {
			t.Errorf("%s (etcd TLS %v): hash %s, want %s: upgrading the operator would roll every such tenant", tt.name, c.Spec.Etcd.TLS != nil, got, tt.want)
		}
	}
}

// TestConfigHash_RollsForTheUsersFiles: the files the pods read from the
// user's objects are read at start too, so a change of them rolls the pods.
func TestConfigHash_RollsForTheUsersFiles(t *testing.T) {
	cfg := sample(t, "minimal")
	cfg.Spec.Audit.PolicyConfigMapName = "audit-policy"
	cfg.Spec.Authorization.Webhook = &v1alpha1.AuthorizationWebhookSpec{KubeconfigSecretName: "authz"}
	cfg.Spec.Encryption = &v1alpha1.EncryptionSpec{ConfigSecretName: "my-encryption"}
	cfg.Spec.Audit.Webhook = &v1alpha1.AuditWebhookSpec{KubeconfigSecretName: "audit-webhook"}
	c := complete(t, cfg, Inputs{})
	a, err := Args(c)
	if err != nil {
		t.Fatal(err)
	}
	users := map[string]*corev1.Secret{
		"authz":         {ObjectMeta: metav1.ObjectMeta{Name: "authz"}, Data: map[string][]byte{"kubeconfig": []byte("v1")}},
		"my-encryption": {ObjectMeta: metav1.ObjectMeta{Name: "my-encryption"}, Data: map[string][]byte{EncryptionConfigKey: []byte("v1")}},
		"audit-webhook": {ObjectMeta: metav1.ObjectMeta{Name: "audit-webhook"}, Data: map[string][]byte{"kubeconfig": []byte("v1")}},
	}
	auditPolicy := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "audit-policy"}, Data: map[string]string{"policy.yaml": "v1"}}
	hash := func() string {
		return ConfigHash(c, a, PodFiles(c, ObjectsData([]*corev1.Secret{users["authz"], users["my-encryption"], users["audit-webhook"]}, auditPolicy)))
	}
	base := hash()
	for name, change := range map[string]func(){
		"the authorization webhook kubeconfig": func() { users["authz"].Data["kubeconfig"] = []byte("v2") },
		"the audit webhook kubeconfig":         func() { users["audit-webhook"].Data["kubeconfig"] = []byte("v2") },
		"the encryption configuration":         func() { users["my-encryption"].Data[EncryptionConfigKey] = []byte("v2") },
		"the audit policy":                     func() { auditPolicy.Data["policy.yaml"] = "v2" },
	} {
		change()
		if next := hash(); next == base {
			t.Errorf("a change of %s rolls no pod: kube-apiserver reads it only at start", name)
		} else {
			base = next
		}
	}
}

func TestDesiredDeployment_PassesTheRestrictedPodSecurityStandard(t *testing.T) {
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"minimal", "ha", "autosizing"} {
		_, d, _, _ := desiredObjects(t, name)
		results := evaluator.EvaluatePod(psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()},
			&d.Spec.Template.ObjectMeta, &d.Spec.Template.Spec)
		if agg := policy.AggregateCheckResults(results); !agg.Allowed {
			t.Errorf("the %s pods violate the restricted Pod Security Standard: %s", name, agg.ForbiddenDetail())
		}
	}
}

func TestDesiredPodDisruptionBudget_FollowsMasterCount(t *testing.T) {
	cfg := sample(t, "ha")
	for replicas, want := range map[int32]bool{0: false, 1: false, 2: true, 3: true} {
		cfg.Spec.MasterCount = ptr.To(replicas)
		pdb := desiredPodDisruptionBudget(complete(t, cfg, Inputs{}))
		if (pdb != nil) != want {
			t.Errorf("masterCount %d: budget present %v, want %v", replicas, pdb != nil, want)
		}
		if pdb != nil && pdb.Spec.MaxUnavailable.IntValue() != 1 {
			t.Errorf("masterCount %d: maxUnavailable %v, want 1", replicas, pdb.Spec.MaxUnavailable)
		}
	}
}

func TestDesiredDeployment_FlagsPointAtMountedFiles(t *testing.T) {
	for name, cfg := range map[string]*v1alpha1.ApiServerConfig{"ha": sample(t, "ha"), "audit-webhook": auditWebhookSpec(t)} {
		t.Run(name, func(t *testing.T) { flagsPointAtMountedFiles(t, cfg) })
	}
}

func flagsPointAtMountedFiles(t *testing.T, cfg *v1alpha1.ApiServerConfig) {
	t.Helper()
	_, d, _, cm := desiredObjectsOf(t, cfg)
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
					if len(items) == 0 && src.ConfigMap.Name == cm.Name {
						// The whole ConfigMap, each key under its name.
						for key := range cm.Data {
							items = append(items, corev1.KeyToPath{Path: key})
						}
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

// TestAuditWebhook_RenderedAndMountedBesideTheLog: spec.audit.webhook
// adds the webhook backend's flags (its mode always, its other settings
// only when set, so that the rest keep kube-apiserver's defaults) and
// mounts the kubeconfig read-only where --audit-webhook-config-file
// points; the log backend stays as it was. Without the field nothing of
// it is rendered.
func TestAuditWebhook_RenderedAndMountedBesideTheLog(t *testing.T) {
	_, d, _, _ := desiredObjects(t, "minimal")
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--audit-webhook-") {
			t.Errorf("without spec.audit.webhook: %s is rendered", a)
		}
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "audit-webhook" {
			t.Errorf("without spec.audit.webhook: volume %s", v.Name)
		}
	}

	_, d, _, _ = desiredObjectsOf(t, auditWebhookSpec(t))
	pod := d.Spec.Template.Spec
	var got []string
	for _, a := range pod.Containers[0].Args {
		if strings.HasPrefix(a, "--audit-") {
			got = append(got, a)
		}
	}
	want := []string{
		"--audit-log-maxage=30", "--audit-log-maxbackup=10", "--audit-log-maxsize=100", "--audit-log-path=" + AuditLogFile,
		"--audit-policy-file=" + AuditPolicyFile,
		"--audit-webhook-batch-max-size=100", "--audit-webhook-batch-max-wait=10s",
		"--audit-webhook-config-file=" + AuditWebhookKubeconfigFile, "--audit-webhook-initial-backoff=5s", "--audit-webhook-mode=batch",
		"--audit-webhook-truncate-enabled=true", "--audit-webhook-truncate-max-event-size=200000",
	}
	if !slices.Equal(got, want) {
		t.Errorf("audit flags:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var volume *corev1.Volume
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == "audit-webhook" {
			volume = &pod.Volumes[i]
		}
	}
	if volume == nil || volume.Secret == nil || volume.Secret.SecretName != "audit-webhook" ||
		len(volume.Secret.Items) != 1 || volume.Secret.Items[0].Key != "kubeconfig" || volume.Secret.Items[0].Path != "kubeconfig" ||
		volume.Secret.Items[0].Mode == nil || *volume.Secret.Items[0].Mode != 0o400 {
		t.Fatalf("volume audit-webhook is %+v, want the Secret audit-webhook's key kubeconfig, mode 0400", volume)
	}
	mounted := false
	for _, m := range pod.Containers[0].VolumeMounts {
		if m.Name == "audit-webhook" {
			mounted = m.MountPath+"/kubeconfig" == AuditWebhookKubeconfigFile && m.ReadOnly
		}
	}
	if !mounted {
		t.Errorf("the audit webhook kubeconfig is not mounted read-only at %s: %+v", AuditWebhookKubeconfigFile, pod.Containers[0].VolumeMounts)
	}
}

// TestEventRateLimit_RenderedMountedAndHashed: spec.admission.eventRateLimit
// turns the plugin on with its configuration, an AdmissionConfiguration in
// the operator's ConfigMap, mounted where --admission-control-config-file
// points and handed to the validator; kube-apiserver reads it only at
// start, so new limits roll the pods. Without the field nothing of it is
// rendered.
func TestEventRateLimit_RenderedMountedAndHashed(t *testing.T) {
	cfg := sample(t, "minimal")
	c, _, _, cm := desiredObjectsOf(t, cfg)
	a, err := Args(c)
	if err != nil {
		t.Fatal(err)
	}
	if got := flagValues(a, "admission-control-config-file"); len(got) != 0 || cm.Data[AdmissionConfigKey] != "" {
		t.Fatalf("without eventRateLimit: --admission-control-config-file %v, ConfigMap key %q", got, cm.Data[AdmissionConfigKey])
	}

	cfg.Spec.Admission.EventRateLimit = &v1alpha1.EventRateLimitSpec{}
	c, _, _, cm = desiredObjectsOf(t, cfg)
	if a, err = Args(c); err != nil {
		t.Fatal(err)
	}
	if got := flagValues(a, "admission-control-config-file"); !slices.Equal(got, []string{AdmissionConfigFile}) {
		t.Errorf("--admission-control-config-file is %v, want [%s]", got, AdmissionConfigFile)
	}
	if got := flagValues(a, "enable-admission-plugins"); !slices.Equal(got, []string{"DenyServiceExternalIPs,EventRateLimit,NodeRestriction"}) {
		t.Errorf("--enable-admission-plugins is %v", got)
	}
	var admission struct {
		APIVersion, Kind string
		Plugins          []struct {
			Name          string
			Configuration struct {
				APIVersion, Kind string
				Limits           []map[string]any
			}
		}
	}
	if err := yaml.Unmarshal([]byte(cm.Data[AdmissionConfigKey]), &admission); err != nil {
		t.Fatalf("decoding the admission configuration: %v", err)
	}
	if admission.APIVersion != "apiserver.config.k8s.io/v1" || admission.Kind != "AdmissionConfiguration" || len(admission.Plugins) != 1 {
		t.Fatalf("the admission configuration is not one plugin's AdmissionConfiguration:\n%s", cm.Data[AdmissionConfigKey])
	}
	p := admission.Plugins[0]
	wantLimits := []map[string]any{{"type": "Server", "qps": 5000.0, "burst": 20000.0}, {"type": "Namespace", "qps": 50.0, "burst": 100.0}}
	if p.Name != "EventRateLimit" || p.Configuration.APIVersion != "eventratelimit.admission.k8s.io/v1alpha1" || p.Configuration.Kind != "Configuration" ||
		fmt.Sprint(p.Configuration.Limits) != fmt.Sprint(wantLimits) {
		t.Errorf("EventRateLimit's configuration is not the default limits:\n%s", cm.Data[AdmissionConfigKey])
	}

	// Mounted from the table (the validator is given what the pods read:
	// see the admission package), in the restart hash.
	files := PodFiles(c, ObjectsData(nil, cm))
	if string(files[AdmissionConfigFile]) != cm.Data[AdmissionConfigKey] {
		t.Errorf("the pods do not read the ConfigMap's %s at %s", AdmissionConfigKey, AdmissionConfigFile)
	}
	base := ConfigHash(c, a, files)
	cfg.Spec.Admission.EventRateLimit.Limits = []v1alpha1.EventRateLimit{{Type: "Namespace", QPS: 10, Burst: 20}}
	c2, _, _, cm2 := desiredObjectsOf(t, cfg)
	if ConfigHash(c2, a, PodFiles(c2, ObjectsData(nil, cm2))) == base {
		t.Error("new limits (same command line) do not roll the pods")
	}
}

// TestEtcdPlacement: every etcd server once, overrides included; the
// addresses kube-apiserver's CONNECTs name (the etcd dialer's allow list),
// IPv6 in brackets as in the URL; the distinct sets of servers compared as
// kube-apiserver compares them, whatever their order.
func TestEtcdPlacement(t *testing.T) {
	cfg := sample(t, "minimal")
	cfg.Spec.Etcd.Servers = []string{"https://etcd-1:2379", "https://[fd00::1]:2379", "https://etcd-1:2379"}
	cfg.Spec.Etcd.Overrides = []v1alpha1.EtcdOverride{
		{Resource: "events", Servers: []string{"https://events:2379", "https://etcd-1:2379"}},
		{Group: "coordination.k8s.io", Resource: "leases", Servers: []string{"http://leases:2380"}},
		{Resource: "pods", Servers: []string{"https://etcd-1:2379", "https://events:2379"}},
		{Resource: "nodes", Servers: []string{"https://etcd-1:2379", "https://etcd-1:2379", "https://[fd00::1]:2379"}},
	}
	e := complete(t, cfg, Inputs{}).Etcd
	if got, want := e.Servers, []string{"https://etcd-1:2379", "https://[fd00::1]:2379", "https://events:2379", "http://leases:2380"}; !slices.Equal(got, want) {
		t.Errorf("Servers: %v, want %v", got, want)
	}
	if got, want := e.Addresses, []string{"[fd00::1]:2379", "etcd-1:2379", "events:2379", "leases:2380"}; !slices.Equal(got, want) {
		t.Errorf("Addresses: %v, want %v", got, want)
	}
	// events and pods are one set in another order; nodes are the main
	// servers: one etcd each, visited once.
	wantSets := [][]string{cfg.Spec.Etcd.Servers, {"https://events:2379", "https://etcd-1:2379"}, {"http://leases:2380"}}
	if !slices.EqualFunc(e.Sets, wantSets, slices.Equal) {
		t.Errorf("Sets: %v, want %v", e.Sets, wantSets)
	}
	// kube-apiserver installs a pair of checks per distinct override set:
	// nodes' is one, though it holds the main servers.
	if got := len(e.OverrideSets); got != 3 {
		t.Errorf("OverrideSets: %v, want 3 sets", e.OverrideSets)
	}
	for gr, want := range map[schema.GroupResource][]string{
		{Resource: "pods"}: {"https://etcd-1:2379", "https://events:2379"},
		{Group: "coordination.k8s.io", Resource: "leases"}: {"http://leases:2380"},
		{Resource: "secrets"}:                              cfg.Spec.Etcd.Servers,
		{Group: "events.k8s.io", Resource: "events"}:       cfg.Spec.Etcd.Servers,
	} {
		if got := e.ServersOf(gr); !slices.Equal(got, want) {
			t.Errorf("ServersOf(%s): %v, want %v", gr, got, want)
		}
	}
	if got, want := e.OverridesFlag(), "/events#https://events:2379;https://etcd-1:2379,/nodes#https://etcd-1:2379;https://etcd-1:2379;https://[fd00::1]:2379,/pods#https://etcd-1:2379;https://events:2379,coordination.k8s.io/leases#http://leases:2380"; got != want {
		t.Errorf("OverridesFlag: %s, want %s", got, want)
	}
}
