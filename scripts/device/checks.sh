#!/usr/bin/env bash
# Run ON A LENT DEVICE (the `device` tool), after scripts/device/prepare.sh here, as one call:
#   command "bash scripts/device/checks.sh", carry [".whl"], timeout_s 600
# The GPU checks the open issues name, each with its own time limit, logs in $OUT (they come back):
#   gpu_attention.txt     Pallas flash vs the XLA reference at 8k and 32k tokens (issue 5's never-run check)
#   plan_vs_measured.txt  the planner's step prediction against a measured step (issue 29)
#   inference.txt         int8 / speculative sampling speed on the GPU (issue 31's speed goals)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/device_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site
# rlpt maps envs/ and kernels/ into rlpt.envs / rlpt.kernels: an editable install gives those names.
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.txt" 2>&1 || cat "$OUT/install.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import jax; print(jax.__version__, jax.devices())" | tee -a "$OUT/gpu.txt"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) target=gpu:h200-1 ;;
  *) target=gpu:h100-1 ;;
esac
target=${RLPT_DEVICE_TARGET:-$target}  # a dry run here: RLPT_DEVICE_TARGET=cpu:1 RLPT_DEVICE_PLATFORM=cpu
run() {  # run <seconds> <log> <command...>: one check, its output in $OUT/<log> and its last line here
  local limit=$1 log=$2; shift 2
  echo "== $* (limit ${limit}s)"
  timeout "$limit" "$@" > "$OUT/$log" 2>&1
  echo "exit $?: $(tail -n 1 "$OUT/$log" | cut -c1-400)"
}
export JAX_PLATFORMS=${RLPT_DEVICE_PLATFORM:-cuda}
run 150 gpu_attention.txt python3 scripts/bench/gpu_attention.py
run 150 plan_vs_measured.txt python3 scripts/bench/plan_vs_measured.py "target=$target" model=qwen2_5_0_5b \
  stage=sft data.seq_len=2048 data.batch_size=8 model.remat=full
run 240 inference.txt python3 scripts/bench/inference.py --models bench10m --k 3
