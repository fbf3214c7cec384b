# A real one-node Kubernetes cluster on this machine for end-to-end tests, in
# the spirit of upstream's hack/local-up-cluster.sh: see test/localcluster.
# Included at the end of the Makefile, so its variables (KUBE_VERSION_LDFLAGS,
# BUNDLED_GOENV, BUNDLED_DEPS, LOCALBIN) are visible here.

# containerd is pinned in test/localcluster/tools/go.mod; change both together.
CONTAINERD_VERSION ?= v2.4.2
# NetworkPolicy in the local cluster: SIG Network's implementation, built
# from its module, in an image of its own (test/localcluster/networkpolicy.go).
KUBE_NETWORK_POLICIES_VERSION ?= v0.8.0
KUBE_NETWORK_POLICIES ?= $(LOCALBIN)/kube-network-policies-$(KUBE_NETWORK_POLICIES_VERSION)
# The tag and the tarball's name are also in networkpolicy.go.
KUBE_NETWORK_POLICIES_IMAGE := localhost/apiserver-operator/kube-network-policies:local
# konnectivity (apiserver-network-proxy) server and agent, built from
# upstream's sources into images of their own. Pinned in
# apiserver/networkproxy/tools/go.mod; change both together.
KONNECTIVITY_VERSION ?= v0.36.0
KONNECTIVITY_TOOLS_DIR := apiserver/networkproxy/tools
KONNECTIVITY_TOOLS_DEPS := $(KONNECTIVITY_TOOLS_DIR)/go.mod $(KONNECTIVITY_TOOLS_DIR)/go.sum
KONNECTIVITY_SERVER ?= $(LOCALBIN)/konnectivity-server-$(KONNECTIVITY_VERSION)
KONNECTIVITY_AGENT ?= $(LOCALBIN)/konnectivity-agent-$(KONNECTIVITY_VERSION)
KONNECTIVITY_SERVER_IMAGE ?= localhost/apiserver-operator/konnectivity-server:$(KONNECTIVITY_VERSION)
KONNECTIVITY_AGENT_IMAGE ?= localhost/apiserver-operator/konnectivity-agent:$(KONNECTIVITY_VERSION)
LOCALCLUSTER_TOOLS_DIR := test/localcluster/tools
LOCALCLUSTER_TOOLS_DEPS := $(LOCALCLUSTER_TOOLS_DIR)/go.mod $(LOCALCLUSTER_TOOLS_DIR)/go.sum
# Where the cluster keeps all of its state; make cluster-down removes it.
LOCALCLUSTER_DIR ?= /tmp/apiserver-operator-localcluster
IMAGES_DIR := $(LOCALBIN)/images

# The other upstream components of the cluster, built like the bundled
# kube-apiserver (same module, same version flags).
KUBE_NODE_BINARIES := $(addprefix $(LOCALBIN)/,kube-controller-manager kube-scheduler kubelet kube-proxy)
CONTAINERD_BINARIES := $(addprefix $(LOCALBIN)/,containerd containerd-shim-runc-v2 ctr)
PAUSE := $(LOCALBIN)/pause
# The workload of the tenant nodes' end-to-end tests (logs, exec,
# port-forward); its tag is in test/e2e.
NODEAPP := $(LOCALBIN)/nodeapp
NODEAPP_IMAGE := localhost/apiserver-operator/nodeapp:local
LOCALCLUSTER := $(LOCALBIN)/localcluster
# One kube-apiserver image per bundled version, tagged with it.
APISERVER_IMAGE_TARBALLS := $(foreach v,$(KUBE_VERSIONS),$(IMAGES_DIR)/kube-apiserver-$(v).tar)
KONNECTIVITY_IMAGE_TARBALLS := $(IMAGES_DIR)/konnectivity-server.tar $(IMAGES_DIR)/konnectivity-agent.tar
IMAGE_TARBALLS := $(IMAGES_DIR)/pause.tar $(IMAGES_DIR)/nodeapp.tar $(APISERVER_IMAGE_TARBALLS) $(IMAGES_DIR)/operator.tar $(IMAGES_DIR)/etcd-dialer.tar \
	$(IMAGES_DIR)/kube-network-policies.tar $(KONNECTIVITY_IMAGE_TARBALLS)
LOCALCLUSTER_BINARIES := $(KUBE_APISERVER) $(KUBE_APISERVERS) $(ETCD) $(KUBECTL) $(KUBE_NODE_BINARIES) $(CONTAINERD_BINARIES) $(VERSITYGW) $(METRICS_SERVER)
LOCALCLUSTER_SOURCES := $(shell find test/localcluster -name '*.go' -not -path '*/tools/*' 2>/dev/null) go.mod go.sum

CONTAINERD_LDFLAGS := -X github.com/containerd/containerd/v2/version.Version=$(CONTAINERD_VERSION) \
	-X github.com/containerd/containerd/v2/version.Package=github.com/containerd/containerd/v2
CONTAINERD_TAGS := no_btrfs no_devmapper no_zfs

##@ Local cluster (end-to-end tests)

.PHONY: localcluster-binaries
localcluster-binaries: $(LOCALCLUSTER_BINARIES) $(IMAGE_TARBALLS) $(LOCALCLUSTER) ## Build every binary and image of the local cluster.

$(KUBE_NODE_BINARIES): $(LOCALBIN)/%: $(BUNDLED_DEPS) | $(LOCALBIN)
	@echo "Building $* $(KUBE_VERSION) from source"
	cd $(BUNDLED_DIR) && $(BUNDLED_GOENV) go build -ldflags "-s -w $(KUBE_VERSION_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/$*

$(CONTAINERD_BINARIES): $(LOCALBIN)/%: $(LOCALCLUSTER_TOOLS_DEPS) | $(LOCALBIN)
	@echo "Building $* $(CONTAINERD_VERSION) from source"
	cd $(LOCALCLUSTER_TOOLS_DIR) && $(BUNDLED_GOENV) go build -tags "$(CONTAINERD_TAGS)" -ldflags "-s -w $(CONTAINERD_LDFLAGS)" -o $@ github.com/containerd/containerd/v2/cmd/$*

$(PAUSE): test/localcluster/pause/main.go | $(LOCALBIN)
	$(BUNDLED_GOENV) go build -ldflags "-s -w" -o $@ ./test/localcluster/pause

$(NODEAPP): test/localcluster/nodeapp/main.go | $(LOCALBIN)
	$(BUNDLED_GOENV) go build -ldflags "-s -w" -o $@ ./test/localcluster/nodeapp

$(LOCALCLUSTER): $(LOCALCLUSTER_SOURCES) | $(LOCALBIN)
	go build -o $@ ./test/localcluster/cmd/localcluster

# Images are rewritten when their binaries or the image writer change.
IMAGE_WRITER_SOURCES := test/localcluster/image/image.go

$(IMAGES_DIR)/pause.tar: $(PAUSE) $(IMAGE_WRITER_SOURCES) | $(LOCALCLUSTER)
	$(LOCALCLUSTER) image --tag localhost/apiserver-operator/pause:local --file $(PAUSE):/pause --entrypoint /pause --output $@

$(IMAGES_DIR)/nodeapp.tar: $(NODEAPP) $(IMAGE_WRITER_SOURCES) | $(LOCALCLUSTER)
	$(LOCALCLUSTER) image --tag $(NODEAPP_IMAGE) --file $(NODEAPP):/nodeapp --entrypoint /nodeapp --user 65532 --output $@

$(APISERVER_IMAGE_TARBALLS): $(IMAGES_DIR)/kube-apiserver-%.tar: $(LOCALBIN)/kube-apiserver-% $(IMAGE_WRITER_SOURCES) | $(LOCALCLUSTER)
	$(LOCALCLUSTER) image --tag localhost/apiserver-operator/kube-apiserver:$* \
		--file $<:/usr/local/bin/kube-apiserver --entrypoint /usr/local/bin/kube-apiserver --output $@

# The etcd dialer sidecar of every apiserver pod, in an image of its own
# (a few MB, pulled with the apiserver's) tagged with etcddialer.Version.
$(LOCALBIN)/etcd-dialer: $(ETCD_DIALER_SOURCES) go.mod go.sum | $(LOCALBIN)
	$(BUNDLED_GOENV) go build -ldflags "-s -w" -o $@ ./apiserver/etcddialer/cmd/etcd-dialer

$(IMAGES_DIR)/etcd-dialer.tar: $(LOCALBIN)/etcd-dialer $(IMAGE_WRITER_SOURCES) | $(LOCALCLUSTER)
	$(LOCALCLUSTER) image --tag $(ETCD_DIALER_IMAGE) --file $<:/etcd-dialer --entrypoint /etcd-dialer --user 65532 --output $@

# Upstream's main (its Dockerfile builds ./cmd into /bin/netpol), installed
# as go-install-tool installs the other tools, but static, for a scratch image.
$(KUBE_NETWORK_POLICIES): | $(LOCALBIN)
	@echo "Building kube-network-policies $(KUBE_NETWORK_POLICIES_VERSION) from source"
	@set -e; tmp=$$(mktemp -d); \
	GOBIN=$$tmp $(BUNDLED_GOENV) go install -ldflags "-s -w" sigs.k8s.io/kube-network-policies/cmd@$(KUBE_NETWORK_POLICIES_VERSION); \
	mv $$tmp/cmd $@; \
	rm -rf $$tmp

# At the same path as in upstream's image.
$(IMAGES_DIR)/kube-network-policies.tar: $(KUBE_NETWORK_POLICIES) $(IMAGE_WRITER_SOURCES) | $(LOCALCLUSTER)
	$(LOCALCLUSTER) image --tag $(KUBE_NETWORK_POLICIES_IMAGE) --file $<:/bin/netpol --entrypoint /bin/netpol --output $@

# The konnectivity server and agent, static, from the module that pins them.
$(KONNECTIVITY_SERVER): $(KONNECTIVITY_TOOLS_DEPS) | $(LOCALBIN)
	@echo "Building konnectivity-server $(KONNECTIVITY_VERSION) from source"
	cd $(KONNECTIVITY_TOOLS_DIR) && $(BUNDLED_GOENV) go build -ldflags "-s -w" -o $@ sigs.k8s.io/apiserver-network-proxy/cmd/server

$(KONNECTIVITY_AGENT): $(KONNECTIVITY_TOOLS_DEPS) | $(LOCALBIN)
	@echo "Building konnectivity-agent $(KONNECTIVITY_VERSION) from source"
	cd $(KONNECTIVITY_TOOLS_DIR) && $(BUNDLED_GOENV) go build -ldflags "-s -w" -o $@ sigs.k8s.io/apiserver-network-proxy/cmd/agent

# At the same paths as in upstream's images.
$(IMAGES_DIR)/konnectivity-server.tar: $(KONNECTIVITY_SERVER) $(IMAGE_WRITER_SOURCES) | $(LOCALCLUSTER)
	$(LOCALCLUSTER) image --tag $(KONNECTIVITY_SERVER_IMAGE) --file $<:/proxy-server --entrypoint /proxy-server --user 65532 --output $@

$(IMAGES_DIR)/konnectivity-agent.tar: $(KONNECTIVITY_AGENT) $(IMAGE_WRITER_SOURCES) | $(LOCALCLUSTER)
	$(LOCALCLUSTER) image --tag $(KONNECTIVITY_AGENT_IMAGE) --file $<:/proxy-agent --entrypoint /proxy-agent --user 65532 --output $@

.PHONY: konnectivity
konnectivity: $(KONNECTIVITY_IMAGE_TARBALLS) ## Build the konnectivity server and agent images from source into bin/images.

# test/boot runs both beside the bundled kube-apiserver.
test: $(KONNECTIVITY_SERVER) $(KONNECTIVITY_AGENT)

# The operator image: the manager built static, as config/manager expects it.
OPERATOR_IMAGE ?= localhost/apiserver-operator/manager:dev
OPERATOR_SOURCES := $(shell find api apiserver controllers -name '*.go' -not -path 'apiserver/bundled/*' -not -name '*_test.go' 2>/dev/null) \
	$(wildcard apiserver/catalog/*.json) main.go go.mod go.sum
$(LOCALBIN)/manager-static: $(OPERATOR_SOURCES) | $(LOCALBIN)
	$(BUNDLED_GOENV) go build -ldflags "-s -w" -o $@ .

# The validators sit beside /manager, where --validator-dir looks by default.
$(IMAGES_DIR)/operator.tar: $(LOCALBIN)/manager-static $(KUBE_VALIDATORS) $(IMAGE_WRITER_SOURCES) | $(LOCALCLUSTER)
	$(LOCALCLUSTER) image --tag $(OPERATOR_IMAGE) --file $(LOCALBIN)/manager-static:/manager \
		$(foreach f,$(KUBE_VALIDATORS),--file $(f):/$(notdir $(f))) --entrypoint /manager --output $@

.PHONY: cluster-up
cluster-up: localcluster-binaries ## Start the local one-node cluster (idempotent); prints its kubeconfig.
	$(LOCALCLUSTER) up --dir $(LOCALCLUSTER_DIR) --bin-dir $(LOCALBIN) --images-dir $(IMAGES_DIR)

.PHONY: cluster-down
cluster-down: $(LOCALCLUSTER) ## Stop the local cluster and remove its namespaces, mounts and state.
	$(LOCALCLUSTER) down --dir $(LOCALCLUSTER_DIR)

# The tests stop the cluster themselves (unless LOCALCLUSTER_KEEP=1); when
# they fail or are killed, cluster-down cleans up after them.
.PHONY: test-e2e
# The local-cluster benchmarks run once too, small, so that they keep
# working: make bench runs them for real. -parallel 4: the tests that call
# t.Parallel (mostly waiting: kstatus_test.go's six tenants, upgrade_test.go
# and sizing_test.go) run four at a time, not two as GOMAXPROCS on 2 cores
# would have it; more, and the tenants' kube-apiservers starting at once
# make each slower than the time saved.
test-e2e: localcluster-binaries ## Run the end-to-end tests on a local cluster that they start and stop (needs root).
	LOCALCLUSTER_DIR=$(LOCALCLUSTER_DIR) LOCALCLUSTER_BIN_DIR=$(LOCALBIN) LOCALCLUSTER_IMAGES_DIR=$(IMAGES_DIR) BENCH_TENANTS=3 BENCH_SECRETS=500 BENCH_BURST_SPECS=200 BENCH_BACKUP_OBJECTS=1000 \
		go test -tags e2e ./test/e2e/... -count=1 -timeout 30m -parallel 4 -v -bench Tenant -benchtime 1x \
		|| { rc=$$?; $(LOCALCLUSTER) down --dir $(LOCALCLUSTER_DIR); exit $$rc; }

##@ Try it

LOCAL_KUBECONFIG := $(LOCALCLUSTER_DIR)/config/admin.kubeconfig
TENANT_KUBECONFIG := $(LOCALCLUSTER_DIR)/tenant.kubeconfig
LOCAL_SAMPLE := config/samples/controlplane_v1alpha1_apiserverconfig_localcluster.yaml

.PHONY: local-up
local-up: localcluster-binaries $(KUSTOMIZE) ## Build what is missing, start the local cluster, install the operator, create a tenant and wait for it (needs root).
	@echo "==> Starting the local one-node cluster"
	$(LOCALCLUSTER) up --dir $(LOCALCLUSTER_DIR) --bin-dir $(LOCALBIN) --images-dir $(IMAGES_DIR)
	@echo "==> Installing the operator: kustomize build config/default | kubectl apply -f -"
	$(KUSTOMIZE) build config/default | $(KUBECTL) --kubeconfig $(LOCAL_KUBECONFIG) apply --server-side -f - >/dev/null
	$(KUBECTL) --kubeconfig $(LOCAL_KUBECONFIG) -n apiserver-operator-system rollout restart deployment/apiserver-operator-controller-manager >/dev/null
	$(KUBECTL) --kubeconfig $(LOCAL_KUBECONFIG) -n apiserver-operator-system rollout status deployment/apiserver-operator-controller-manager --timeout=180s
	@echo "==> Creating the tenant of $(LOCAL_SAMPLE)"
	@for i in $$(seq 1 60); do \
		$(KUBECTL) --kubeconfig $(LOCAL_KUBECONFIG) apply -f $(LOCAL_SAMPLE) >/dev/null 2>&1 && break; \
		[ $$i = 60 ] && { $(KUBECTL) --kubeconfig $(LOCAL_KUBECONFIG) apply -f $(LOCAL_SAMPLE); exit 1; }; sleep 1; \
	done
	$(KUBECTL) --kubeconfig $(LOCAL_KUBECONFIG) wait apiserverconfig/tenant --for=condition=Ready --timeout=180s
	@$(KUBECTL) --kubeconfig $(LOCAL_KUBECONFIG) get secret tenant-admin-kubeconfig -o jsonpath='{.data.value}' | base64 -d > $(TENANT_KUBECONFIG)
	@chmod 600 $(TENANT_KUBECONFIG)
	@port=$$($(KUBECTL) --kubeconfig $(LOCAL_KUBECONFIG) get service tenant-apiserver -o jsonpath='{.spec.ports[0].nodePort}'); \
	$(KUBECTL) --kubeconfig $(TENANT_KUBECONFIG) config set-cluster tenant --server=https://10.77.0.2:$$port --tls-server-name=tenant-apiserver.default.svc >/dev/null
	@$(KUBECTL) --kubeconfig $(LOCAL_KUBECONFIG) get apiserverconfigs
	@echo
	@echo "The tenant control plane is Ready. Use it with:"
	@echo "  bin/kubectl --kubeconfig $(TENANT_KUBECONFIG) get namespaces"
	@echo "The management cluster, where the operator and the ApiServerConfig live:"
	@echo "  bin/kubectl --kubeconfig $(LOCAL_KUBECONFIG) get apiserverconfigs"
	@echo "Scale it:     bin/kubectl --kubeconfig $(LOCAL_KUBECONFIG) scale apiserverconfig/tenant --replicas=3"
	@echo "Remove it all: make local-down"

.PHONY: local-down
local-down: cluster-down ## Stop the local cluster and remove everything local-up created.
	rm -f $(TENANT_KUBECONFIG)

##@ Images

.PHONY: images
images: $(IMAGES_DIR)/operator.tar $(APISERVER_IMAGE_TARBALLS) $(IMAGES_DIR)/etcd-dialer.tar $(KONNECTIVITY_IMAGE_TARBALLS) ## Write the operator, etcd dialer, konnectivity server and agent, and every bundled kube-apiserver image as OCI tarballs into bin/images (no Docker).

# REGISTRY is where image-push sends the images, such as
# registry.example.com/platform; INSECURE=1 allows a plain-HTTP registry.
REGISTRY ?=
IMAGE_TAG ?= dev
.PHONY: image-push
image-push: images ## Push the images to $(REGISTRY): make image-push REGISTRY=registry.example.com/platform
	@test -n "$(REGISTRY)" || { echo "Set REGISTRY, for example make image-push REGISTRY=registry.example.com/platform"; exit 1; }
	$(LOCALCLUSTER) push --tarball $(IMAGES_DIR)/operator.tar --ref $(REGISTRY)/apiserver-operator/manager:$(IMAGE_TAG) $(if $(INSECURE),--insecure)
	$(LOCALCLUSTER) push --tarball $(IMAGES_DIR)/etcd-dialer.tar --ref $(REGISTRY)/apiserver-operator/etcd-dialer:$(ETCD_DIALER_VERSION) $(if $(INSECURE),--insecure)
	$(LOCALCLUSTER) push --tarball $(IMAGES_DIR)/konnectivity-server.tar --ref $(REGISTRY)/apiserver-operator/konnectivity-server:$(KONNECTIVITY_VERSION) $(if $(INSECURE),--insecure)
	$(LOCALCLUSTER) push --tarball $(IMAGES_DIR)/konnectivity-agent.tar --ref $(REGISTRY)/apiserver-operator/konnectivity-agent:$(KONNECTIVITY_VERSION) $(if $(INSECURE),--insecure)
	for v in $(KUBE_VERSIONS); do \
		$(LOCALCLUSTER) push --tarball $(IMAGES_DIR)/kube-apiserver-$$v.tar --ref $(REGISTRY)/apiserver-operator/kube-apiserver:$$v $(if $(INSECURE),--insecure); \
	done
