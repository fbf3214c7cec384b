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
	"k8s.io/apimachinery/pkg/runtime/schema"
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

// identityKey stores in plain text.
var identityKey = EncryptionKey{Name: "identity", Provider: v1alpha1.EncryptionIdentity}

// NewEncryptionKey generates a key for provider, named name.
func NewEncryptionKey(provider v1alpha1.EncryptionProvider, name string) (EncryptionKey, error) {
	if provider == v1alpha1.EncryptionIdentity {
		return identityKey, nil
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
	return identityKey
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

// NewEncryptionKeys is the material of a tenant that had none: the spec's
// layout with a new key-1 encrypts at once, with identity as the old
// layout, so that whatever the tenant's etcd already holds (a tenant that
// had no encryption, an etcd restored from elsewhere) is rewritten and
// proven like after any rotation (rotation phase SignWithNew).
func NewEncryptionKeys(e *v1alpha1.EncryptionSpec) (EncryptionKeys, error) {
	provider, resources := EncryptionTarget(e)
	key, err := NewEncryptionKey(provider, "key-1")
	if err != nil {
		return EncryptionKeys{}, err
	}
	return EncryptionKeys{
		Current: EncryptionLayout{Key: key, Resources: resources},
		Old:     &EncryptionLayout{Key: identityKey, Resources: resources},
	}, nil
}

// NextKeyName is a name no key of m had: key-N, one past the highest.
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
	return fmt.Sprintf("key-%d", highest+1)
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
		for _, l := range append(layouts, EncryptionLayout{Key: identityKey}) {
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
		entries = []*entry{{keys: []EncryptionKey{identityKey}, resources: []string{"secrets"}}}
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
		if len(keys) == 0 {
			return m, fmt.Errorf("no key")
		}
		k := keys[0]
		if k.Provider == "" {
			k.Provider = legacy.Key.Provider
		}
		legacy.Key = k
		old := EncryptionLayout{Key: identityKey, Resources: legacy.Resources}
		return EncryptionKeys{Current: legacy, Old: &old}, nil
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, err
	}
	return m, nil
}

// DesiredEncryptionSecret holds the EncryptionConfiguration of m, the
// material itself and where its rotation stands, when
// spec.encryption.provider asks the operator to manage encryption; nil
// otherwise (the user's own configuration Secret).
func DesiredEncryptionSecret(c *Completed, m EncryptionKeys, state rotation.State) (*corev1.Secret, error) {
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

// EncryptedArea is where the values of encrypted resources lie in etcd and
// how each must begin once re-encryption is complete.
type EncryptedArea struct {
	// Resources stored there (cohabiting resources share an area).
	Resources []schema.GroupResource
	// Servers is the etcd that stores them: an override's, or the main one.
	Servers []string
	// KeyPrefix is the etcd key prefix, ending in "/".
	KeyPrefix string
	// Want is how every value must begin (EncryptionKey.StoredPrefix);
	// empty: no value may be encrypted (EncryptedValuePrefix).
	Want string
	// Key names the key that must have written every value.
	Key string
}

// EncryptionAreas are the areas of etcd whose values must all carry
// m.Current's key: every resource m.Current or m.Old names, resolved
// against the resources the catalog of c's version stores and the custom
// resources given (as kube-apiserver resolves wildcards), at the etcd
// prefix that version stores them under. A resource only m.Old encrypted
// must end up in plain text.
func EncryptionAreas(c *Completed, catalog *Catalog, custom []schema.GroupResource, m EncryptionKeys) ([]EncryptedArea, error) {
	known := map[schema.GroupResource]string{}
	for gr, prefix := range catalog.EtcdPrefixes {
		known[gr] = prefix
	}
	for _, gr := range custom {
		if _, ok := known[gr]; !ok {
			// Custom resources live under group/resource (apiextensions'
			// CRDRESTOptionsGetter).
			known[gr] = gr.Group + "/" + gr.Resource
		}
	}
	layouts := []EncryptionLayout{m.Current}
	if m.Old != nil {
		layouts = append(layouts, *m.Old)
	}
	byPrefix := map[string]*EncryptedArea{}
	var out []*EncryptedArea
	for gr, prefix := range known {
		name := gr.Resource
		if gr.Group != "" {
			name += "." + gr.Group
		}
		concerned := slices.ContainsFunc(layouts, func(l EncryptionLayout) bool {
			return l.Key.Provider != v1alpha1.EncryptionIdentity && l.Covers(name)
		})
		if !concerned {
			continue
		}
		key := m.Current.keyFor(name)
		a := byPrefix[prefix]
		if a == nil {
			a = &EncryptedArea{
				Servers:   etcdServersOf(&c.Spec.Etcd, catalog, prefix),
				KeyPrefix: strings.TrimSuffix(c.Spec.Etcd.Prefix, "/") + "/" + prefix + "/",
				Want:      key.StoredPrefix(),
				Key:       key.Name,
			}
			byPrefix[prefix] = a
			out = append(out, a)
		} else if a.Want != key.StoredPrefix() {
			return nil, fmt.Errorf("resources stored together under %s are encrypted with different keys (%s and %s): list all of %v alike in spec.encryption.resources",
				a.KeyPrefix, a.Key, key.Name, append(a.Resources, gr))
		}
		a.Resources = append(a.Resources, gr)
	}
	slices.SortFunc(out, func(a, b *EncryptedArea) int { return strings.Compare(a.KeyPrefix, b.KeyPrefix) })
	areas := make([]EncryptedArea, len(out))
	for i, a := range out {
		slices.SortFunc(a.Resources, func(x, y schema.GroupResource) int { return strings.Compare(x.String(), y.String()) })
		areas[i] = *a
	}
	return areas, nil
}

// etcdServersOf is the etcd that stores the resources under prefix: the
// override of a resource stored under the same prefix, or the main one.
func etcdServersOf(spec *v1alpha1.EtcdSpec, catalog *Catalog, prefix string) []string {
	for _, o := range spec.Overrides {
		gr := schema.GroupResource{Group: o.Group, Resource: o.Resource}
		p, ok := catalog.EtcdPrefixes[gr]
		if !ok {
			p = gr.Group + "/" + gr.Resource
		}
		if p == prefix {
			return o.Servers
		}
	}
	return spec.Servers
}
