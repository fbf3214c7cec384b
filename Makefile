# apiserver-operator Makefile, in the kubebuilder v4 shape.

# Versions of everything built into bin/. The bundled kube-apiserver, etcd and
# kubectl come from apiserver/bundled/go.mod; change the versions there and here
# together (make verify checks that they agree).
KUBE_VERSION ?= v1.37.1
# The time of the upstream tag, from the module proxy: keeps builds reproducible.
KUBE_BUILD_DATE ?= 2026-09-23T17:06:22Z
CONTROLLER_TOOLS_VERSION ?= v0.23.0
KUSTOMIZE_VERSION ?= v5.7.1
GOLANGCI_LINT_VERSION ?= v2.15.0

SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

LOCALBIN ?= $(shell pwd)/bin
BUNDLED_DIR := apiserver/bundled
BUNDLED_DEPS := $(BUNDLED_DIR)/go.mod $(BUNDLED_DIR)/go.sum

# Tools carry their version in their name, so that a version bump rebuilds them.
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
KUSTOMIZE ?= $(LOCALBIN)/kustomize-$(KUSTOMIZE_VERSION)
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
KUBE_APISERVER ?= $(LOCALBIN)/kube-apiserver
ETCD ?= $(LOCALBIN)/etcd
KUBECTL ?= $(LOCALBIN)/kubectl
# The bundled version's own validation code (apiserver/upstream), named by
# version: admission runs the one of the spec's version.
KUBE_VALIDATOR ?= $(LOCALBIN)/kube-apiserver-validator-$(KUBE_VERSION)

KUBE_MAJOR := $(word 1,$(subst ., ,$(patsubst v%,%,$(KUBE_VERSION))))
KUBE_MINOR := $(word 2,$(subst ., ,$(patsubst v%,%,$(KUBE_VERSION))))
# -X flags that make the binaries report the upstream version instead of
# v0.0.0-master, both from component-base (--version, /version) and client-go
# (kubectl's client version, user agents).
KUBE_VERSION_LDFLAGS := $(foreach pkg,k8s.io/component-base/version k8s.io/client-go/pkg/version,\
	-X $(pkg).gitVersion=$(KUBE_VERSION) -X $(pkg).gitMajor=$(KUBE_MAJOR) -X $(pkg).gitMinor=$(KUBE_MINOR) \
	-X $(pkg).gitTreeState=clean -X $(pkg).buildDate=$(KUBE_BUILD_DATE))
# Static binaries, so that they run in scratch images as well as on the host.
BUNDLED_GOENV := CGO_ENABLED=0 GOFLAGS=-trimpath

# Tests find kube-apiserver, etcd and kubectl here instead of downloading them.
export KUBEBUILDER_ASSETS ?= $(LOCALBIN)

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRD and RBAC manifests into config/.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd webhook paths="./api/..." paths="./controllers/..." output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac output:webhook:artifacts:config=config/webhook
	go run ./hack/api-docs

.PHONY: generate
generate: $(CONTROLLER_GEN) catalogs ## Generate the deepcopy code of the API types and the catalogs of the bundled kube-apiserver.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

# What the bundled kube-apiserver accepts: its flags, feature gates and
# admission plugins (read from its code), and the resources it serves (read
# from a running instance). Validation checks users' input against them.
CATALOG_DIR := apiserver/catalog
FLAG_CATALOG := $(CATALOG_DIR)/flags-$(KUBE_VERSION).json
RESOURCE_CATALOG := $(CATALOG_DIR)/resources-$(KUBE_VERSION).json

.PHONY: catalogs
catalogs: $(FLAG_CATALOG) $(RESOURCE_CATALOG) ## Generate the catalogs of the bundled kube-apiserver.

$(FLAG_CATALOG): $(BUNDLED_DEPS) $(BUNDLED_DIR)/cmd/flag-catalog/main.go
	@echo "Generating $@ from the kube-apiserver $(KUBE_VERSION) sources"
	cd $(BUNDLED_DIR) && go run -ldflags "$(KUBE_VERSION_LDFLAGS)" ./cmd/flag-catalog > $(abspath $@).tmp
	mv $@.tmp $@

# The etcd prefix of each resource comes from upstream's storage factories
# (built like the binaries, so that the build cache is shared).
$(RESOURCE_CATALOG): $(KUBE_APISERVER) $(ETCD) hack/resource-catalog/main.go $(BUNDLED_DIR)/cmd/storage-prefixes/main.go
	@echo "Generating $@ from a running bin/kube-apiserver and the $(KUBE_VERSION) storage factories"
	go run ./hack/resource-catalog | (cd $(BUNDLED_DIR) && $(BUNDLED_GOENV) go run ./cmd/storage-prefixes) > $@.tmp
	mv $@.tmp $@

.PHONY: fmt
fmt: ## Run go fmt on the operator's code.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

# The operator's module only: apiserver/bundled is its own module that just
# builds upstream binaries, and ./... does not enter it.
.PHONY: lint
lint: golangci-lint ## Run golangci-lint with the linters of .golangci.yml.
	$(GOLANGCI_LINT) run ./...

.PHONY: test
test: manifests generate fmt vet bundled ## Run unit tests and the suite against a real kube-apiserver and etcd.
	go test ./... -count=1 -coverprofile cover.out

.PHONY: fuzz-admission
fuzz-admission: manifests bundled ## Run the differential admission test on 10 000 random specs (about 30 minutes on 2 cores; make test runs 200).
	ADMISSION_FUZZ_SPECS=$${ADMISSION_FUZZ_SPECS:-10000} go test ./apiserver/render -run TestAdmission_AgreesWithKubeAPIServer -count=1 -timeout 120m -v

.PHONY: verify
verify: manifests generate fmt ## Regenerate everything and fail if the tree changed.
	@grep -q 'k8s.io/kubernetes $(KUBE_VERSION)' $(BUNDLED_DIR)/go.mod || { echo "KUBE_VERSION $(KUBE_VERSION) does not match $(BUNDLED_DIR)/go.mod"; exit 1; }
	@git diff --exit-code -- api config controllers apiserver docs PROJECT || { echo "Generated files are stale: run make manifests generate fmt and commit the result"; exit 1; }
	@test -z "$$(git status --porcelain -- api config controllers apiserver docs)" || { git status --porcelain -- api config controllers apiserver docs; echo "Untracked generated files: commit them"; exit 1; }

##@ Build

.PHONY: build
build: manifests generate fmt vet ## Build the operator binary.
	go build -o $(LOCALBIN)/manager main.go

.PHONY: run
run: manifests generate fmt vet ## Run the operator against the cluster of the current kubeconfig (webhooks off: they need a certificate the cluster trusts).
	go run ./main.go --webhooks=false

.PHONY: bundled
bundled: $(KUBE_APISERVER) $(ETCD) $(KUBECTL) $(KUBE_VALIDATOR) ## Build the bundled kube-apiserver, its validator, etcd and kubectl into bin/.

$(KUBE_APISERVER): $(BUNDLED_DEPS) | $(LOCALBIN)
	@echo "Building kube-apiserver $(KUBE_VERSION) from source (about 4 minutes on 2 cores when cold)"
	cd $(BUNDLED_DIR) && $(BUNDLED_GOENV) go build -ldflags "-s -w $(KUBE_VERSION_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kube-apiserver

$(KUBE_VALIDATOR): $(BUNDLED_DEPS) $(BUNDLED_DIR)/cmd/validator/main.go | $(LOCALBIN)
	@echo "Building the kube-apiserver $(KUBE_VERSION) validator from source"
	cd $(BUNDLED_DIR) && $(BUNDLED_GOENV) go build -ldflags "-s -w $(KUBE_VERSION_LDFLAGS)" -o $@ ./cmd/validator

$(KUBECTL): $(BUNDLED_DEPS) | $(LOCALBIN)
	@echo "Building kubectl $(KUBE_VERSION) from source"
	cd $(BUNDLED_DIR) && $(BUNDLED_GOENV) go build -ldflags "-s -w $(KUBE_VERSION_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kubectl

$(ETCD): $(BUNDLED_DEPS) | $(LOCALBIN)
	@echo "Building etcd from source"
	cd $(BUNDLED_DIR) && $(BUNDLED_GOENV) go build -ldflags "-s -w" -o $@ go.etcd.io/etcd/server/v3

##@ Deployment

.PHONY: install
install: manifests $(KUSTOMIZE) $(KUBECTL) ## Install the CRD into the cluster of the current kubeconfig.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) apply --server-side -f -

.PHONY: uninstall
uninstall: manifests $(KUSTOMIZE) $(KUBECTL) ## Remove the CRD from the cluster of the current kubeconfig.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) delete --ignore-not-found -f -

##@ Tools

$(LOCALBIN):
	mkdir -p $(LOCALBIN)

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN) ## Build controller-gen into bin/.
$(CONTROLLER_GEN): | $(LOCALBIN)
	$(call go-install-tool,$(CONTROLLER_GEN),sigs.k8s.io/controller-tools/cmd/controller-gen,$(CONTROLLER_TOOLS_VERSION))

.PHONY: kustomize
kustomize: $(KUSTOMIZE) ## Build kustomize into bin/.
$(KUSTOMIZE): | $(LOCALBIN)
	$(call go-install-tool,$(KUSTOMIZE),sigs.k8s.io/kustomize/kustomize/v5,$(KUSTOMIZE_VERSION))

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT) ## Build golangci-lint into bin/.
$(GOLANGCI_LINT): | $(LOCALBIN)
	$(call go-install-tool,$(GOLANGCI_LINT),github.com/golangci/golangci-lint/v2/cmd/golangci-lint,$(GOLANGCI_LINT_VERSION))

# go-install-tool installs package $(2) at version $(3) as $(1), a versioned
# name, and links the plain name to it.
define go-install-tool
@set -e; tmp=$$(mktemp -d); \
echo "Installing $(2)@$(3)"; \
GOBIN=$$tmp go install $(2)@$(3); \
mv $$tmp/* $(1); \
rm -rf $$tmp; \
ln -sf $$(basename $(1)) $(patsubst %-$(3),%,$(1))
endef

include hack/localcluster.mk
include hack/bundle.mk
include hack/bench.mk
