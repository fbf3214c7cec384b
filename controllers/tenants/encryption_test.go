package tenants

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/rotation"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// testTenants are the tenants' APIs as the controller tests provide them,
// by ApiServerConfig (envtest runs no tenant).
var testTenants sync.Map

// testReach is how the tests' reconciler reaches a tenant: its etcd is
// the environment's (tenantio.Real), its API the fake a test stored in
// testTenants, its konnectivity servers testKonnectivity's.
type testReach struct{ tenantio.Real }

func (testReach) API(_ context.Context, target tenantio.APITarget) (tenantio.API, error) {
	t, ok := testTenants.Load(target.Tenant)
	if !ok {
		return nil, fmt.Errorf("no tenant API for %s in this test", target.Tenant)
	}
	return t.(tenantio.API), nil
}

func (testReach) KonnectivityAgents(ctx context.Context, podIP string) (int32, error) {
	return probeTestKonnectivity(ctx, podIP)
}

// fakeTenant stands for a tenant's kube-apiserver in etcd: a rewrite stores
// the object again as kube-apiserver would, behind the prefix of the key
// that the operator's encryption Secret says encrypts now (the proof looks
// at nothing else). The real thing is in the e2e suite
// (test/e2e/encryption_test.go); that kube-apiserver writes again only
// what it read with a key that no longer encrypts is asserted in
// apiserver's TestEncryptionKeys_Config (the values' staleness).
type fakeTenant struct {
	etcd     *clientv3.Client
	cfg      *v1alpha1.ApiServerConfig
	rewrites atomic.Int64
}

func (f *fakeTenant) Resources(context.Context) (map[schema.GroupResource]tenantio.Resource, error) {
	return map[schema.GroupResource]tenantio.Resource{
		{Resource: "secrets"}:    {GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, Namespaced: true},
		{Resource: "configmaps"}: {GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespaced: true},
	}, nil
}

// Metrics: the fake tenant's apiservers saw no request.
func (f *fakeTenant) Metrics(context.Context, string, ...string) ([]byte, error) { return nil, nil }

func (f *fakeTenant) Rewrite(ctx context.Context, r tenantio.Resource, namespace, name string) error {
	s := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: f.cfg.Namespace, Name: apiserver.EncryptionSecretName(f.cfg.Name)}, s); err != nil {
		return err
	}
	keys, err := apiserver.ParseEncryptionKeys(s.Data[apiserver.EncryptionKeysKey], apiserver.EncryptionLayout{})
	if err != nil {
		return err
	}
	key := f.cfg.Spec.Etcd.Prefix + "/" + r.Resource + "/" + namespace + "/" + name
	f.rewrites.Add(1)
	value := "k8s\x00plain again"
	if keys.Current.Covers(r.Resource) {
		if value, err = seal(keys.Current.Key, key, "ciphertext of "+name); err != nil {
			return err
		}
	}
	_, err = f.etcd.Put(ctx, key, value)
	return err
}

func storedValues(t *testing.T, cli *clientv3.Client, prefix string) map[string]string {
	t.Helper()
	resp, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

func encryptedStatus(t *testing.T, cfg *v1alpha1.ApiServerConfig) *metav1.Condition {
	t.Helper()
	return conditionOf(get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta}), v1alpha1.ConditionEncrypted)
}

// TestApiServerConfigReconciler_EncryptsWhatWasStoredAndRotatesTheKey: a
// tenant whose etcd already holds plain Secrets and ConfigMaps gets them
// encrypted (rewritten through its API, paced, proven by reading etcd),
// then an asked-for rotation takes the key through its phases, each rolled
// out, and drops the old key only once no value in etcd carries it; a
// resource taken off the list is decrypted the same way. A hibernated
// tenant postpones the rotation until it wakes.
func TestApiServerConfigReconciler_EncryptsWhatWasStoredAndRotatesTheKey(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "enc", func(s *v1alpha1.ApiServerConfigSpec) {
		// 5 a second: the 30 stale values take more than one pass.
		s.Encryption = &v1alpha1.EncryptionSpec{Provider: v1alpha1.EncryptionSecretbox, RewritesPerSecond: ptr.To[int32](5)}
	})
	// The keys written before it are its own (a cluster it takes over).
	cfg.Annotations = map[string]string{v1alpha1.AdoptDataAnnotation: cfg.Spec.Etcd.Prefix}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{env.ControlPlane.Etcd.URL.String()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	prefix := cfg.Spec.Etcd.Prefix
	for i := range 20 {
		if _, err := cli.Put(ctx, fmt.Sprintf("%s/secrets/default/s-%d", prefix, i), "k8s\x00plain secret"); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		if _, err := cli.Put(ctx, fmt.Sprintf("%s/configmaps/kube-system/c-%d", prefix, i), "k8s\x00plain configmap"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Put(ctx, prefix+"/pods/default/p", "k8s\x00plain pod"); err != nil {
		t.Fatal(err)
	}
	fake := &fakeTenant{etcd: cli, cfg: cfg}
	testTenants.Store(client.ObjectKeyFromObject(cfg), fake)
	defer testTenants.Delete(client.ObjectKeyFromObject(cfg))

	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	d := waitForDeployment(t, cfg)
	actAsDeploymentController(t, d)
	eventually(t, 20*time.Second, "status shows the re-encryption under way", func() error {
		if c := encryptedStatus(t, cfg); c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonReencrypting || !strings.Contains(c.Message, "still carry") {
			return fmt.Errorf("Encrypted is %v", c)
		}
		return nil
	})
	waitForPhase(t, cfg, d, rotation.EncryptionKey.Name, "Stable")
	assertStored := func(key string, plainToo ...string) {
		t.Helper()
		for k, v := range storedValues(t, cli, prefix+"/") {
			plain := strings.Contains(k, "/pods/")
			for _, p := range plainToo {
				plain = plain || strings.Contains(k, "/"+p+"/")
			}
			if plain != !strings.HasPrefix(v, "k8s:enc:secretbox:v1:"+key+"-") {
				t.Errorf("%s is stored as %q (want %s, plain: %v)", k, v, key, plain)
			}
		}
	}
	assertStored("key-1")
	if got := fake.rewrites.Load(); got != 30 {
		t.Errorf("%d objects were rewritten, want the 30 stored in plain text", got)
	}
	eventually(t, 10*time.Second, "Encrypted is True and proven", func() error {
		if c := encryptedStatus(t, cfg); c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonEncryptionProven || !strings.Contains(c.Message, "proven in etcd") {
			return fmt.Errorf("Encrypted is %v", c)
		}
		return nil
	})

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.EncryptionSecretName("enc")}}
	configHas := func(names ...string) []bool {
		var out []bool
		for _, n := range names {
			out = append(out, bytes.Contains(get(t, secret).Data[apiserver.EncryptionConfigKey], []byte("name: "+n+"-")))
		}
		return out
	}
	hashes := map[string]bool{get(t, d).Spec.Template.Annotations[apiserver.ConfigHashAnnotation]: true}
	rewritesBefore := fake.rewrites.Load()
	annotate(t, cfg, v1alpha1.RotateEncryptionKeyAnnotation, "1")
	for _, c := range []struct {
		phase      string
		old, new   bool
		newEncrypt bool
	}{
		{"TrustNew", true, true, false},
		{"SignWithNew", true, true, true},
		{"PruneOld", false, true, true},
		{"Stable", false, true, true},
	} {
		waitForPhase(t, cfg, d, rotation.EncryptionKey.Name, c.phase)
		if got := configHas("key-1", "key-2"); got[0] != c.old || got[1] != c.new {
			t.Errorf("%s: the configuration holds key-1 %v and key-2 %v, want %v and %v", c.phase, got[0], got[1], c.old, c.new)
		}
		if first := bytes.Index(get(t, secret).Data[apiserver.EncryptionConfigKey], []byte("name: key-2")) < bytes.Index(get(t, secret).Data[apiserver.EncryptionConfigKey], []byte("name: key-1")); c.old && first != c.newEncrypt {
			t.Errorf("%s: key-2 encrypts: %v, want %v", c.phase, first, c.newEncrypt)
		}
		hash := get(t, d).Spec.Template.Annotations[apiserver.ConfigHashAnnotation]
		if c.phase != "Stable" && hashes[hash] {
			t.Errorf("%s: the pods did not roll (kube-apiserver reads its encryption configuration only at start)", c.phase)
		}
		hashes[hash] = true
	}
	assertStored("key-2")
	if got := fake.rewrites.Load() - rewritesBefore; got != 30 {
		t.Errorf("the rotation rewrote %d objects, want the 30 that key-1 encrypted", got)
	}

	// A resource leaves the list: its values are decrypted, the others
	// move to a new key, and the old key goes only then.
	current := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
	patch := client.MergeFrom(current.DeepCopy())
	current.Spec.Encryption.Resources = []string{"secrets"}
	if err := env.Client.Patch(ctx, current, patch); err != nil {
		t.Fatal(err)
	}
	waitForPhase(t, cfg, d, rotation.EncryptionKey.Name, "PruneOld")
	waitForPhase(t, cfg, d, rotation.EncryptionKey.Name, "Stable")
	assertStored("key-3", "configmaps")
	if got := configHas("key-2", "key-3"); got[0] || !got[1] {
		t.Errorf("after dropping configmaps the configuration holds key-2 %v and key-3 %v", got[0], got[1])
	}

	// Hibernated: a request waits for the tenant to wake.
	current = get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
	patch = client.MergeFrom(current.DeepCopy())
	current.Spec.MasterCount = ptr.To[int32](0)
	if err := env.Client.Patch(ctx, current, patch); err != nil {
		t.Fatal(err)
	}
	waitForPass(t, current)
	annotate(t, cfg, v1alpha1.RotateEncryptionKeyAnnotation, "2")
	eventually(t, 20*time.Second, "Encrypted says the rotation waits for the tenant to wake", func() error {
		if c := encryptedStatus(t, cfg); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "starts when the tenant wakes") {
			return fmt.Errorf("Encrypted is %v", c)
		}
		return nil
	})
	if got := storedPhase(t, cfg, rotation.EncryptionKey.Name); got != "Stable" {
		t.Fatalf("a hibernated tenant's rotation moved to %s", got)
	}
	current = get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
	patch = client.MergeFrom(current.DeepCopy())
	current.Spec.MasterCount = ptr.To[int32](1)
	if err := env.Client.Patch(ctx, current, patch); err != nil {
		t.Fatal(err)
	}
	waitForPhase(t, cfg, d, rotation.EncryptionKey.Name, "TrustNew")
}

// TestApiServerConfigReconciler_TurnsEncryptionOnWhereApiserversRun: a
// tenant whose apiservers already run without encryption (an operator
// upgrade, or a lost encryption Secret) first teaches every apiserver the
// new key, still writing plain text, before any encrypts with it: an
// apiserver that cannot decrypt never meets an encrypted value.
func TestApiServerConfigReconciler_TurnsEncryptionOnWhereApiserversRun(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "upgraded", nil)
	createReady(t, cfg)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.EncryptionSecretName("upgraded")}}
	before := get(t, secret).Data[apiserver.EncryptionKeysKey]
	if err := env.Client.Delete(ctx, secret); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "a new key is generated, decrypting only", func() error {
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(secret), s); err != nil {
			return err
		}
		if bytes.Equal(s.Data[apiserver.EncryptionKeysKey], before) {
			// A pass under way when the Secret went, which had read it,
			// writes it back, key and all (a key in use is never lost): it
			// is deleted again until a pass finds it gone.
			if s.DeletionTimestamp.IsZero() {
				_ = env.Client.Delete(ctx, s)
			}
			return fmt.Errorf("the Secret came back with its old key, from a pass that read it before the deletion: deleted again")
		}
		state, err := apiserver.RotationStateOf(rotation.EncryptionKey, s)
		if err != nil {
			return err
		}
		config := string(s.Data[apiserver.EncryptionConfigKey])
		identity, key := strings.Index(config, "identity: {}"), strings.Index(config, "name: key-1-")
		if state.Phase != rotation.TrustNew || identity < 0 || key < 0 || identity > key {
			return fmt.Errorf("phase %s, configuration:\n%s", state.Phase, config)
		}
		return nil
	})
	// The pass writes status after the Secret: the condition follows.
	eventually(t, 20*time.Second, "Encrypted says the values are not encrypted yet", func() error {
		if c := encryptedStatus(t, cfg); c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonReencrypting {
			return fmt.Errorf("Encrypted is %v while the key only decrypts", c)
		}
		return nil
	})
}
