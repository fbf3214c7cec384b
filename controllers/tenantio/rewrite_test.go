package tenantio

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// recordingAPI records the rewrites asked of it; it fails the names in
// fail.
type recordingAPI struct {
	mu        sync.Mutex
	rewritten []string
	fail      map[string]bool
}

func (a *recordingAPI) Resources(context.Context) (map[schema.GroupResource]Resource, error) {
	return nil, nil
}
func (a *recordingAPI) Metrics(context.Context, string, ...string) ([]byte, error) { return nil, nil }
func (a *recordingAPI) Rewrite(_ context.Context, r Resource, namespace, name string) error {
	if a.fail[name] {
		return errors.New("conflict")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rewritten = append(a.rewritten, r.Resource+" "+namespace+"/"+name)
	return nil
}

func TestRewriteAll_WritesBackWhatTheTenantServes(t *testing.T) {
	secrets := schema.GroupResource{Resource: "secrets"}
	nodes := schema.GroupResource{Resource: "nodes"}
	served := map[schema.GroupResource]Resource{
		secrets: {GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, Namespaced: true},
		nodes:   {GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "nodes"}},
	}
	stored := []Stored{
		{Resources: []schema.GroupResource{secrets}, KeyPrefix: "/registry/secrets/", Key: "/registry/secrets/ns-a/one"},
		{Resources: []schema.GroupResource{nodes}, KeyPrefix: "/registry/minions/", Key: "/registry/minions/node-1"},
		{Resources: []schema.GroupResource{{Group: "example.com", Resource: "widgets"}}, KeyPrefix: "/registry/example.com/widgets/", Key: "/registry/example.com/widgets/w"},
		{Resources: []schema.GroupResource{secrets}, KeyPrefix: "/registry/secrets/", Key: "/registry/secrets/ns-b/busy"},
	}
	api := &recordingAPI{fail: map[string]bool{"busy": true}}
	n, err := RewriteAll(context.Background(), api, served, stored, 1000, 10*time.Second)
	if n != 2 {
		t.Errorf("%d rewritten, want the 2 the tenant serves and took", n)
	}
	slices.Sort(api.rewritten)
	if want := []string{"nodes /node-1", "secrets ns-a/one"}; !slices.Equal(api.rewritten, want) {
		t.Errorf("rewrote %v, want %v", api.rewritten, want)
	}
	if err == nil || !strings.Contains(err.Error(), "none of [widgets.example.com] is served") || !strings.Contains(err.Error(), "rewriting secrets ns-b/busy: conflict") {
		t.Errorf("the failures are not both reported: %v", err)
	}
}
