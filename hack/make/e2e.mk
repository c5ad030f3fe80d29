# End-to-end: a real single-node Kubernetes (etcd, kube-apiserver,
# controller-manager, scheduler, kube-proxy, containerd, kubelet) inside the
# network namespace ibk-e2e, images built as tarballs without Docker, and the
# scenarios of test/e2e. See docs/e2e.md.

##@ End-to-end (real node, three-node cluster, demo)

E2E_DIR     := $(OUTPUT)/e2e
IMAGES_DIR  := $(OUTPUT)/images
IMAGE_TOOL  := $(BIN)/image-tool
PAUSE_BIN   := $(OUTPUT)/e2e-bin/pause
REPORT_BIN  := $(OUTPUT)/e2e-bin/report
NOOP_BIN    := $(OUTPUT)/e2e-bin/noopwebhook
# Keep the node after `make e2e` (for debugging): make e2e E2E_KEEP=1
E2E_KEEP    ?=
# go test -run filter for the scenarios: make e2e E2E_RUN=Scenario2
E2E_RUN     ?= .
E2E_TIMEOUT ?= 40m
# kube-scheduler's klog level on the e2e node (its log is in
# _output/e2e/logs): make e2e E2E_SCHEDULER_V=5
E2E_SCHEDULER_V ?=
# Busy CPU workers beside the run, at make's own priority: make e2e E2E_LOAD=2
# (also e2e-cluster; docs/e2e.md "Waits, and a run beside a busy machine").
E2E_LOAD    ?=
LOAD_SH     := $(ROOT)/test/e2e/node/load.sh

# Starts $(E2E_LOAD) workers once the e2e lock is held (a run waiting for the
# lock loads nothing) and stops them by PID when the recipe's shell exits,
# however it exits; the workers also stop on their own if that shell is killed.
define e2e_load
if [ -n "$(E2E_LOAD)" ] && [ "$(E2E_LOAD)" != 0 ]; then \
	  load_pids=$$($(LOAD_SH) start '$(E2E_LOAD)' $$$$); \
	  trap '$(LOAD_SH) stop $$load_pids' EXIT; trap 'exit 130' INT TERM; \
	  echo "e2e: $(E2E_LOAD) busy CPU workers beside the run (PIDs $$load_pids)"; \
	fi
endef

IMAGE_TOOL_STAMP = $(shell cat $(TOOLS_DIR)/image/go.sum $(TOOLS_DIR)/image/*.go $(TOOLS_DIR)/image/pause/*.go | sha256sum | cut -c1-16)

E2E_ENV = ROOT=$(ROOT) E2E_DIR=$(E2E_DIR) K8S_BIN=$(K8S_BIN) CONTAINERD_BIN=$(CONTAINERD_BIN) \
  IMAGES_DIR=$(IMAGES_DIR) KUBE_VERSION=$(KUBE_VERSION) HELM=$(HELM) BIN=$(BIN) \
  E2E_SCHEDULER_V=$(E2E_SCHEDULER_V) E2E_LOAD=$(E2E_LOAD)

.PHONY: image-tool
image-tool: ## Build the image writer (hack/tools/image) and the pause program.
	@$(GOBUILD) $(TOOLS_DIR)/image $(IMAGE_TOOL) "$(IMAGE_TOOL_STAMP)" "image tool" "~30 s" -- -ldflags '-s -w' .
	@$(GOBUILD) $(TOOLS_DIR)/image $(PAUSE_BIN) "$(IMAGE_TOOL_STAMP)" "pause" "~5 s" -- -ldflags '-s -w' ./pause

.PHONY: images
images: build image-tool ## Image tarballs ibkube:dev, ibkube-report:dev (+ no-op webhook), ibkube-pause:dev in _output/images (no Docker).
	@mkdir -p $(IMAGES_DIR) $(dir $(REPORT_BIN))
	@CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(REPORT_BIN) ./test/e2e/report
	@CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(NOOP_BIN) ./test/e2e/noopwebhook
	@$(IMAGE_TOOL) -o $(IMAGES_DIR)/ibkube.tar -t ibkube:dev $(addprefix $(BIN)/,$(COMMANDS))
	@$(IMAGE_TOOL) -o $(IMAGES_DIR)/ibkube-report.tar -t ibkube-report:dev -entrypoint /usr/local/bin/report $(REPORT_BIN) $(NOOP_BIN) \
	  test/e2e/testdata/report-passwd=/etc/passwd test/e2e/testdata/report-group=/etc/group
	@$(IMAGE_TOOL) -o $(IMAGES_DIR)/ibkube-pause.tar -t ibkube-pause:dev -entrypoint /usr/local/bin/pause $(PAUSE_BIN)
	@echo "images: $$(cd $(IMAGES_DIR) && ls *.tar | tr '\n' ' ')"

.PHONY: e2e-tools
e2e-tools: apt-deps kube-binaries containerd helm

.PHONY: e2e-up
e2e-up: e2e-tools images ## Bring the e2e node up in netns ibk-e2e (idempotent; KUBECONFIG=_output/e2e/kubeconfig).
	@$(E2E_ENV) $(ROOT)/test/e2e/node/node.sh up

.PHONY: e2e-down
e2e-down: ## Stop the e2e node (pods deleted through the API first) and restore every host change.
	@$(E2E_ENV) $(ROOT)/test/e2e/node/node.sh down

.PHONY: e2e-status
e2e-status: ## Which e2e node daemons run.
	@$(E2E_ENV) $(ROOT)/test/e2e/node/node.sh status

# One e2e node per machine: concurrent `make e2e`/`make test` runs wait here.
E2E_LOCK := /tmp/ibkube-e2e.lock

.PHONY: e2e
e2e: e2e-tools images ## End-to-end scenarios on the real node; report in _output/e2e/report.json (E2E_KEEP=1 keeps the node, E2E_LOAD=2 adds busy workers).
	@exec 9>$(E2E_LOCK); flock 9; $(e2e_load); \
	  $(E2E_ENV) $(ROOT)/test/e2e/node/node.sh up || { $(E2E_ENV) $(ROOT)/test/e2e/node/node.sh down; exit 1; }; \
	  rc=0; $(E2E_ENV) $(GO) test -count=1 -v -tags e2e -timeout $(E2E_TIMEOUT) -run '$(E2E_RUN)' ./test/e2e/ || rc=$$?; \
	  if [ -z "$(E2E_KEEP)" ]; then $(E2E_ENV) $(ROOT)/test/e2e/node/node.sh down; fi; \
	  exit $$rc

.PHONY: demo
demo: e2e-up ## Bring a real node up, install the chart, run an annotated pod and show what ibkube did.
	@$(E2E_ENV) $(ROOT)/test/e2e/demo.sh

.PHONY: demo-down
demo-down: e2e-down ## Tear the demo node down and restore the host.

# In `make test`: ~2 min with the tools built.
TEST_TARGETS += e2e

# ---------------------------------------------------------------- the cluster
# Three nodes (ND H100 v5, HB, OCI BM.GPU.H100.8 fixtures), one control plane,
# each node in its own network and mount namespace, with Multus and whereabouts
# for the IPoIB secondary network. See docs/e2e.md ("The cluster").

MULTUS_VERSION      := $(call mod_version,multus,gopkg.in/k8snetworkplumbingwg/multus-cni.v4)
WHEREABOUTS_VERSION := $(call mod_version,whereabouts,github.com/k8snetworkplumbingwg/whereabouts)
CNI_TOOLS_BIN       := $(BIN)/cni
E2E_CLUSTER_DIR     := $(OUTPUT)/e2e-cluster
E2E_CLUSTER_TIMEOUT ?= 45m
FIXTUREGEN_BIN      := $(OUTPUT)/e2e-bin/fixturegen

.PHONY: multus
multus: ## Build the Multus thin CNI plugin v$(MULTUS_VERSION) (hack/tools/multus) into _output/bin/cni.
	@$(GOBUILD) $(TOOLS_DIR)/multus $(CNI_TOOLS_BIN)/multus "v$(MULTUS_VERSION)" "multus v$(MULTUS_VERSION)" "9m20s" -- \
	  -ldflags '-s -w' gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus

# The whereabouts version hack/tools/whereabouts/go.mod pins is not in
# sum.golang.org (its lookup answers 404):
# hack/tools/whereabouts/go.sum holds the hash of the module as the proxy
# served it, the build verifies the download against that, and GONOSUMDB
# keeps go from asking the checksum database about it.
.PHONY: whereabouts
whereabouts: ## Build the whereabouts IPAM CNI plugin v$(WHEREABOUTS_VERSION) (hack/tools/whereabouts) into _output/bin/cni.
	@GONOSUMDB=github.com/k8snetworkplumbingwg/whereabouts $(GOBUILD) $(TOOLS_DIR)/whereabouts $(CNI_TOOLS_BIN)/whereabouts "v$(WHEREABOUTS_VERSION)" "whereabouts v$(WHEREABOUTS_VERSION)" "10m00s" -- \
	  -ldflags '-s -w' github.com/k8snetworkplumbingwg/whereabouts/cmd

E2E_CLUSTER_ENV = ROOT=$(ROOT) E2E_DIR=$(E2E_CLUSTER_DIR) K8S_BIN=$(K8S_BIN) CONTAINERD_BIN=$(CONTAINERD_BIN) \
  CNI_TOOLS_BIN=$(CNI_TOOLS_BIN) FIXTUREGEN=$(FIXTUREGEN_BIN) IMAGES_DIR=$(IMAGES_DIR) KUBE_VERSION=$(KUBE_VERSION) \
  HELM=$(HELM) BIN=$(BIN) GO=$(GO) E2E_CLUSTER=1 E2E_LOAD=$(E2E_LOAD)

.PHONY: e2e-cluster-tools
e2e-cluster-tools: e2e-tools multus whereabouts ## Tools of the e2e cluster: the e2e node's, Multus, whereabouts, fixturegen.
	@mkdir -p $(dir $(FIXTUREGEN_BIN))
	@CGO_ENABLED=0 $(GO) build -trimpath -o $(FIXTUREGEN_BIN) ./test/e2e/fixturegen

.PHONY: e2e-cluster-up
e2e-cluster-up: e2e-cluster-tools images ## Bring the three-node e2e cluster up (idempotent; KUBECONFIG=_output/e2e-cluster/kubeconfig).
	@$(E2E_CLUSTER_ENV) $(ROOT)/test/e2e/node/cluster.sh up

.PHONY: e2e-cluster-down
e2e-cluster-down: ## Stop the e2e cluster and restore every host change.
	@$(E2E_CLUSTER_ENV) $(ROOT)/test/e2e/node/cluster.sh down

.PHONY: e2e-cluster-status
e2e-cluster-status: ## Which e2e cluster daemons run.
	@$(E2E_CLUSTER_ENV) $(ROOT)/test/e2e/node/cluster.sh status

.PHONY: e2e-cluster
e2e-cluster: e2e-cluster-tools images ## Multi-node scenarios on a three-node cluster with Multus; report in _output/e2e-cluster/report.json (E2E_KEEP=1 keeps it, E2E_LOAD=2 adds busy workers).
	@exec 9>$(E2E_LOCK); flock 9; $(e2e_load); \
	  $(E2E_CLUSTER_ENV) $(ROOT)/test/e2e/node/cluster.sh up || { $(E2E_CLUSTER_ENV) $(ROOT)/test/e2e/node/cluster.sh down; exit 1; }; \
	  rc=0; $(E2E_CLUSTER_ENV) $(GO) test -count=1 -v -tags e2e -timeout $(E2E_CLUSTER_TIMEOUT) -run '^TestCluster$$/$(E2E_RUN)' ./test/e2e/ || rc=$$?; \
	  if [ -z "$(E2E_KEEP)" ]; then $(E2E_CLUSTER_ENV) $(ROOT)/test/e2e/node/cluster.sh down; fi; \
	  exit $$rc

# In `make test`: ~3.5–4.5 min under the lock with the tools built, plus the
# Multus and whereabouts builds once per machine.
TEST_TARGETS += e2e-cluster

# ------------------------------------------------------- beside a busy machine
E2E_LOADED_RUNS    ?= 3
E2E_LOADED_DIR     := $(OUTPUT)/e2e-loaded
E2E_LOADED_WORKERS  = $(or $(E2E_LOAD),2)

.PHONY: e2e-loaded
e2e-loaded: ## make e2e, then make e2e-cluster, E2E_LOADED_RUNS times each (3) beside E2E_LOAD busy CPU workers (2); stops at the first failure, summaries in _output/e2e-loaded.
	@mkdir -p $(E2E_LOADED_DIR)
	@for target in e2e e2e-cluster; do \
	  for i in $$(seq $(E2E_LOADED_RUNS)); do \
	    echo "e2e-loaded: $$target run $$i of $(E2E_LOADED_RUNS) beside $(E2E_LOADED_WORKERS) busy workers"; \
	    start=$$(date +%s); rc=0; \
	    $(MAKE) --no-print-directory $$target E2E_LOAD=$(E2E_LOADED_WORKERS) || rc=$$?; \
	    dir=$(OUTPUT)/$$target; cp $$dir/summary.txt $(E2E_LOADED_DIR)/$$target-$$i.txt 2>/dev/null || true; \
	    echo "$$target run $$i: rc=$$rc $$(( $$(date +%s) - start ))s" | tee -a $(E2E_LOADED_DIR)/runs.txt; \
	    [ $$rc = 0 ] || exit $$rc; \
	  done; \
	done
