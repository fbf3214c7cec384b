##@ Benchmarks

# Where make bench writes bench.log (everything), raw.txt (the benchmark
# lines only: compare two revisions with
# go run golang.org/x/perf/cmd/benchstat old/raw.txt new/raw.txt),
# table.md and the series behind the plots in docs/bench.
BENCH_DIR ?= $(LOCALBIN)/bench
# -count of every benchmark: 6 or more gives benchstat confidence intervals.
BENCH_COUNT ?= 1
# How long the steady-state window lasts.
BENCH_STEADY_WINDOW ?= 5m
# BENCH_LOCALCLUSTER=0 skips the local-cluster benchmarks (they need root).
BENCH_LOCALCLUSTER ?= 1
# BENCH_N adds a fleet of that size to the convergence benchmark (1 000
# and BENCH_N tenants instead of 100 and 1 000): BENCH_N=10000 takes about
# 10 minutes more.
BENCH_N ?=
comma := ,
BENCH_LOG := $(BENCH_DIR)/bench.log
BENCH_GO_TEST := go test -run '^$$' -count $(BENCH_COUNT) -timeout 90m

.PHONY: bench
bench: manifests generate bundled $(KONNECTIVITY_SERVER) $(KONNECTIVITY_AGENT) $(if $(filter 1,$(BENCH_LOCALCLUSTER)),localcluster-binaries) ## Run the benchmarks (about 10 minutes), print the table and redraw the plots of docs/bench.
	@mkdir -p $(BENCH_DIR)
	@: > $(BENCH_LOG)
	$(BENCH_GO_TEST) -bench . ./apiserver/pki | tee -a $(BENCH_LOG)
	BENCH_OUT=$(BENCH_DIR) $(if $(BENCH_N),BENCH_CONVERGE_OBJECTS=1000$(comma)$(BENCH_N)) $(BENCH_GO_TEST) -bench 'Converge' -benchtime 1x ./test/bench | tee -a $(BENCH_LOG)
	BENCH_OUT=$(BENCH_DIR) $(BENCH_GO_TEST) -bench 'ApplyToDeployment' -benchtime 200x ./test/bench | tee -a $(BENCH_LOG)
	$(BENCH_GO_TEST) -bench 'Admission$$' -benchtime 100x ./test/bench | tee -a $(BENCH_LOG)
	$(BENCH_GO_TEST) -bench 'AdmissionBurst' -benchtime 1x ./test/bench | tee -a $(BENCH_LOG)
	$(BENCH_GO_TEST) -bench 'ReferenceCache' -benchtime 1x ./test/bench | tee -a $(BENCH_LOG)
	BENCH_STEADY_WINDOW=$(BENCH_STEADY_WINDOW) $(BENCH_GO_TEST) -bench 'SteadyState' -benchtime 1x ./test/bench | tee -a $(BENCH_LOG)
	$(BENCH_GO_TEST) -bench 'KonnectivityLogs' -benchtime 2000x ./test/boot | tee -a $(BENCH_LOG)
	$(BENCH_GO_TEST) -bench 'AgentWatch' -benchtime 5x ./controllers/tenantwatch | tee -a $(BENCH_LOG)
	$(BENCH_GO_TEST) -bench 'AuditRead' -benchtime 300x ./test/boot | tee -a $(BENCH_LOG)
ifeq ($(BENCH_LOCALCLUSTER),1)
	@# The cluster's components log to stderr: kept apart, so that they do
	@# not split a benchmark's result line.
	LOCALCLUSTER_DIR=$(LOCALCLUSTER_DIR) LOCALCLUSTER_BIN_DIR=$(LOCALBIN) LOCALCLUSTER_IMAGES_DIR=$(IMAGES_DIR) \
		$(BENCH_GO_TEST) -tags e2e -bench 'Tenant' -benchtime 3x ./test/e2e 2> $(BENCH_DIR)/localcluster.log | tee -a $(BENCH_LOG) \
		|| { rc=$$?; tail -50 $(BENCH_DIR)/localcluster.log; $(LOCALCLUSTER) down --dir $(LOCALCLUSTER_DIR); exit $$rc; }
endif
	@grep -E '^(Benchmark|goos:|goarch:|pkg:|cpu:)' $(BENCH_LOG) > $(BENCH_DIR)/raw.txt
	go run ./hack/benchtable $(BENCH_DIR)/raw.txt | tee $(BENCH_DIR)/table.md
	cd hack/benchplot && go run . -in $(BENCH_DIR) -out $(CURDIR)/docs/bench

.PHONY: bench-smoke
bench-smoke: manifests generate bundled $(KONNECTIVITY_SERVER) $(KONNECTIVITY_AGENT) ## Run every envtest benchmark once, small (CI: they must keep working), and the table.
	@mkdir -p $(BENCH_DIR)/smoke
	BENCH_CONVERGE_OBJECTS=20 BENCH_STEADY_OBJECTS=10 BENCH_STEADY_WINDOW=10s BENCH_OUT=$(BENCH_DIR)/smoke \
		BENCH_BURST_SPECS=64 BENCH_REFCACHE_SECRETS=500 \
		go test -run '^$$' -bench . -benchtime 1x -timeout 20m ./test/bench ./test/boot | tee $(BENCH_DIR)/smoke/bench.log
	go test -run '^$$' -bench 'AgentWatch' -benchtime 1x -timeout 5m ./controllers/tenantwatch | tee -a $(BENCH_DIR)/smoke/bench.log
	@grep -E '^(Benchmark|goos:|goarch:|pkg:|cpu:)' $(BENCH_DIR)/smoke/bench.log > $(BENCH_DIR)/smoke/raw.txt
	go run ./hack/benchtable $(BENCH_DIR)/smoke/raw.txt
