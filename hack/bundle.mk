# The OLM bundle (operator-sdk's layout) in bundle/ and bundle.Dockerfile,
# generated from config/manifests (config/default, the samples, the CSV base
# and the scorecard configuration) by hack/bundle-gen. The generated files are
# committed; test/bundle runs operator-framework's validators on them and
# checks that they still match config/.
# Included at the end of the Makefile, so its variables (KUSTOMIZE,
# KUBE_VERSIONS) are visible here.

BUNDLE_VERSION ?= 0.1.0
BUNDLE_CHANNELS ?= alpha
BUNDLE_DEFAULT_CHANNEL ?= alpha
# The images the operator deploys (each bundled kube-apiserver from its
# --apiserver-image-repository, the etcd dialer and konnectivity server
# sidecars, and the konnectivity agent of the tenants' nodes), listed in the
# CSV's relatedImages for mirroring.
BUNDLE_APISERVER_REPOSITORY ?= localhost/apiserver-operator/kube-apiserver

##@ OLM bundle

.PHONY: bundle
bundle: manifests $(KUSTOMIZE) ## Regenerate the OLM bundle in bundle/ and bundle.Dockerfile from config/.
	$(KUSTOMIZE) build config/manifests | go run ./hack/bundle-gen \
		-version $(BUNDLE_VERSION) -channels $(BUNDLE_CHANNELS) -default-channel $(BUNDLE_DEFAULT_CHANNEL) \
		$(foreach v,$(KUBE_VERSIONS),-related-image kube-apiserver-$(subst .,-,$(v))=$(BUNDLE_APISERVER_REPOSITORY):$(v)) \
		-related-image etcd-dialer=$(ETCD_DIALER_IMAGE) \
		-related-image konnectivity-server=$(KONNECTIVITY_SERVER_IMAGE) \
		-related-image konnectivity-agent=$(KONNECTIVITY_AGENT_IMAGE) \
		-output-dir bundle -dockerfile bundle.Dockerfile
	go test ./test/bundle/ -count=1

# test/bundle renders config/ with kustomize to check the bundle against it.
test: $(KUSTOMIZE)
