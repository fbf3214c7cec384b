package apiserver

import "testing"

func TestPrefixInNamespace(t *testing.T) {
	for _, tt := range []struct {
		prefix string
		want   bool
	}{
		{"/tenants/team-a/x", true},
		{"tenants/team-a/x/", true},
		{"/tenants/team-a/x/../y", true},
		{"/tenants/team-a", false},
		{"/tenants/team-a/", false},
		{"/tenants/team-ab/x", false},
		{"/tenants/team-a/../team-b/x", false},
		{"/shared/x", false},
		{"/", false},
		{"", false}, // the default, /registry
	} {
		if got := PrefixInNamespace("team-a", tt.prefix); got != tt.want {
			t.Errorf("PrefixInNamespace(team-a, %q) = %v, want %v", tt.prefix, got, tt.want)
		}
	}
}
