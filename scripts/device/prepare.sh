#!/usr/bin/env bash
# Run HERE, before a device call: download into .whl/ (ignored by git through .git/info/exclude) the wheels that
# scripts/device/checks.sh needs and the device image lacks (its Python is 3.12 with JAX, flax, optax, orbax,
# torch, transformers, tokenizers, safetensors, tensorboard; see /work/.library/device/KINDS.md). Then:
#   device run: command "bash scripts/device/checks.sh", carry [".whl"]
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
# The versions dev-lock / setup.py install here; pure-Python wheels except where noted.
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  hydra-core==1.3.8 omegaconf==2.3.1 gymnasium==1.4.0 farama-notifications==0.0.6 qwix==0.1.8
# omegaconf's parser runtime has no wheel on PyPI (an sdist only): build its pure-Python wheel here.
python3 -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3
du -sh .whl
ls .whl
