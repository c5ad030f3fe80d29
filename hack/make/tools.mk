# Tools the tests need, built from the Go module proxy or installed from Debian.
# Everything lands under _output/; nothing is downloaded twice: each binary is
# rebuilt only when it is missing or its pinned version changed
# (hack/tools/gobuild.sh). See docs/e2e.md.

##@ Tools (built from the module proxy or installed from Debian)

GOBUILD         := $(TOOLS_DIR)/gobuild.sh

# The one Kubernetes version the project builds and tests against.
KUBE_VERSION       := $(call mod_version,k8s,k8s.io/kubernetes)
KUBE_MINOR         := $(word 2,$(subst ., ,$(KUBE_VERSION)))
CONTAINERD_VERSION := $(call mod_version,containerd,github.com/containerd/containerd/v2)
HELM_VERSION       := $(call mod_version,helm,helm.sh/helm/v3)
K8S_BIN         := $(BIN)/k8s
KUBE_APISERVER  := $(K8S_BIN)/kube-apiserver
KUBECTL         := $(K8S_BIN)/kubectl
KUBE_CONTROLLER_MANAGER := $(K8S_BIN)/kube-controller-manager
KUBE_SCHEDULER  := $(K8S_BIN)/kube-scheduler
KUBELET         := $(K8S_BIN)/kubelet
KUBE_PROXY      := $(K8S_BIN)/kube-proxy
ETCD            := /usr/bin/etcd
ENVTEST_ASSETS  := $(OUTPUT)/envtest
CONTAINERD_BIN  := $(BIN)/containerd
HELM            := $(BIN)/helm
STATICCHECK_VERSION := $(call mod_version,staticcheck,honnef.co/go/tools)
DEADCODE_VERSION    := $(call mod_version,deadcode,golang.org/x/tools)
STATICCHECK     := $(BIN)/staticcheck
DEADCODE        := $(BIN)/deadcode

# Debian packages the integration and e2e tests need.
APT_PACKAGES := etcd-server runc containernetworking-plugins iptables conntrack socat iproute2 util-linux openssl kmod

# Version stamps, else binaries report v0.0.0-master (a fixed build date keeps
# the build reproducible and cacheable).
K8S_VERSION_PKGS := k8s.io/component-base/version k8s.io/client-go/pkg/version
K8S_LDFLAGS := -s -w $(foreach p,$(K8S_VERSION_PKGS),\
  -X $(p).gitVersion=v$(KUBE_VERSION) -X $(p).gitMajor=1 -X $(p).gitMinor=$(KUBE_MINOR) \
  -X $(p).gitTreeState=clean -X $(p).buildDate=2026-01-01T00:00:00Z)

.PHONY: apt-deps
apt-deps: ## Install the Debian packages the tests need (etcd-server, runc, CNI plugins, iptables...); idempotent.
	@$(TOOLS_DIR)/apt-deps.sh $(APT_PACKAGES)

# The ESTIMATE each build prints is what it took here: a fresh 2-core machine
# shared by seven builders, building in this order (kube-apiserver compiles
# the Kubernetes packages the later binaries reuse from the build cache),
# taken from the "built X in Ns" lines gobuild.sh prints.

# kube_build NAME ESTIMATE
define kube_build
.PHONY: $(1)
$(1):
	@$(GOBUILD) $(TOOLS_DIR)/k8s $(K8S_BIN)/$(1) "v$(KUBE_VERSION) $(K8S_LDFLAGS)" "$(1) v$(KUBE_VERSION)" "$(2)" -- \
	  -ldflags '$(K8S_LDFLAGS)' k8s.io/kubernetes/cmd/$(1)
endef
$(eval $(call kube_build,kube-apiserver,24m48s))
$(eval $(call kube_build,kubectl,2m35s))
$(eval $(call kube_build,kube-controller-manager,11m53s))
$(eval $(call kube_build,kube-scheduler,1m02s))
$(eval $(call kube_build,kubelet,3m01s))
$(eval $(call kube_build,kube-proxy,1m16s))

.PHONY: kube-binaries
kube-binaries: kube-apiserver kubectl kube-controller-manager kube-scheduler kubelet kube-proxy ## Every Kubernetes binary the e2e node runs.

.PHONY: envtest-assets
envtest-assets: apt-deps kube-apiserver kubectl ## kube-apiserver, etcd, kubectl in $(ENVTEST_ASSETS) (export KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS)).
	@mkdir -p $(ENVTEST_ASSETS)
	@ln -sfn $(KUBE_APISERVER) $(ENVTEST_ASSETS)/kube-apiserver
	@ln -sfn $(KUBECTL) $(ENVTEST_ASSETS)/kubectl
	@ln -sfn $(ETCD) $(ENVTEST_ASSETS)/etcd
	@echo "envtest assets ready: KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS)"

.PHONY: containerd
containerd: ## Build containerd v$(CONTAINERD_VERSION), ctr and containerd-shim-runc-v2 into $(CONTAINERD_BIN).
	@for c in containerd ctr containerd-shim-runc-v2; do \
	  $(GOBUILD) $(TOOLS_DIR)/containerd $(CONTAINERD_BIN)/$$c "v$(CONTAINERD_VERSION)" "$$c v$(CONTAINERD_VERSION)" "8m20s for containerd, then 25s and 10s" -- \
	    -tags no_btrfs -ldflags '-s -w -X github.com/containerd/containerd/v2/version.Version=v$(CONTAINERD_VERSION)' \
	    github.com/containerd/containerd/v2/cmd/$$c; \
	done

# Stamp the Kubernetes version helm reports to charts (.Capabilities.KubeVersion),
# else a plain build says v1.20.
HELM_LDFLAGS := -s -w -X helm.sh/helm/v3/internal/version.version=v$(HELM_VERSION) \
  $(foreach p,pkg/lint/rules pkg/chartutil,-X helm.sh/helm/v3/$(p).k8sVersionMajor=1 -X helm.sh/helm/v3/$(p).k8sVersionMinor=$(KUBE_MINOR))

.PHONY: helm
helm: ## Build helm v$(HELM_VERSION) into $(HELM) (pass --kube-version to helm template).
	@$(GOBUILD) $(TOOLS_DIR)/helm $(HELM) "v$(HELM_VERSION) k8s 1.$(KUBE_MINOR)" "helm v$(HELM_VERSION)" "2m55s cold (13s with its packages in the build cache)" -- \
	  -ldflags '$(HELM_LDFLAGS)' helm.sh/helm/v3/cmd/helm

.PHONY: staticcheck
staticcheck: ## Build staticcheck $(STATICCHECK_VERSION) into $(STATICCHECK) (make lint runs it).
	@$(GOBUILD) $(TOOLS_DIR)/staticcheck $(STATICCHECK) "v$(STATICCHECK_VERSION)" "staticcheck v$(STATICCHECK_VERSION)" "1m45s" -- \
	  -ldflags '-s -w' honnef.co/go/tools/cmd/staticcheck

.PHONY: deadcode
deadcode: ## Build deadcode (golang.org/x/tools $(DEADCODE_VERSION)) into $(DEADCODE) (make lint runs it).
	@$(GOBUILD) $(TOOLS_DIR)/deadcode $(DEADCODE) "v$(DEADCODE_VERSION)" "deadcode v$(DEADCODE_VERSION)" "30s" -- \
	  -ldflags '-s -w' golang.org/x/tools/cmd/deadcode

.PHONY: tools
tools: apt-deps kube-binaries containerd helm staticcheck deadcode ## Every tool the tests and lint use.

.PHONY: envtest-smoke
envtest-smoke: envtest-assets ## Check the envtest assets start, serve and stop (controller-runtime envtest).
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) test -count=1 -tags integration ./test/e2e/envtestsmoke/...

# The tool paths work as prerequisites too (and never fall through to the
# top-level `$(BIN)/%` rule, which builds ./cmd/%).
$(KUBE_APISERVER): kube-apiserver ; @:
$(KUBECTL): kubectl ; @:
$(KUBE_CONTROLLER_MANAGER): kube-controller-manager ; @:
$(KUBE_SCHEDULER): kube-scheduler ; @:
$(KUBELET): kubelet ; @:
$(KUBE_PROXY): kube-proxy ; @:
$(CONTAINERD_BIN): containerd ; @:
$(HELM): helm ; @:
$(STATICCHECK): staticcheck ; @:
$(DEADCODE): deadcode ; @:
$(ENVTEST_ASSETS): envtest-assets ; @:

TEST_TARGETS += envtest-smoke
