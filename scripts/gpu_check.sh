#!/usr/bin/env bash
# The GPU check of the distributed path (one command, a few minutes on one GPU):
#   bash scripts/gpu_check.sh
# 1. vLLM greedy generation with each role's LoRA adapter equals the hf backend's greedy tokens;
# 2. vLLM behaviour log-probs agree with the hf log-probs of the same tokens (stated tolerance);
# 3. one distributed training step with 2 rollout workers (hf on the GPU) and an NCCL learner.
# Needs a CUDA GPU and vLLM; nothing is downloaded (a tiny random model is built locally).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec timeout 480 "$PY" scripts/gpu_check_distributed.py "$@"
