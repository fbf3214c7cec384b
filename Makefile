# apiserver-operator Makefile, in the kubebuilder v4 shape.

# Versions of everything built into bin/. The bundled kube-apiserver versions
# are listed in apiserver/bundled/versions (oldest first, the last is the
# default); each builds from its own module file there (see modfile below).
BUNDLED_DIR := apiserver/bundled
VERSIONS_FILE := $(BUNDLED_DIR)/versions
KUBE_VERSIONS := $(shell awk '!/^\#/ && NF { print $$1 }' $(VERSIONS_FILE))
# The newest bundled version: the default of spec.version, and the version of
# the tools built from go.mod (kubectl, the local cluster's components).
KUBE_VERSION := $(lastword $(KUBE_VERSIONS))
CONTROLLER_TOOLS_VERSION ?= v0.23.0
KUSTOMIZE_VERSION ?= v5.7.1
GOLANGCI_LINT_VERSION ?= v2.15.0

SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

LOCALBIN ?= $(shell pwd)/bin
BUNDLED_DEPS := $(BUNDLED_DIR)/go.mod $(BUNDLED_DIR)/go.sum

# Tools carry their version in their name, so that a version bump rebuilds them.
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
KUSTOMIZE ?= $(LOCALBIN)/kustomize-$(KUSTOMIZE_VERSION)
# An S3-compatible server (its posix backend serves a directory), built from
# its module: the tests keep backups in a real bucket.
VERSITYGW_VERSION ?= v1.8.0
VERSITYGW ?= $(LOCALBIN)/versitygw-$(VERSITYGW_VERSION)
# The resource metrics API of the local cluster (kubectl top, autoscalers).
METRICS_SERVER_VERSION ?= v0.8.0
METRICS_SERVER ?= $(LOCALBIN)/metrics-server-$(METRICS_SERVER_VERSION)
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
# The kube-apiserver of the default version, where envtest looks for it.
KUBE_APISERVER ?= $(LOCALBIN)/kube-apiserver
ETCD ?= $(LOCALBIN)/etcd
KUBECTL ?= $(LOCALBIN)/kubectl
# Every bundled version's kube-apiserver and its own validation code
# (apiserver/validatorpool), named by version: admission runs the one of the
# spec's version.
KUBE_APISERVERS := $(foreach v,$(KUBE_VERSIONS),$(LOCALBIN)/kube-apiserver-$(v))
# The etcd dialer sidecar's image is tagged with its own version
# (apiserver/etcddialer/version.go), not the operator's.
ETCD_DIALER_VERSION := $(shell sed -n 's/^const Version = "\(.*\)"$$/\1/p' apiserver/etcddialer/version.go)
ETCD_DIALER_IMAGE ?= localhost/apiserver-operator/etcd-dialer:$(ETCD_DIALER_VERSION)
ETCD_DIALER_SOURCES := $(shell find apiserver/etcddialer -name '*.go' -not -name '*_test.go' 2>/dev/null)
KUBE_VALIDATORS := $(foreach v,$(KUBE_VERSIONS),$(LOCALBIN)/kube-apiserver-validator-$(v))

# modfile is the module file a version builds from: go.mod for the newest,
# go.<version>.mod for the others.
modfile = $(if $(filter $(1),$(KUBE_VERSION)),go.mod,go.$(1).mod)
moddeps = $(BUNDLED_DIR)/$(call modfile,$(1)) $(BUNDLED_DIR)/$(patsubst %.mod,%.sum,$(call modfile,$(1)))
# -X flags that make the binaries report the upstream version instead of
# v0.0.0-master, both from component-base (--version, /version) and client-go
# (kubectl's client version, user agents); the build date is the tag's.
build-date = $(shell awk '$$1 == "$(1)" { print $$2 }' $(VERSIONS_FILE))
version-ldflags = $(foreach pkg,k8s.io/component-base/version k8s.io/client-go/pkg/version,\
	-X $(pkg).gitVersion=$(1) -X $(pkg).gitMajor=$(word 1,$(subst ., ,$(patsubst v%,%,$(1)))) \
	-X $(pkg).gitMinor=$(word 2,$(subst ., ,$(patsubst v%,%,$(1)))) \
	-X $(pkg).gitTreeState=clean -X $(pkg).buildDate=$(call build-date,$(1)))
KUBE_VERSION_LDFLAGS := $(call version-ldflags,$(KUBE_VERSION))
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
	$(CONTROLLER_GEN) crd webhook paths="./api/..." paths="./controllers/..." output:crd:artifacts:config=config/crd/bases output:webhook:artifacts:config=config/webhook
	@# Two ServiceAccounts, two roles: the controllers' (controllers/) and the webhook's (controllers/webhooks/rbac.go).
	$(CONTROLLER_GEN) rbac:roleName=manager-role paths="./controllers/tenants" paths="./controllers/admincredentials" paths="./controllers/backups" output:rbac:artifacts:config=config/rbac
	$(CONTROLLER_GEN) rbac:roleName=webhook-role paths="./controllers/webhooks" output:rbac:artifacts:config=config/rbac/webhook
	go run ./hack/api-docs

.PHONY: generate
generate: $(CONTROLLER_GEN) catalogs $(KUBE_VALIDATORS) ## Generate the deepcopy code, the list of bundled versions, and the catalogs and validators of every bundled kube-apiserver.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."
	go run ./hack/versions-gen -versions $(VERSIONS_FILE)

# What each bundled kube-apiserver accepts: its flags, feature gates and
# admission plugins (read from its code), and the resources it serves (read
# from a running instance). Validation checks users' input against the
# catalogs of the spec's version.
CATALOG_DIR := apiserver/catalog
FLAG_CATALOGS := $(foreach v,$(KUBE_VERSIONS),$(CATALOG_DIR)/flags-$(v).json)
RESOURCE_CATALOGS := $(foreach v,$(KUBE_VERSIONS),$(CATALOG_DIR)/resources-$(v).json)

.PHONY: catalogs
catalogs: $(FLAG_CATALOGS) $(RESOURCE_CATALOGS) ## Generate the catalogs of every bundled kube-apiserver.

# The rules of one bundled version: its kube-apiserver, its validator and
# its catalogs. The etcd prefix of each resource comes from upstream's
# storage factories of that version (built like the binaries, so that the
# build cache is shared).
define version-rules
$(LOCALBIN)/kube-apiserver-$(1): $(call moddeps,$(1)) $(VERSIONS_FILE) | $(LOCALBIN)
	@echo "Building kube-apiserver $(1) from source (about 4 minutes on 2 cores when cold)"
	cd $(BUNDLED_DIR) && $(BUNDLED_GOENV) go build -modfile=$(call modfile,$(1)) -ldflags "-s -w $(call version-ldflags,$(1))" -o $$@ k8s.io/kubernetes/cmd/kube-apiserver

# The validator is built with a copy of k8s.io/apiserver that takes the
# loopback certificate supplied ahead (hack/validator-module.sh).
$(LOCALBIN)/kube-apiserver-validator-$(1): $(call moddeps,$(1)) $(VERSIONS_FILE) $(BUNDLED_DIR)/cmd/validator/main.go $(BUNDLED_DIR)/validator-patch/loopback.go hack/validator-module.sh | $(LOCALBIN)
	@echo "Building the kube-apiserver $(1) validator from source"
	cd $(BUNDLED_DIR) && $(CURDIR)/hack/validator-module.sh $(call modfile,$(1)) $(LOCALBIN)/validator-module-$(1)
	cd $(BUNDLED_DIR) && $(BUNDLED_GOENV) go build -modfile=$(LOCALBIN)/validator-module-$(1)/go.mod -ldflags "-s -w $(call version-ldflags,$(1))" -o $$@ ./cmd/validator

$(CATALOG_DIR)/flags-$(1).json: $(call moddeps,$(1)) $(BUNDLED_DIR)/cmd/flag-catalog/main.go
	@echo "Generating $$@ from the kube-apiserver $(1) sources"
	cd $(BUNDLED_DIR) && go run -modfile=$(call modfile,$(1)) -ldflags "$(call version-ldflags,$(1))" ./cmd/flag-catalog > $$(abspath $$@).tmp
	mv $$@.tmp $$@

$(CATALOG_DIR)/resources-$(1).json: $(LOCALBIN)/kube-apiserver-$(1) $(ETCD) hack/resource-catalog/main.go $(BUNDLED_DIR)/cmd/storage-prefixes/main.go
	@echo "Generating $$@ from a running kube-apiserver $(1) and its storage factories"
	go run ./hack/resource-catalog -kube-apiserver $(LOCALBIN)/kube-apiserver-$(1) | (cd $(BUNDLED_DIR) && $(BUNDLED_GOENV) go run -modfile=$(call modfile,$(1)) ./cmd/storage-prefixes) > $$@.tmp
	mv $$@.tmp $$@
endef
$(foreach v,$(KUBE_VERSIONS),$(eval $(call version-rules,$(v))))

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
test: manifests generate fmt vet bundled $(VERSITYGW) ## Run unit tests and the suite against a real kube-apiserver and etcd.
	go test ./... -count=1 -timeout 30m -coverprofile cover.out

.PHONY: fuzz-admission
fuzz-admission: manifests bundled ## Run the differential admission test on 10 000 random specs over every bundled version, and the test of the validator's shortcuts on 1 000 (about 35 minutes on 2 cores; make test runs 200 and 100).
	ADMISSION_FUZZ_SPECS=$${ADMISSION_FUZZ_SPECS:-10000} SHORTCUT_SPECS=$${SHORTCUT_SPECS:-1000} \
		go test ./apiserver/render -run 'TestAdmission_AgreesWithKubeAPIServer|TestShortcuts_ChangeNoVerdict' -count=1 -timeout 120m -v

.PHONY: verify
verify: manifests generate fmt ## Regenerate everything and fail if the tree changed.
	@for v in $(KUBE_VERSIONS); do m=$(BUNDLED_DIR)/go.$$v.mod; [ $$v = $(KUBE_VERSION) ] && m=$(BUNDLED_DIR)/go.mod; \
		grep -q "k8s.io/kubernetes $$v\$$" $$m || { echo "$$m does not build k8s.io/kubernetes $$v, as $(VERSIONS_FILE) says"; exit 1; }; done
	@git diff --exit-code -- api config controllers apiserver docs PROJECT || { echo "Generated files are stale: run make manifests generate fmt and commit the result"; exit 1; }
	@test -z "$$(git status --porcelain -- api config controllers apiserver docs)" || { git status --porcelain -- api config controllers apiserver docs; echo "Untracked generated files: commit them"; exit 1; }

##@ Build

.PHONY: build
build: manifests generate fmt vet ## Build the operator binary.
	go build -o $(LOCALBIN)/manager main.go

.PHONY: run
run: manifests generate fmt vet ## Run the operator against the cluster of the current kubeconfig (webhooks off: they need a certificate the cluster trusts).
	go run ./main.go --webhooks=false --ownership-key-secret=kube-system/apiserver-operator-ownership-key

.PHONY: bundled
bundled: $(KUBE_APISERVER) $(KUBE_APISERVERS) $(ETCD) $(KUBECTL) $(KUBE_VALIDATORS) ## Build every bundled kube-apiserver, their validators, etcd and kubectl into bin/.

$(KUBE_APISERVER): $(LOCALBIN)/kube-apiserver-$(KUBE_VERSION)
	ln -sf $(notdir $<) $@

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

.PHONY: metrics-server
metrics-server: $(METRICS_SERVER) ## Build the local cluster's metrics-server into bin/.
$(METRICS_SERVER): | $(LOCALBIN)
	$(call go-install-tool,$(METRICS_SERVER),sigs.k8s.io/metrics-server/cmd/metrics-server,$(METRICS_SERVER_VERSION))

.PHONY: versitygw
versitygw: $(VERSITYGW) ## Build the S3-compatible server the tests keep backups in into bin/.
$(VERSITYGW): | $(LOCALBIN)
	$(call go-install-tool,$(VERSITYGW),github.com/versity/versitygw/cmd/versitygw,$(VERSITYGW_VERSION))

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
