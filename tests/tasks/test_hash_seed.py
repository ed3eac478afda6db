"""Every domain's task is a function of (domain, tier, seed) alone: the same in processes with different
PYTHONHASHSEED (a set of strings iterates in hash order, so a generator that draws from one is not seeded)."""
import os
import subprocess
import sys

_DUMP = """
import hashlib
from rlpt.tasks import get_domain, list_domains
for name in list_domains():
    domain = get_domain(name)
    for tier in domain.tiers:
        task = domain.generate(3, tier)
        text = task.prompt + "\\x00" + str(task.meta["answer"])
        print(name, tier, hashlib.sha256(text.encode()).hexdigest()[:16])
"""


def _dump(hash_seed: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONHASHSEED=hash_seed, JAX_PLATFORMS="cpu")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return subprocess.Popen([sys.executable, "-c", _DUMP], env=env, cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_tasks_do_not_depend_on_the_hash_seed():
    procs = [_dump(seed) for seed in ("1", "2")]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-2000:]
        outs.append(out.splitlines())
    assert len(outs[0]) == len(outs[1]) > 300
    differ = sorted({" ".join(a.split()[:2]) for a, b in zip(*outs) if a != b})
    assert not differ, f"tasks differ between PYTHONHASHSEED=1 and 2: {differ}"
