# sparse: one venv (.venv), one entry per job. `make help` lists them.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run

.PHONY: help setup run test e2e lint bench bench-latency bench-throughput bench-sim control-plane helm clean
.PHONY: chaos chaos-fuzz chaos-replicas

help:
	@echo "make run              run the extender (embedded defaults, no cluster, no Redis, no root)"
	@echo "make test             set up and run the unit and integration tests (real redis-server)"
	@echo "make test-slow        the tests marked slow (CI runs them after make test)"
	@echo "make e2e              build the local control plane and Helm, run the end-to-end tests"
	@echo "make demo             local control plane + extender + fake GPU nodes: where pods land"
	@echo "make images           build the extender, predictor and agent images (REGISTRY=, TAG=)"
	@echo "make control-plane    build etcd, kube-apiserver, kube-scheduler (10-25 min cold on 2 cores)"
	@echo "make helm             build Helm"
	@echo "make lint             ruff and the manifests drift check"
	@echo "make setup            create .venv with the dev extras"
	@echo "make system-deps      install redis-server and openssl with apt (sudo when not root)"
	@echo "make clean            remove .venv, results/ and caches"
	@echo "make predictor-data   regenerate the predictor's measured dataset (installs torch)"
	@echo "make predictor-train  retrain and evaluate the predictor"
	@echo "make bench-latency    filter + prioritize latency only"
	@echo "make bench-sim        the trace simulator (FGD protocol) only"
	@echo "make chart-docs       regenerate the chart's values.schema.json, README.md and manifests/"
	@echo "make bench            latency benchmark (5,000 nodes x 8 GPUs) and the trace simulator"
	@echo "make bench-throughput pods/s through the real kube-scheduler (needs the control plane)"
	@echo "make chaos            long chaos and fuzz suites (50,000 fuzzed requests, ...)"
	@echo "make chaos-fuzz       the fuzz half of make chaos (hypothesis over the four verbs)"
	@echo "make chaos-replicas   the replica half of make chaos (3 replicas, Redis + Sentinel)"

# The dev venv (tests, benchmarks, demo). System packages are system-deps, never make run's.
$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP) $(RUN_STAMP)

# The extender alone needs only the runtime dependencies.
$(RUN_STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	@touch $(RUN_STAMP)

.PHONY: system-deps test-slow demo images predictor-data predictor-train
system-deps:
	@command -v redis-server >/dev/null && command -v openssl >/dev/null || hack/install-system-deps.sh

setup: $(STAMP)

run: $(RUN_STAMP)
	$(BIN)/sparse-extender serve --nodes examples/node-conf.yaml --log-format text

# --durations: the slowest tests, to keep the suite inside its 5-minute budget.
test: system-deps setup
	$(BIN)/python -m pytest -q --durations=10

test-slow: system-deps setup
	$(BIN)/python -m pytest -q -m 'slow and not e2e'

control-plane:
	hack/build-control-plane.sh

helm:
	hack/build-helm.sh

e2e: system-deps setup control-plane helm
	SPARSE_E2E_REQUIRE=1 $(BIN)/python -m pytest -q tests/webhook/test_chart.py tests/webhook/test_chart_templates.py
	SPARSE_E2E_REQUIRE=1 $(BIN)/python -m pytest -q -m e2e tests/e2e

# Cold: builds the control plane first (make control-plane); warm: ~15 s. DEMO_ARGS=--exit to
# tear down right after printing (default: stays up for kubectl until Ctrl-C).
DEMO_ARGS ?=
demo: setup control-plane
	$(BIN)/python hack/demo.py $(DEMO_ARGS)

# REGISTRY=registry.example.com/mirror TAG=dev PUSH=1 make images; BUILDER=buildah|podman|docker.
images:
	hack/build-images.sh

lint: setup
	$(BIN)/ruff check .
	hack/render-manifests.sh --check
	$(BIN)/python hack/chart_docs.py --check

# values.yaml is the source: schema and chart README from its comments, then the plain manifests.
.PHONY: chart-docs
chart-docs: setup
	$(BIN)/python hack/chart_docs.py
	hack/render-manifests.sh

bench: bench-latency bench-sim

bench-latency: setup
	$(BIN)/python -m bench.latency

bench-sim: setup
	$(BIN)/sparse-bench fgd --workloads default --seeds 42

bench-throughput: setup control-plane
	$(BIN)/python -m bench.throughput

# Long forms of tests/chaos (the short forms run with `make test`).
chaos: chaos-fuzz

chaos-fuzz: setup
	PYTHONPATH=tests $(BIN)/python -m chaos.fuzz_verbs --requests 50000

clean:
	rm -rf $(VENV) results .pytest_cache

# Demand predictor: regenerate the measured dataset (needs the torch extra), retrain, evaluate.
predictor-data: setup
	$(BIN)/pip install -q -e '.[torch]'
	$(BIN)/sparse-predictor generate --device cpu

predictor-train: setup
	$(BIN)/sparse-predictor train
	$(BIN)/sparse-predictor evaluate

# Long form of the replica chaos run: 20,000 binds, 1,000 in flight, 3 replicas, Redis behind
# sentinels, a replica kill -9, a Redis restart and a failover mid-run (short form: make test).
chaos: chaos-replicas

chaos-replicas: setup
	$(BIN)/python tests/chaos/replicas_driver.py --binds 20000 --in-flight 1000
