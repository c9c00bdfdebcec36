# sparse: one venv (.venv), one entry per job. `make help` lists them.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: help setup run test e2e lint bench bench-latency bench-throughput bench-sim control-plane helm clean

help:
	@echo "make run              set up and run the extender (embedded defaults, no cluster)"
	@echo "make test             set up and run the unit and integration tests (real redis-server)"
	@echo "make e2e              build the local control plane and Helm, run the end-to-end tests"
	@echo "make lint             ruff and the manifests drift check"
	@echo "make bench            latency benchmark (5,000 nodes x 8 GPUs) and the trace simulator"
	@echo "make bench-throughput pods/s through the real kube-scheduler (needs the control plane)"

$(STAMP): pyproject.toml
	@command -v redis-server >/dev/null || hack/install-system-deps.sh
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

setup: $(STAMP)

run: setup
	$(BIN)/sparse-extender serve --nodes examples/node-conf.yaml --log-format text

test: setup
	$(BIN)/python -m pytest -q

control-plane:
	hack/build-control-plane.sh

helm:
	hack/build-helm.sh

e2e: setup control-plane helm
	SPARSE_E2E_REQUIRE=1 $(BIN)/python -m pytest -q -m e2e tests/e2e

lint: setup
	$(BIN)/ruff check .
	hack/render-manifests.sh --check

bench: bench-latency bench-sim

bench-latency: setup
	$(BIN)/python -m bench.latency

bench-sim: setup
	$(BIN)/sparse-bench fgd --workloads default --seeds 42

bench-throughput: setup control-plane
	$(BIN)/python -m bench.throughput

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
.PHONY: chaos chaos-replicas
chaos: chaos-replicas

chaos-replicas: setup
	$(BIN)/python tests/chaos/replicas_driver.py --binds 20000 --in-flight 1000
