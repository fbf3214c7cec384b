package main

import (
	_ "embed"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/admission"
	"github.com/apiserver-operator/apiserver-operator/apiserver/render"
	"github.com/apiserver-operator/apiserver-operator/apiserver/validatorpool"
)

// crdYAML is the CRD the binary was built with: render applies its defaults
// and rules as admission does.
//
//go:embed config/crd/bases/controlplane.apiserver-operator.dev_apiserverconfigs.yaml
var crdYAML []byte

// runRender is the `render` subcommand: `manager render -f tenant.yaml`
// prints what the operator would apply, with no cluster.
func runRender(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("f", "-", "ApiServerConfig manifest to render; - reads standard input.")
	repo := fs.String("apiserver-image-repository", apiserver.DefaultImageRepository, "Repository of the bundled kube-apiserver image, as the operator is configured.")
	dialerImage := fs.String("etcd-dialer-image", apiserver.DefaultEtcdDialerImage, "Image of the etcd dialer sidecar, as the operator is configured.")
	konnectivityImage := fs.String("konnectivity-server-image", apiserver.DefaultKonnectivityServerImage, "Image of the konnectivity server sidecar, as the operator is configured.")
	agentImage := fs.String("konnectivity-agent-image", apiserver.DefaultKonnectivityAgentImage, "Image of the konnectivity agents of the tenant's nodes, as the operator is configured.")
	clusterIP := fs.String("service-cluster-ip", "", "ClusterIP of the apiservers' Service, if known (it goes in the serving certificate).")
	validatorDir := fs.String("validator-dir", defaultValidatorDir(), "Directory with the kube-apiserver validators ("+validatorpool.BinaryPrefix+"<version>), as the operator is configured.")
	podIP := fs.String("pod-ip", admission.DefaultPodIP, "An address of the pod network the apiserver pods would run on (its family must match the first service range).")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var manifest []byte
	var err error
	if *file == "-" {
		manifest, err = io.ReadAll(os.Stdin)
	} else {
		manifest, err = os.ReadFile(*file)
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", *file, err)
	}
	render.SetWarningWriter(stderr)
	validators := validatorpool.NewPool(*validatorDir)
	defer validators.Close()
	return render.Render(stdout, manifest, render.Options{
		CRD:                     crdYAML,
		ImageRepository:         *repo,
		EtcdDialerImage:         *dialerImage,
		KonnectivityServerImage: *konnectivityImage,
		KonnectivityAgentImage:  *agentImage,
		Inputs:                  apiserver.Inputs{ServiceClusterIP: *clusterIP},
		Admission:               admission.Admission{Validator: validators, PodIP: *podIP},
	})
}
