// Command resource-catalog starts a bundled kube-apiserver (-kube-apiserver,
// with etcd from bin/) with every
// API group and version enabled and prints, as JSON, the group/resources it
// serves. The operator checks etcd overrides and watch-cache settings against
// this list, since kube-apiserver silently ignores an unknown resource there.
// make generate writes it to apiserver/catalog/.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// resource is one built-in group/resource with the versions that serve it.
type resource struct {
	Group    string   `json:"group"`
	Resource string   `json:"resource"`
	Versions []string `json:"versions"`
}

type catalog struct {
	Version   string     `json:"version"`
	Resources []resource `json:"resources"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "resource-catalog: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	apiserverBinary := flag.String("kube-apiserver", "", "the kube-apiserver binary to read (default: the one of KUBEBUILDER_ASSETS or bin/)")
	flag.Parse()
	bin := os.Getenv("KUBEBUILDER_ASSETS")
	if bin == "" {
		bin = "bin"
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	env := &envtest.Environment{BinaryAssetsDirectory: bin}
	binary := filepath.Join(bin, "kube-apiserver")
	if *apiserverBinary != "" {
		if binary, err = filepath.Abs(*apiserverBinary); err != nil {
			return err
		}
	}
	env.ControlPlane.GetAPIServer().Path = binary
	// Serve every group and version the binary knows, alpha ones included,
	// so the catalog lists every resource an etcd override could name.
	env.ControlPlane.GetAPIServer().Configure().
		Set("runtime-config", "api/all=true").
		Set("feature-gates", "AllAlpha=true,AllBeta=true")
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("starting the bundled kube-apiserver %s (run make bundled first): %w", binary, err)
	}
	defer func() { _ = env.Stop() }()

	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating a discovery client: %w", err)
	}
	info, err := dc.ServerVersion()
	if err != nil {
		return fmt.Errorf("reading /version: %w", err)
	}
	_, all, err := dc.ServerGroupsAndResources()
	if err != nil {
		return fmt.Errorf("reading discovery: %w", err)
	}
	versions := map[schema.GroupResource]map[string]bool{}
	for _, list := range all {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			return fmt.Errorf("parsing group version %q: %w", list.GroupVersion, err)
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue // subresources and virtual resources (reviews, bindings) have no storage of their own
			}
			gr := schema.GroupResource{Group: gv.Group, Resource: r.Name}
			if versions[gr] == nil {
				versions[gr] = map[string]bool{}
			}
			versions[gr][gv.Version] = true
		}
	}
	c := catalog{Version: info.GitVersion}
	for gr, vs := range versions {
		r := resource{Group: gr.Group, Resource: gr.Resource}
		for v := range vs {
			r.Versions = append(r.Versions, v)
		}
		sort.Strings(r.Versions)
		c.Resources = append(c.Resources, r)
	}
	sort.Slice(c.Resources, func(i, j int) bool {
		a, b := c.Resources[i], c.Resources[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		return a.Resource < b.Resource
	})
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(c)
}
