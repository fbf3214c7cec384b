// Command storage-prefixes reads the resource catalog (JSON, from
// hack/resource-catalog) on its standard input and prints it again with,
// for each resource, the etcd key prefix under which the bundled
// kube-apiserver stores it (after --etcd-prefix). The prefixes come from
// upstream's own storage factories, so that the operator finds a resource's
// values in etcd (to prove that they were re-encrypted) where this version
// puts them: most resources under their name, a few under a name of their
// own (nodes under minions, services under services/specs), cohabiting
// resources under one prefix, and the resources of the apiextensions and
// aggregator servers under group/resource.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime/schema"
	serveroptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/kubernetes/pkg/controlplane"
	"k8s.io/kubernetes/pkg/kubeapiserver"
)

// resource is one entry of the resource catalog (hack/resource-catalog),
// with its etcd prefix.
type resource struct {
	Group      string   `json:"group"`
	Resource   string   `json:"resource"`
	Versions   []string `json:"versions"`
	EtcdPrefix string   `json:"etcdPrefix"`
}

type catalog struct {
	Version   string     `json:"version"`
	Resources []resource `json:"resources"`
}

// simpleStorageGroups are served by kube-apiserver's apiextensions and
// aggregator servers, whose etcd options apply a SimpleStorageFactory
// (pkg/controlplane/apiserver: apiextensions.go, aggregator.go).
var simpleStorageGroups = map[string]bool{"apiextensions.k8s.io": true, "apiregistration.k8s.io": true}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "storage-prefixes: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	var c catalog
	if err := json.NewDecoder(os.Stdin).Decode(&c); err != nil {
		return fmt.Errorf("reading the resource catalog: %w", err)
	}
	cfg := kubeapiserver.NewStorageFactoryConfig()
	cfg.APIResourceConfig = controlplane.DefaultAPIResourceConfigSource()
	factory, err := cfg.Complete(serveroptions.NewEtcdOptions(storagebackend.NewDefaultConfig("/registry", nil))).New()
	if err != nil {
		return fmt.Errorf("building kube-apiserver's storage factory: %w", err)
	}
	simple := &serveroptions.SimpleStorageFactory{}
	for i := range c.Resources {
		r := &c.Resources[i]
		gr := schema.GroupResource{Group: r.Group, Resource: r.Resource}
		if simpleStorageGroups[r.Group] {
			r.EtcdPrefix = simple.ResourcePrefix(gr)
		} else {
			r.EtcdPrefix = factory.ResourcePrefix(gr)
		}
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(c)
}
