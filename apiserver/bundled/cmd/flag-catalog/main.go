// Command flag-catalog prints, as JSON, every flag that the bundled
// kube-apiserver registers: its name, type, default, and whether it is
// deprecated, hidden or repeatable. The operator validates users' extra
// arguments against this catalog (make generate writes it to
// apiserver/catalog/).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/spf13/pflag"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	kubeoptions "k8s.io/kubernetes/pkg/kubeapiserver/options"
)

// flag is one kube-apiserver flag in the catalog.
type flag struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Default    string `json:"default,omitempty"`
	Deprecated string `json:"deprecated,omitempty"`
	Hidden     bool   `json:"hidden,omitempty"`
	Repeatable bool   `json:"repeatable,omitempty"`
}

// featureGate is one feature gate kube-apiserver knows.
type featureGate struct {
	Name          string `json:"name"`
	Default       bool   `json:"default"`
	PreRelease    string `json:"preRelease"`
	LockToDefault bool   `json:"lockToDefault,omitempty"`
}

// admissionPlugin is one admission plugin compiled into kube-apiserver.
type admissionPlugin struct {
	Name      string `json:"name"`
	DefaultOn bool   `json:"defaultOn,omitempty"`
}

type catalog struct {
	Version          string            `json:"version"`
	Flags            []flag            `json:"flags"`
	FeatureGates     []featureGate     `json:"featureGates"`
	AdmissionPlugins []admissionPlugin `json:"admissionPlugins"`
}

// accumulating are the flag types that are not pflag.SliceValue but still
// add to their value when the flag is repeated.
var accumulating = map[string]bool{
	"mapStringString":                    true,
	"mapStringBool":                      true,
	"stringToString":                     true,
	"colonSeparatedMultimapStringString": true,
	"namedCertKey":                       true,
}

func main() {
	cmd := app.NewAPIServerCommand()
	c := catalog{Version: version.Get().GitVersion}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		_, slice := f.Value.(pflag.SliceValue)
		c.Flags = append(c.Flags, flag{
			Name:       f.Name,
			Type:       f.Value.Type(),
			Default:    f.DefValue,
			Deprecated: f.Deprecated,
			Hidden:     f.Hidden,
			// Slices, maps and lists of certificates accumulate over
			// repeated flags.
			Repeatable: slice || accumulating[f.Value.Type()],
		})
	})
	sort.Slice(c.Flags, func(i, j int) bool { return c.Flags[i].Name < c.Flags[j].Name })

	for name, spec := range utilfeature.DefaultMutableFeatureGate.GetAll() {
		c.FeatureGates = append(c.FeatureGates, featureGate{
			Name:          string(name),
			Default:       spec.Default,
			PreRelease:    string(spec.PreRelease),
			LockToDefault: spec.LockToDefault,
		})
	}
	sort.Slice(c.FeatureGates, func(i, j int) bool { return c.FeatureGates[i].Name < c.FeatureGates[j].Name })

	off := kubeoptions.DefaultOffAdmissionPlugins()
	for _, name := range kubeoptions.AllOrderedPlugins {
		c.AdmissionPlugins = append(c.AdmissionPlugins, admissionPlugin{Name: name, DefaultOn: !off.Has(name)})
	}
	sort.Slice(c.AdmissionPlugins, func(i, j int) bool { return c.AdmissionPlugins[i].Name < c.AdmissionPlugins[j].Name })
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(c); err != nil {
		fmt.Fprintf(os.Stderr, "flag-catalog: writing the catalog: %v\n", err)
		os.Exit(1)
	}
}
