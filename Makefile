# Every target works from a fresh clone with only python3 present: `install` bootstraps uv
# from PyPI into .tools/ when it is not already on PATH, then builds .venv from uv.lock.
SHELL := /bin/bash
PYTHON ?= python3
UV_VERSION ?= 0.13.8
UV := $(shell command -v uv 2>/dev/null || echo .tools/bin/uv)
VENV := .venv
BIN := $(VENV)/bin
CLUSTER ?= examples/cluster.yaml
TAS_CLUSTER ?= examples/topology-gke-a3-ultra.yaml
PYTEST_ARGS ?=
# Test processes of `make test` (pytest-xdist's -n): one per CPU. Much of the suite waits on
# servers, subprocesses and timers, so workers overlap well, and an idle worker takes tests
# from a busy one (worksteal: a few tests take tens of seconds). PYTEST_WORKERS=0: one process.
PYTEST_WORKERS ?= auto
RUN_ARGS ?=

.PHONY: install install-dev test lint fmt demo demo-autoscaling demo-multikueue run clean help real-cluster real-cluster-up

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' \
		'{ name[NR] = $$1; text[NR] = $$2; if (length($$1) > w) w = length($$1) } \
		END { for (i = 1; i <= NR; i++) printf "  %-*s  %s\n", w, name[i], text[i] }'

.tools/bin/uv:
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# Two environments from one lock (README, "Quick start"): `install` puts in the runtime
# dependencies and the simulator (sim/, the workspace's second distribution, gpustack-sim:
# what `make demo` needs; the image takes neither); `install-dev` adds the `dev`
# dependency group (pytest, ruff, mypy, kubectl, checkov) and the extras, for `test` and
# `lint`. --inexact: a runtime sync never removes tools a dev sync put there.
$(BIN)/gpustack-operator: pyproject.toml sim/pyproject.toml uv.lock | $(UV)
	$(UV) sync --frozen --inexact --no-default-groups --all-packages --python $(PYTHON)
	@touch $@

$(VENV)/.dev-installed: pyproject.toml sim/pyproject.toml uv.lock | $(UV)
	$(UV) sync --frozen --all-extras --all-packages --group dev --python $(PYTHON)
	@touch $(BIN)/gpustack-operator $@

install: $(BIN)/gpustack-operator ## create .venv with the runtime dependencies (bootstraps uv if absent)

install-dev: $(VENV)/.dev-installed ## add the test and lint tools (the dev dependency group)

# The real-cluster tier (tests/realcluster, docs/realcluster.md) runs where Go is installed: the
# control plane is built first (cached, seconds once built); without Go it skips, saying so.
test: install-dev ## run the test suite (with the real-cluster tier where Go is installed)
	@if command -v go >/dev/null 2>&1; then hack/realcluster/build.sh >/dev/null; \
	else echo "real-cluster tier skipped: Go is not installed (install Go >= 1.26 to run it)"; fi
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

lint: install-dev ## ruff check, ruff format --check, mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python hack/typecheck.py

fmt: install-dev ## apply ruff's fixes and formatting
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

run: install ## run the worker against the current kubeconfig
	$(BIN)/gpustack-operator worker $(RUN_ARGS)

demo: install ## run the worker on two simulated clusters (mixed nodes; GKE TAS topology), print each chain, submit demo Jobs
	$(BIN)/gpustack-operator --log-level warning sim --cluster $(CLUSTER) -o table --demo-jobs
	$(BIN)/gpustack-operator --log-level warning sim --cluster $(TAS_CLUSTER) -o table --demo-jobs

demo-autoscaling: install ## the same for pools that scale from zero: a Job admitted at zero nodes, a node arriving, its pod running
	$(BIN)/gpustack-operator --log-level warning sim --cluster examples/autoscaling/pools-at-zero.yaml --declared-pools examples/autoscaling/declared-pools.yaml -o table --demo-jobs

demo-multikueue: install-dev ## MultiKueue on three simulated clusters: Jobs submitted once to a manager, each run in the member with its hardware
	$(BIN)/python hack/demo_multikueue.py

real-cluster: ## build etcd, kube-apiserver, kube-controller-manager, kube-scheduler and Kueue from hack/realcluster/go.mod (cached)
	hack/realcluster/build.sh

real-cluster-up: install-dev real-cluster ## start a real control plane with Kueue on loopback (CLUSTER's Nodes), print its kubeconfig; Ctrl-C stops it
	$(BIN)/python -m tests.realcluster up --cluster $(CLUSTER)

clean: ## remove the virtual environment and caches
	rm -rf $(VENV) .tools .mypy_cache .ruff_cache .pytest_cache .hypothesis

# --- deployment (deploy/, docs/deploy.md) ------------------------------------------------------
IMG ?= gpustack-operator:dev
OVERLAY ?= release
CONTAINER_TOOL ?= docker
KUBECTL ?= $(shell command -v kubectl 2>/dev/null || echo $(BIN)/kubectl)

.PHONY: manifests deploy undeploy docker-build image-test chart

manifests: ## render deploy/overlays/$(OVERLAY) to stdout (OVERLAY=release|release-k8s-1.30|dev|monitoring)
	@$(KUBECTL) kustomize deploy/overlays/$(OVERLAY)

# NFD's CRDs are in no overlay: hack/nfd-crds.sh creates each only where none exists and
# deletes only those this project created, so an NFD of the cluster's own (Helm, GPU Operator)
# is never relabelled nor deleted (docs/deploy.md, "Beside an NFD of your own").
deploy: ## create NFD's CRDs where none exist, then kubectl apply -k deploy/overlays/$(OVERLAY)
	KUBECTL="$(KUBECTL)" hack/nfd-crds.sh install
	$(KUBECTL) apply -k deploy/overlays/$(OVERLAY)

undeploy: ## delete what deploy applied, NFD's CRDs only where deploy created them
	$(KUBECTL) delete -k deploy/overlays/$(OVERLAY) --ignore-not-found
	KUBECTL="$(KUBECTL)" hack/nfd-crds.sh uninstall

docker-build: ## build the container image IMG with $(CONTAINER_TOOL)
	@command -v $(CONTAINER_TOOL) >/dev/null 2>&1 || { \
		echo "no container engine: $(CONTAINER_TOOL) not found (set CONTAINER_TOOL=podman?)" >&2; \
		exit 1; }
	$(CONTAINER_TOOL) build -t $(IMG) .

image-test: ## build the image with podman on a local Debian base and run it as deploy/ does
	hack/image-test.sh

# --- the Helm chart (deploy/helm/gpustack-operator, docs/deploy.md "Helm") ------------------------
# The pinned Helm of hack/helm.sh (installed on first use); HELM=... for another.
HELM ?= $(shell hack/helm.sh path)
VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml | head -n 1)
CHART_DIR ?= dist

chart: ## package the Helm chart into $(CHART_DIR)/ (chart version = app version = the project's)
	@[ -x "$(HELM)" ] || hack/helm.sh >/dev/null
	$(HELM) lint --strict deploy/helm/gpustack-operator
	$(HELM) package deploy/helm/gpustack-operator --version $(VERSION) --app-version $(VERSION) -d $(CHART_DIR)
