"""Import every module of rlpt (and rlpt.envs, rlpt.kernels) alone, each in a fresh process, to find import cycles that
a module-top import made: `python scripts/check_imports.py [--jobs 2]`. Prints each failure with its error's last
line, and exits non-zero if any module fails. Takes a few minutes on 2 cores (each process loads JAX)."""
import argparse
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Files that are not modules of the package: the sandbox's grader runs as a standalone script in the sandbox.
STANDALONE = {"rlpt.envs.sandbox.grader", "rlpt.envs.sandbox.grader_server"}


def modules() -> list[str]:
    out = []
    for root in ("rlpt", "envs", "kernels"):
        for folder, _, files in os.walk(os.path.join(REPO, root)):
            for name in sorted(files):
                if name.endswith(".py"):
                    rel = os.path.relpath(os.path.join(folder, name), REPO)[:-3]
                    mod = rel.replace(os.sep, ".").removesuffix(".__init__")
                    out.append(mod if mod.startswith("rlpt") else "rlpt." + mod)
    return sorted(m for m in out if m not in STANDALONE)


def check(mod: str) -> str | None:
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    r = subprocess.run([sys.executable, "-c", f"import {mod}"], capture_output=True, text=True, cwd="/", env=env)
    return None if r.returncode == 0 else (r.stderr.strip().splitlines() or ["(no output)"])[-1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    mods = modules()
    with ThreadPoolExecutor(a.jobs) as pool:
        failed = [(m, err) for m, err in zip(mods, pool.map(check, mods), strict=True) if err]
    for m, err in failed:
        print(f"{m}: {err}")
    print(f"{len(mods) - len(failed)} of {len(mods)} modules import alone")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
