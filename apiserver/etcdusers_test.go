package apiserver

import (
	"slices"
	"testing"
)

func TestEtcdRolePermissions_CoverTheKeysUnderThePrefixAlone(t *testing.T) {
	for prefix, want := range map[string]EtcdKeyRange{
		"/tenants/a":  {Key: "/tenants/a/", End: "/tenants/a0"},
		"/tenants/a/": {Key: "/tenants/a/", End: "/tenants/a0"},
		"tenants//a":  {Key: "/tenants/a/", End: "/tenants/a0"},
		"":            {Key: "/registry/", End: "/registry0"},
		"/":           {Key: "/", End: "0"},
	} {
		got := EtcdRolePermissions(prefix)
		if !slices.Equal(got, []EtcdKeyRange{want}) {
			t.Errorf("prefix %q: permissions %q, want %q", prefix, got, want)
		}
		// kube-apiserver's keys are inside, the neighbours' are not.
		r := got[0]
		in := func(k string) bool { return k >= r.Key && k < r.End }
		if prefix == "/tenants/a" {
			for k, inside := range map[string]bool{
				"/tenants/a/pods/ns/p": true, "/tenants/a/health": true,
				"/tenants/a": false, "/tenants/ab/pods/ns/p": false, "/tenants/a0": false, "/tenants/": false, "compact_rev_key": false,
			} {
				if in(k) != inside {
					t.Errorf("key %q inside %q: %v, want %v", k, r, in(k), inside)
				}
			}
		}
	}
	if got := prefixRangeEnd("a\xff\xff"); got != "b" {
		t.Errorf("the range end of a\\xff\\xff is %q, want b", got)
	}
}

func TestEtcdUserName_IsTheTenantsOwn(t *testing.T) {
	if a, b := EtcdUserName("ns", "a-b"), EtcdUserName("ns-a", "b"); a == b {
		t.Errorf("two tenants share the etcd user %q", a)
	}
}
