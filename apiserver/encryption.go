package apiserver

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"sigs.k8s.io/yaml"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver/rotation"
)

// Encryption at rest as the operator manages it (spec.encryption.provider).
// A layout is what the apiservers encrypt with: one key over a set of
// resources. EncryptionKeys is the material the operator keeps: the layout
// that encrypts and, while a rotation lasts, the next or the old one, which
// only decrypts. The rendered EncryptionConfiguration follows from it, and
// the rotation (rotation.EncryptionKey) moves it: Generate sets Next,
// SwitchSigner makes Next current and the current one Old, and Old leaves
// once no value in etcd needs it (EncryptionAreas say where to look).

// Defaults of spec.encryption.
var (
	// DefaultEncryptedResources: see EncryptionSpec.Resources.
	DefaultEncryptedResources = []string{"secrets", "configmaps"}
	// DefaultEncryptionRotationPeriod is Gardener's period.
	DefaultEncryptionRotationPeriod = 28 * 24 * time.Hour
	// DefaultRewritesPerSecond bounds the re-encryption's writes.
	DefaultRewritesPerSecond int32 = 100
)

// EncryptionKey is one key of an encryption provider. The identity
// provider has no secret: it stores plain text.
type EncryptionKey struct {
	Name     string                      `json:"name"`
	Provider v1alpha1.EncryptionProvider `json:"provider"`
	// Secret is the raw key: 32 bytes.
	Secret []byte `json:"secret,omitempty"`
}

// IdentityKey stores in plain text.
var IdentityKey = EncryptionKey{Name: "identity", Provider: v1alpha1.EncryptionIdentity}

// NewEncryptionKey generates a key for provider, named name.
func NewEncryptionKey(provider v1alpha1.EncryptionProvider, name string) (EncryptionKey, error) {
	if provider == v1alpha1.EncryptionIdentity {
		return IdentityKey, nil
	}
	k := EncryptionKey{Name: name, Provider: provider, Secret: make([]byte, 32)}
	if _, err := rand.Read(k.Secret); err != nil {
		return EncryptionKey{}, fmt.Errorf("generating an encryption key: %w", err)
	}
	return k, nil
}

// String names the key without its secret, so that logs and errors never
// carry key material.
func (k EncryptionKey) String() string {
	return fmt.Sprintf("EncryptionKey{Name: %q, Provider: %s, %d bytes}", k.Name, k.Provider, len(k.Secret))
}

// GoString is String, for %#v.
func (k EncryptionKey) GoString() string { return k.String() }

// StoredPrefix is how every value kube-apiserver encrypts with k begins in
// etcd; empty for identity, whose values are plain (protobuf or JSON) and
// never begin with EncryptedValuePrefix.
func (k EncryptionKey) StoredPrefix() string {
	if k.Provider == v1alpha1.EncryptionIdentity {
		return ""
	}
	return fmt.Sprintf("%s%s:v1:%s:", EncryptedValuePrefix, k.Provider, k.Name)
}

// EncryptedValuePrefix begins every value an encryption provider wrote.
const EncryptedValuePrefix = "k8s:enc:"

// same reports whether k and o are one key.
func (k EncryptionKey) same(o EncryptionKey) bool {
	return k.Provider == o.Provider && k.Name == o.Name
}

// EncryptionLayout is one key over a set of resources (resource or
// resource.group, with kube-apiserver's wildcards).
type EncryptionLayout struct {
	Key       EncryptionKey `json:"key"`
	Resources []string      `json:"resources"`
}

// Covers reports whether the layout encrypts resource (a name as written in
// an EncryptionConfiguration, wildcard or not) with its key.
func (l EncryptionLayout) Covers(resource string) bool {
	_, group, _ := strings.Cut(resource, ".")
	for _, r := range l.Resources {
		if r == resource || r == "*.*" || (strings.HasPrefix(r, "*.") && r == "*."+group && !strings.HasPrefix(resource, "*")) {
			return true
		}
	}
	return false
}

// keyFor is the key the layout writes resource with: its own, or identity.
func (l EncryptionLayout) keyFor(resource string) EncryptionKey {
	if l.Key.Provider != v1alpha1.EncryptionIdentity && l.Covers(resource) {
		return l.Key
	}
	return IdentityKey
}

// Matches reports whether the layout is what the spec asks for.
func (l EncryptionLayout) Matches(provider v1alpha1.EncryptionProvider, resources []string) bool {
	if l.Key.Provider != provider {
		return false
	}
	if provider == v1alpha1.EncryptionIdentity {
		return true // nothing is encrypted, whatever the list
	}
	return slices.Equal(slices.Sorted(slices.Values(l.Resources)), slices.Sorted(slices.Values(resources)))
}

// EncryptionKeys is the material of the operator-managed encryption.
type EncryptionKeys struct {
	// Current encrypts.
	Current EncryptionLayout `json:"current"`
	// Next only decrypts: every apiserver learns it before any encrypts
	// with it (rotation phase TrustNew).
	Next *EncryptionLayout `json:"next,omitempty"`
	// Old only decrypts what Current has not rewritten yet (SignWithNew).
	Old *EncryptionLayout `json:"old,omitempty"`
	// ProvenAt is when the last proof found every stored value of the
	// resources written with Current's key.
	ProvenAt *time.Time `json:"provenAt,omitempty"`
}

// EncryptionTarget is the layout spec.encryption asks for, with its
// defaults: provider and resources.
func EncryptionTarget(e *v1alpha1.EncryptionSpec) (v1alpha1.EncryptionProvider, []string) {
	if e == nil || e.Provider == "" {
		return "", nil
	}
	resources := e.Resources
	if len(resources) == 0 {
		resources = DefaultEncryptedResources
	}
	return e.Provider, slices.Sorted(slices.Values(resources))
}

// NewEncryptionKeys is the material of a tenant that had none, and the
// rotation phase it starts in. Whatever the tenant's etcd already holds (a
// tenant that had no encryption, an etcd restored from elsewhere) is
// rewritten and proven like after any rotation. Without running apiservers
// the spec's layout with a new key encrypts at once, identity being the
// old layout (phase SignWithNew); apiservers that already run without
// encryption must first learn to decrypt with the key before any encrypts
// with it (phase TrustNew, the key as Next).
func NewEncryptionKeys(e *v1alpha1.EncryptionSpec, running bool) (EncryptionKeys, rotation.Phase, error) {
	provider, resources := EncryptionTarget(e)
	key, err := NewEncryptionKey(provider, EncryptionKeys{}.NextKeyName())
	if err != nil {
		return EncryptionKeys{}, "", err
	}
	plain := EncryptionLayout{Key: IdentityKey, Resources: resources}
	next := EncryptionLayout{Key: key, Resources: resources}
	if running && provider != v1alpha1.EncryptionIdentity {
		return EncryptionKeys{Current: plain, Next: &next}, rotation.TrustNew, nil
	}
	return EncryptionKeys{Current: next, Old: &plain}, rotation.SignWithNew, nil
}

// NextKeyName is a name no key had: key-N, one past the highest of m, with
// a random suffix, so that a key generated again after its Secret was lost
// never shares its name (and so the prefix of the values it writes) with
// one whose values may still be in etcd.
func (m EncryptionKeys) NextKeyName() string {
	highest := 0
	for _, l := range []*EncryptionLayout{&m.Current, m.Next, m.Old} {
		var n int
		if l != nil {
			if _, err := fmt.Sscanf(l.Key.Name, "key-%d", &n); err == nil && n > highest {
				highest = n
			}
		}
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix) // never fails (crypto/rand)
	return fmt.Sprintf("key-%d-%x", highest+1, suffix)
}

// Config renders the EncryptionConfiguration of m: for every resource, the
// key that encrypts it first, then those that only decrypt, then identity,
// so that values written before encryption was turned on stay readable.
// Resources named alike share an entry; named resources come before the
// wildcards of their group and *.* last, as kube-apiserver requires. The
// result holds key material: it goes in a Secret only.
func (m EncryptionKeys) Config() ([]byte, error) {
	layouts := []EncryptionLayout{m.Current}
	for _, l := range []*EncryptionLayout{m.Next, m.Old} {
		if l != nil {
			layouts = append(layouts, *l)
		}
	}
	var resources []string
	for _, l := range layouts {
		if l.Key.Provider != v1alpha1.EncryptionIdentity && len(l.Key.Secret) != 32 {
			return nil, fmt.Errorf("rendering the encryption configuration: key %q has %d bytes, %s needs 32", l.Key.Name, len(l.Key.Secret), l.Key.Provider)
		}
		resources = append(resources, l.Resources...)
	}
	slices.SortFunc(resources, func(a, b string) int {
		if c := wildcardRank(a) - wildcardRank(b); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	resources = slices.Compact(resources)

	type entry struct {
		keys      []EncryptionKey
		resources []string
	}
	var entries []*entry
	for _, r := range resources {
		var keys []EncryptionKey
		for _, l := range append(layouts, EncryptionLayout{Key: IdentityKey}) {
			k := l.keyFor(r)
			if !slices.ContainsFunc(keys, k.same) {
				keys = append(keys, k)
			}
		}
		if len(keys) == 1 {
			continue // identity alone: kube-apiserver's default
		}
		i := slices.IndexFunc(entries, func(e *entry) bool {
			return wildcardRank(e.resources[0]) == wildcardRank(r) && slices.EqualFunc(e.keys, keys, EncryptionKey.same)
		})
		if i < 0 {
			entries = append(entries, &entry{keys: keys})
			i = len(entries) - 1
		}
		entries[i].resources = append(entries[i].resources, r)
	}
	if len(entries) == 0 {
		// Nothing encrypted (the opt-out): kube-apiserver wants an entry.
		entries = []*entry{{keys: []EncryptionKey{IdentityKey}, resources: []string{"secrets"}}}
	}
	cfg := apiserverv1.EncryptionConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: apiserverv1.SchemeGroupVersion.String(), Kind: "EncryptionConfiguration"},
	}
	for _, e := range entries {
		rc := apiserverv1.ResourceConfiguration{Resources: e.resources}
		for _, k := range e.keys {
			p, err := providerOf(k)
			if err != nil {
				return nil, err
			}
			rc.Providers = append(rc.Providers, p)
		}
		cfg.Resources = append(cfg.Resources, rc)
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("rendering the encryption configuration: %w", err)
	}
	return out, nil
}

// wildcardRank orders resources as kube-apiserver wants them: named ones,
// then group wildcards, then *.*.
func wildcardRank(r string) int {
	switch {
	case r == "*.*":
		return 2
	case strings.HasPrefix(r, "*."):
		return 1
	default:
		return 0
	}
}

func providerOf(k EncryptionKey) (apiserverv1.ProviderConfiguration, error) {
	keys := []apiserverv1.Key{{Name: k.Name, Secret: base64.StdEncoding.EncodeToString(k.Secret)}}
	var p apiserverv1.ProviderConfiguration
	switch k.Provider {
	case v1alpha1.EncryptionIdentity:
		p.Identity = &apiserverv1.IdentityConfiguration{}
	case v1alpha1.EncryptionSecretbox:
		p.Secretbox = &apiserverv1.SecretboxConfiguration{Keys: keys}
	case v1alpha1.EncryptionAESCBC:
		p.AESCBC = &apiserverv1.AESConfiguration{Keys: keys}
	case v1alpha1.EncryptionAESGCM:
		p.AESGCM = &apiserverv1.AESConfiguration{Keys: keys}
	default:
		return p, fmt.Errorf("rendering the encryption configuration: unknown provider %q", k.Provider)
	}
	return p, nil
}

// EncryptionKeysKey keeps the material (EncryptionKeys, JSON) next to the
// configuration, so that it survives any change of the rendered file.
const EncryptionKeysKey = "keys.json"

// ParseEncryptionKeys reads the material of an encryption Secret. legacy
// is the spec's layout for a Secret written before the material had
// layouts (a bare list with one key, for the resources in the spec): it
// becomes Current, with identity as Old, so that whatever was stored
// before encryption was turned on gets rewritten and proven.
func ParseEncryptionKeys(data []byte, legacy EncryptionLayout) (EncryptionKeys, error) {
	var m EncryptionKeys
	if trimmed := strings.TrimSpace(string(data)); strings.HasPrefix(trimmed, "[") {
		var keys []EncryptionKey
		if err := json.Unmarshal(data, &keys); err != nil {
			return m, err
		}
		if len(keys) != 1 {
			// Releases before layouts wrote exactly one key.
			return m, fmt.Errorf("%d keys in the list of a release before key rotation, which wrote exactly one: restore the Secret from a backup", len(keys))
		}
		k := keys[0]
		if k.Provider == "" {
			k.Provider = legacy.Key.Provider
		}
		legacy.Key = k
		old := EncryptionLayout{Key: IdentityKey, Resources: legacy.Resources}
		return EncryptionKeys{Current: legacy, Old: &old}, nil
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, err
	}
	return m, nil
}

// desiredEncryptionSecret holds the EncryptionConfiguration of m, the
// material itself and where its rotation stands, when
// spec.encryption.provider asks the operator to manage encryption; nil
// otherwise (the user's own configuration Secret).
func desiredEncryptionSecret(c *Completed, m EncryptionKeys, state rotation.State) (*corev1.Secret, error) {
	if e := c.Spec.Encryption; e == nil || e.Provider == "" {
		return nil, nil
	}
	config, err := m.Config()
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding the encryption keys: %w", err)
	}
	annotations, err := RotationAnnotations(state)
	if err != nil {
		return nil, err
	}
	s := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: objectMeta(c, EncryptionSecretName(c.Name)),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{EncryptionConfigKey: config, EncryptionKeysKey: raw},
	}
	if len(annotations) > 0 {
		s.Annotations = annotations
	}
	return s, nil
}
