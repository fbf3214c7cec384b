package apiserver

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	"k8s.io/apiserver/pkg/storage/value"
	"sigs.k8s.io/yaml"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver/rotation"
)

func testKey(name string, provider v1alpha1.EncryptionProvider) EncryptionKey {
	k := EncryptionKey{Name: name, Provider: provider}
	if provider != v1alpha1.EncryptionIdentity {
		k.Secret = bytes.Repeat([]byte{byte(len(name))}, 32)
		copy(k.Secret, name)
	}
	return k
}

// loadUpstream loads a rendered configuration with kube-apiserver's own
// loader, which validates it as kube-apiserver does at start.
func loadUpstream(t *testing.T, config []byte) encryptionconfig.StaticTransformers {
	t.Helper()
	path := filepath.Join(t.TempDir(), "encryption-config.yaml")
	if err := os.WriteFile(path, config, 0o600); err != nil {
		t.Fatal(err)
	}
	loaded, err := encryptionconfig.LoadEncryptionConfig(context.Background(), path, false, "test")
	if err != nil {
		t.Fatalf("kube-apiserver refuses the rendered configuration: %v\n%s", err, config)
	}
	return encryptionconfig.StaticTransformers(loaded.Transformers)
}

// written is how upstream stores a value of gr with the configuration.
func written(t *testing.T, tr encryptionconfig.StaticTransformers, gr schema.GroupResource) []byte {
	t.Helper()
	out, err := tr.TransformerForResource(gr).TransformToStorage(context.Background(), []byte("k8s\x00value"), value.DefaultContext("/registry/x"))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestEncryptionKeys_Config renders each phase of a rotation and each
// change of layout, loads it with kube-apiserver's own code, and checks
// per resource which key writes (the value's prefix, as etcd will hold it)
// and which keys' values can still be read.
func TestEncryptionKeys_Config(t *testing.T) {
	k1, k2 := testKey("key-1", v1alpha1.EncryptionSecretbox), testKey("key-2", v1alpha1.EncryptionSecretbox)
	gcm := testKey("key-3", v1alpha1.EncryptionAESGCM)
	id := IdentityKey
	def := []string{"configmaps", "secrets"}
	layout := func(k EncryptionKey, r ...string) EncryptionLayout { return EncryptionLayout{Key: k, Resources: r} }
	ptr := func(l EncryptionLayout) *EncryptionLayout { return &l }
	secrets, configmaps, deployments, leases := schema.GroupResource{Resource: "secrets"}, schema.GroupResource{Resource: "configmaps"},
		schema.GroupResource{Group: "apps", Resource: "deployments"}, schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	tests := []struct {
		name   string
		keys   EncryptionKeys
		writes map[schema.GroupResource]EncryptionKey
		reads  map[schema.GroupResource][]EncryptionKey
	}{
		{name: "stable", keys: EncryptionKeys{Current: layout(k1, def...)},
			writes: map[schema.GroupResource]EncryptionKey{secrets: k1, configmaps: k1, deployments: id},
			reads:  map[schema.GroupResource][]EncryptionKey{secrets: {k1, id}}},
		{name: "new key only decrypts", keys: EncryptionKeys{Current: layout(k1, def...), Next: ptr(layout(k2, def...))},
			writes: map[schema.GroupResource]EncryptionKey{secrets: k1, configmaps: k1},
			reads:  map[schema.GroupResource][]EncryptionKey{secrets: {k1, k2, id}, configmaps: {k1, k2}}},
		{name: "new key encrypts, old decrypts", keys: EncryptionKeys{Current: layout(k2, def...), Old: ptr(layout(k1, def...))},
			writes: map[schema.GroupResource]EncryptionKey{secrets: k2, configmaps: k2},
			reads:  map[schema.GroupResource][]EncryptionKey{secrets: {k1, k2, id}}},
		{name: "turned on over plain data", keys: EncryptionKeys{Current: layout(k1, def...), Old: ptr(layout(id, def...))},
			writes: map[schema.GroupResource]EncryptionKey{secrets: k1, leases: id},
			reads:  map[schema.GroupResource][]EncryptionKey{secrets: {k1, id}}},
		{name: "turned off: plain writes, the key still decrypts", keys: EncryptionKeys{Current: layout(id, def...), Old: ptr(layout(k1, def...))},
			writes: map[schema.GroupResource]EncryptionKey{secrets: id, configmaps: id},
			reads:  map[schema.GroupResource][]EncryptionKey{secrets: {k1, id}}},
		{name: "off and at rest: nothing encrypted", keys: EncryptionKeys{Current: layout(id, def...)},
			writes: map[schema.GroupResource]EncryptionKey{secrets: id}},
		{name: "a resource added, another provider", keys: EncryptionKeys{Current: layout(gcm, "secrets", "*.apps"), Old: ptr(layout(k1, "secrets", "configmaps"))},
			writes: map[schema.GroupResource]EncryptionKey{secrets: gcm, deployments: gcm, configmaps: id},
			reads:  map[schema.GroupResource][]EncryptionKey{secrets: {k1, gcm, id}, configmaps: {k1, id}, deployments: {gcm, id}}},
		{name: "everything, then a named resource leaves a wildcard", keys: EncryptionKeys{Current: layout(k2, "*.*"), Old: ptr(layout(k1, "secrets"))},
			writes: map[schema.GroupResource]EncryptionKey{secrets: k2, leases: k2, deployments: k2},
			reads:  map[schema.GroupResource][]EncryptionKey{secrets: {k1, k2, id}, leases: {k2, id}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			config, err := tt.keys.Config()
			if err != nil {
				t.Fatal(err)
			}
			tr := loadUpstream(t, config)
			for gr, k := range tt.writes {
				got := written(t, tr, gr)
				if want := k.StoredPrefix(); want == "" && bytes.HasPrefix(got, []byte(EncryptedValuePrefix)) || want != "" && !bytes.HasPrefix(got, []byte(want)) {
					t.Errorf("%s is written as %q, want it written with %s\n%s", gr, got[:min(len(got), 40)], k.Name, config)
				}
			}
			for gr, keys := range tt.reads {
				writer, ok := tt.writes[gr]
				if !ok {
					t.Fatalf("the case names no writer of %s", gr)
				}
				for _, k := range keys {
					// Stale is what makes kube-apiserver write an unchanged
					// object again, which the re-encryption relies on: a
					// value read with any key but the writer is stale.
					wantStale := !k.same(writer)
					if k.Provider == v1alpha1.EncryptionIdentity {
						_, stale, err := tr.TransformerForResource(gr).TransformFromStorage(context.Background(), []byte("k8s\x00plain"), value.DefaultContext("/registry/x"))
						if err != nil || stale != wantStale {
							t.Errorf("%s stored in plain text: read error %v, stale %v (want %v)\n%s", gr, err, stale, wantStale, config)
						}
						continue
					}
					// A value as k alone writes it.
					alone, err := EncryptionKeys{Current: EncryptionLayout{Key: k, Resources: []string{"*.*"}}}.Config()
					if err != nil {
						t.Fatal(err)
					}
					stored := written(t, loadUpstream(t, alone), gr)
					_, stale, err := tr.TransformerForResource(gr).TransformFromStorage(context.Background(), stored, value.DefaultContext("/registry/x"))
					if err != nil || stale != wantStale {
						t.Errorf("%s written with %s: read error %v, stale %v (want %v)\n%s", gr, k.Name, err, stale, wantStale, config)
					}
				}
			}
		})
	}
}

func TestDesiredEncryptionSecret(t *testing.T) {
	cfg := sample(t, "minimal")
	cfg.Spec.Encryption = &v1alpha1.EncryptionSpec{ConfigSecretName: "mine"}
	if s, err := desiredEncryptionSecret(complete(t, cfg, Inputs{}), EncryptionKeys{}, rotation.State{}); s != nil || err != nil {
		t.Fatalf("with the user's own configuration there is no Secret, got %v, %v", s, err)
	}
	cfg.Spec.Encryption = &v1alpha1.EncryptionSpec{Provider: "secretbox"}
	c := complete(t, cfg, Inputs{})
	key := EncryptionKey{Name: "key-2", Provider: v1alpha1.EncryptionSecretbox, Secret: []byte("0123456789abcdef0123456789abcdef")}
	old := EncryptionLayout{Key: EncryptionKey{Name: "key-1", Provider: v1alpha1.EncryptionSecretbox, Secret: make([]byte, 32)}, Resources: []string{"secrets"}}
	keys := EncryptionKeys{Current: EncryptionLayout{Key: key, Resources: DefaultEncryptedResources}, Old: &old}
	s, err := desiredEncryptionSecret(c, keys, rotation.State{Phase: rotation.SignWithNew, Since: encryptionTestTime, SignerSince: encryptionTestTime, Request: "r"})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "objects/encryption-secret.yaml", toYAML(t, s))
	parsed, err := ParseEncryptionKeys(s.Data[EncryptionKeysKey], EncryptionLayout{})
	if err != nil || !parsed.Current.Matches(v1alpha1.EncryptionSecretbox, DefaultEncryptedResources) || parsed.Old == nil || !slices.Equal(parsed.Old.Key.Secret, old.Key.Secret) {
		t.Fatalf("the Secret's material does not read back: %+v, %v", parsed, err)
	}
	short := EncryptionKeys{Current: EncryptionLayout{Key: EncryptionKey{Name: "short", Provider: v1alpha1.EncryptionSecretbox, Secret: []byte("SHORTKEY")}}}
	if _, err := desiredEncryptionSecret(c, short, rotation.State{}); err == nil || strings.Contains(err.Error(), "SHORTKEY") {
		t.Fatalf("a short key must be refused without echoing it, got %v", err)
	}
	if got := fmt.Sprintf("%v %+v %#v %v", key, key, []EncryptionKey{key}, keys); strings.Contains(got, "0123456789") {
		t.Fatalf("formatting the keys printed a secret: %s", got)
	}
}

// TestParseEncryptionKeys_Legacy: a Secret written before keys had
// layouts (a bare list) becomes the spec's layout over plain data, so that
// what was stored before encryption was turned on gets proven.
func TestParseEncryptionKeys_Legacy(t *testing.T) {
	m, err := ParseEncryptionKeys([]byte(`[{"Name":"key-1","Secret":"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}]`),
		EncryptionLayout{Key: EncryptionKey{Provider: v1alpha1.EncryptionAESCBC}, Resources: []string{"secrets"}})
	if err != nil {
		t.Fatal(err)
	}
	if m.Current.Key.Name != "key-1" || m.Current.Key.Provider != v1alpha1.EncryptionAESCBC || string(m.Current.Key.Secret) != "0123456789abcdef0123456789abcdef" ||
		!slices.Equal(m.Current.Resources, []string{"secrets"}) || m.Old == nil || m.Old.Key.Provider != v1alpha1.EncryptionIdentity {
		t.Fatalf("legacy keys read as %+v (old %+v)", m.Current, m.Old)
	}
	next, again := m.NextKeyName(), m.NextKeyName()
	if !strings.HasPrefix(next, "key-2-") || next == again {
		t.Errorf("NextKeyName = %s then %s, want key-2 with a random suffix, never twice the same", next, again)
	}
	if first := (EncryptionKeys{}).NextKeyName(); !strings.HasPrefix(first, "key-1-") || first == (EncryptionKeys{}).NextKeyName() {
		t.Errorf("a first key is named %s: a key generated again after its Secret was lost would share the prefix of the lost one's values", first)
	}
	if _, err := ParseEncryptionKeys([]byte(`[{"Name":"key-1","Secret":"AA=="},{"Name":"key-0","Secret":"AA=="}]`), EncryptionLayout{}); err == nil {
		t.Error("a legacy list of two keys was read as one")
	}
}

// TestEncryptionAreas: where in etcd the proof looks, from the catalog of
// the spec's version (generated from upstream's storage factories).
func TestEncryptionAreas(t *testing.T) {
	cfg := sample(t, "ha") // events on an etcd of their own
	c := complete(t, cfg, Inputs{})
	k1, k2 := testKey("key-1", v1alpha1.EncryptionSecretbox), testKey("key-2", v1alpha1.EncryptionSecretbox)
	main, events := c.Spec.Etcd.Servers, c.Spec.Etcd.Overrides[0].Servers
	at := func(prefix string) string { return c.Spec.Etcd.Prefix + "/" + prefix + "/" }
	widgets := schema.GroupResource{Group: "example.com", Resource: "widgets"}
	type area struct {
		prefix  string
		servers []string
		want    string
	}
	tests := []struct {
		name string
		keys EncryptionKeys
		want []area
	}{
		{name: "default", keys: EncryptionKeys{Current: EncryptionLayout{Key: k2, Resources: DefaultEncryptedResources}, Old: &EncryptionLayout{Key: k1, Resources: []string{"secrets"}}},
			want: []area{{at("configmaps"), main, k2.StoredPrefix()}, {at("secrets"), main, k2.StoredPrefix()}}},
		{name: "prefixes of their own, an override, cohabiting resources, a custom resource",
			keys: EncryptionKeys{Current: EncryptionLayout{Key: k2, Resources: []string{"nodes", "services", "events", "events.events.k8s.io", "widgets.example.com"}}},
			want: []area{{at("events"), events, k2.StoredPrefix()}, {at("example.com/widgets"), main, k2.StoredPrefix()},
				{at("minions"), main, k2.StoredPrefix()}, {at("services/specs"), main, k2.StoredPrefix()}}},
		{name: "a resource that leaves must end up in plain text", keys: EncryptionKeys{Current: EncryptionLayout{Key: k2, Resources: []string{"secrets"}}, Old: &EncryptionLayout{Key: k1, Resources: []string{"configmaps", "secrets"}}},
			want: []area{{at("configmaps"), main, ""}, {at("secrets"), main, k2.StoredPrefix()}}},
		{name: "turned off", keys: EncryptionKeys{Current: EncryptionLayout{Key: IdentityKey, Resources: []string{"secrets"}}, Old: &EncryptionLayout{Key: k1, Resources: []string{"secrets"}}},
			want: []area{{at("secrets"), main, ""}}},
		{name: "off and at rest: nothing to prove", keys: EncryptionKeys{Current: EncryptionLayout{Key: IdentityKey, Resources: []string{"secrets"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			areas, err := EncryptionAreas(c, c.Catalog, map[schema.GroupResource]string{widgets: OtherResourcePrefix(widgets, true)}, tt.keys)
			if err != nil {
				t.Fatal(err)
			}
			var got []area
			for _, a := range areas {
				got = append(got, area{a.KeyPrefix, a.Servers, a.Want})
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("areas = %v\nwant    %v", got, tt.want)
			}
		})
	}
	wild, err := EncryptionAreas(c, c.Catalog, nil, EncryptionKeys{Current: EncryptionLayout{Key: k1, Resources: []string{"*.apps"}}})
	if err != nil {
		t.Fatal(err)
	}
	var prefixes []string
	for _, a := range wild {
		prefixes = append(prefixes, a.KeyPrefix)
	}
	for _, want := range []string{at("deployments"), at("statefulsets"), at("controllerrevisions")} {
		if !slices.Contains(prefixes, want) {
			t.Errorf("*.apps does not cover %s: %v", want, prefixes)
		}
	}
	if slices.Contains(prefixes, at("secrets")) {
		t.Errorf("*.apps covers secrets: %v", prefixes)
	}
}

var encryptionTestTime = time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)

// TestDefaultEncryption_PassesCIS: a default tenant meets CIS 1.2.27 (an
// encryption configuration) and 1.2.28 (its first provider for Secrets is
// aescbc, kms or secretbox), as kube-apiserver loads it.
func TestDefaultEncryption_PassesCIS(t *testing.T) {
	c := complete(t, sample(t, "minimal"), Inputs{})
	a, err := Args(c)
	if err != nil {
		t.Fatal(err)
	}
	if got := flagValues(a, "encryption-provider-config"); !slices.Equal(got, []string{EncryptionConfigFile}) {
		t.Fatalf("CIS 1.2.27: --encryption-provider-config is %v", got)
	}
	keys, phase, err := NewEncryptionKeys(c.Spec.Encryption, false)
	if err != nil || phase != rotation.SignWithNew {
		t.Fatal(phase, err)
	}
	s, err := desiredEncryptionSecret(c, keys, rotation.State{})
	if err != nil {
		t.Fatal(err)
	}
	var cfg apiserverv1.EncryptionConfiguration
	if err := yaml.UnmarshalStrict(s.Data[EncryptionConfigKey], &cfg); err != nil {
		t.Fatal(err)
	}
	tr := loadUpstream(t, s.Data[EncryptionConfigKey])
	for _, gr := range []schema.GroupResource{{Resource: "secrets"}, {Resource: "configmaps"}} {
		first := cfg.Resources[slices.IndexFunc(cfg.Resources, func(r apiserverv1.ResourceConfiguration) bool { return slices.Contains(r.Resources, gr.Resource) })].Providers[0]
		if first.Secretbox == nil && first.AESCBC == nil && first.KMS == nil {
			t.Errorf("CIS 1.2.28: the first provider of %s is %+v", gr, first)
		}
		if got := written(t, tr, gr); !bytes.HasPrefix(got, []byte("k8s:enc:secretbox:v1:"+keys.Current.Key.Name+":")) {
			t.Errorf("a default tenant stores %s as %q", gr, got[:min(len(got), 30)])
		}
	}
}
