package tenantio

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// API is what the operator does through a tenant's own API: the
// re-encryption rewrites stored objects there, so that kube-apiserver
// encrypts them again with the key that encrypts now.
type API interface {
	// Resources are the group/resources the tenant serves that can be
	// rewritten (listed, patched), custom resources included. When a
	// group's discovery failed, the others come with an error.
	Resources(ctx context.Context) (map[schema.GroupResource]Resource, error)
	// Rewrite writes an object back unchanged. An object that is gone is
	// not an error: whatever replaced it was written with the current key.
	Rewrite(ctx context.Context, r Resource, namespace, name string) error
	// Metrics reads the /metrics of the apiserver pod at podIP (each
	// apiserver counts its own requests).
	Metrics(ctx context.Context, podIP string) ([]byte, error)
}

// Resource is one resource a tenant serves.
type Resource struct {
	// Version is the served version the operator talks to (the
	// preferred one).
	schema.GroupVersionResource
	Namespaced bool
	// Custom: a custom resource (a CRD's), stored under group/resource.
	Custom bool
}

// Timeout bounds each call to a tenant's API.
const Timeout = 10 * time.Second

// Connect reaches a tenant's API at host:port (its Service), as the
// administrator adminKubeconfig holds; serverName, a SAN of the serving
// certificate, verifies an apiserver pod reached at its own address on
// podPort.
func Connect(adminKubeconfig []byte, host string, port int32, serverName string, podPort int32) (API, error) {
	rc, err := clientcmd.RESTConfigFromKubeConfig(adminKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("connecting to the tenant's API: reading the admin kubeconfig: %w", err)
	}
	rc.Host = "https://" + net.JoinHostPort(host, strconv.Itoa(int(port)))
	rc.Timeout = Timeout
	// The operator paces its own writes (spec.encryption.rewritesPerSecond).
	rc.QPS, rc.Burst = -1, 0
	rc.UserAgent = "apiserver-operator"
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("connecting to the tenant's API at %s: %w", rc.Host, err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("connecting to the tenant's API at %s: %w", rc.Host, err)
	}
	return &client{dyn: dyn, disc: disc, host: rc.Host, rc: rc, clusterIP: serverName, port: podPort}, nil
}

type client struct {
	dyn  dynamic.Interface
	disc discovery.DiscoveryInterface
	host string
	// rc reaches the Service; clusterIP (a SAN of the serving
	// certificate) verifies a pod reached at its own address, on port.
	rc        *rest.Config
	clusterIP string
	port      int32
}

// Metrics implements API.
func (t *client) Metrics(ctx context.Context, podIP string) ([]byte, error) {
	rc := rest.CopyConfig(t.rc)
	rc.Host = "https://" + net.JoinHostPort(podIP, strconv.Itoa(int(t.port)))
	rc.TLSClientConfig.ServerName = t.clusterIP
	rc.GroupVersion, rc.NegotiatedSerializer = &schema.GroupVersion{}, scheme.Codecs.WithoutConversion()
	rcl, err := rest.RESTClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("reaching the apiserver pod at %s: %w", rc.Host, err)
	}
	data, err := rcl.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the metrics of the apiserver pod at %s: %w", rc.Host, err)
	}
	return data, nil
}

// crdResource is where a tenant lists its custom resource definitions.
var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// Resources implements API.
func (t *client) Resources(ctx context.Context) (map[schema.GroupResource]Resource, error) {
	lists, discoveryErr := t.disc.ServerPreferredResources()
	if discoveryErr != nil && len(lists) == 0 {
		return nil, fmt.Errorf("reading the discovery of the tenant's API at %s: %w", t.host, discoveryErr)
	}
	crds, err := t.dyn.Resource(crdResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the custom resource definitions of the tenant's API at %s: %w", t.host, err)
	}
	custom := map[schema.GroupResource]bool{}
	for _, crd := range crds.Items {
		group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
		plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
		custom[schema.GroupResource{Group: group, Resource: plural}] = true
	}
	out := map[schema.GroupResource]Resource{}
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			if !canRewrite(r) {
				continue
			}
			gr := schema.GroupResource{Group: gv.Group, Resource: r.Name}
			out[gr] = Resource{GroupVersionResource: gv.WithResource(r.Name), Namespaced: r.Namespaced, Custom: custom[gr]}
		}
	}
	if discoveryErr != nil {
		// A group whose discovery failed (an aggregated API that is down):
		// enough to rewrite with, not to prove that nothing was missed.
		return out, fmt.Errorf("reading the discovery of the tenant's API at %s: %w", t.host, discoveryErr)
	}
	return out, nil
}

func canRewrite(r metav1.APIResource) bool {
	has := func(verb string) bool {
		for _, v := range r.Verbs {
			if v == verb {
				return true
			}
		}
		return false
	}
	return has("list") && has("patch")
}

// Rewrite implements API with an empty merge patch: kube-apiserver
// writes an unchanged object again only when it read it with a key that no
// longer encrypts (the value is stale), which is exactly what must be
// rewritten; an object already under the current key costs no write.
func (t *client) Rewrite(ctx context.Context, r Resource, namespace, name string) error {
	ri := t.dyn.Resource(r.GroupVersionResource)
	var err error
	if r.Namespaced {
		_, err = ri.Namespace(namespace).Patch(ctx, name, types.MergePatchType, []byte("{}"), metav1.PatchOptions{FieldManager: "apiserver-operator-reencrypt"})
	} else {
		_, err = ri.Patch(ctx, name, types.MergePatchType, []byte("{}"), metav1.PatchOptions{FieldManager: "apiserver-operator-reencrypt"})
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
