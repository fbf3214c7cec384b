package apiserver

import (
	"maps"
	"path"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

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
// against the resources the catalog of c's version stores and the others
// the tenant serves (as kube-apiserver resolves wildcards), at the etcd
// prefix that version stores them under. A resource only m.Old encrypted
// must end up in plain text. others maps resources the catalog does not
// know to their etcd prefix (see OtherResourcePrefix).
func EncryptionAreas(c *Completed, catalog *Catalog, others map[schema.GroupResource]string, m EncryptionKeys) ([]EncryptedArea, error) {
	known := map[schema.GroupResource]string{}
	for gr, prefix := range others {
		known[gr] = prefix
	}
	for gr, prefix := range catalog.EtcdPrefixes {
		known[gr] = prefix
	}
	layouts := []EncryptionLayout{m.Current}
	if m.Old != nil {
		layouts = append(layouts, *m.Old)
	}
	byPrefix := map[string]*EncryptedArea{}
	var out []*EncryptedArea
	// Resources that share a prefix (core and events.k8s.io events) are
	// stored through the first one's storage, core first, and encrypted
	// as it is.
	grs := slices.SortedFunc(maps.Keys(known), func(a, b schema.GroupResource) int {
		if (a.Group == "") != (b.Group == "") {
			if a.Group == "" {
				return -1
			}
			return 1
		}
		return strings.Compare(a.String(), b.String())
	})
	for _, gr := range grs {
		prefix := known[gr]
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
				Servers:   c.Etcd.ServersAt(catalog, prefix),
				KeyPrefix: EtcdKeyPrefix(c, prefix),
				Want:      key.StoredPrefix(),
				Key:       key.Name,
			}
			byPrefix[prefix] = a
			out = append(out, a)
		}
		a.Resources = append(a.Resources, gr)
	}
	slices.SortFunc(out, func(a, b *EncryptedArea) int { return strings.Compare(a.KeyPrefix, b.KeyPrefix) })
	areas := make([]EncryptedArea, len(out))
	for i, a := range out {
		areas[i] = *a
	}
	return areas, nil
}

// EtcdKeyPrefix is where c's version keeps the resources stored under the
// catalog prefix resourcePrefix, joined as upstream's etcd store joins it
// (path.Join, so "/a//b/" and "/a/b" are one prefix), ending in "/".
func EtcdKeyPrefix(c *Completed, resourcePrefix string) string {
	return path.Join("/", c.Spec.Etcd.Prefix, resourcePrefix) + "/"
}

// OtherResourcePrefix is the etcd prefix of a resource the tenant serves
// that the catalog does not list: a custom resource under group/resource
// (apiextensions' CRDRESTOptionsGetter), a built-in one of a version the
// operator does not bundle under its name (the storage factory's default).
func OtherResourcePrefix(gr schema.GroupResource, custom bool) string {
	if custom {
		return gr.Group + "/" + gr.Resource
	}
	return strings.ToLower(gr.Resource)
}

// EncryptionIncomplete reports whether some resource the layout to reach
// encrypts was not encrypted by the layout it replaces (it is being added,
// or encryption is being turned on): its values may still be plain.
func EncryptionIncomplete(from, to EncryptionLayout) bool {
	if to.Key.Provider == v1alpha1.EncryptionIdentity {
		return false
	}
	for _, r := range to.Resources {
		if from.Key.Provider == v1alpha1.EncryptionIdentity || !from.Covers(r) {
			return true
		}
	}
	return false
}
