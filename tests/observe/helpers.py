"""Trajectories batches built from real tasks without a model (answers chosen per sample)."""
import numpy as np

from rlpt.rollout.single_turn import Trajectories
from rlpt.tasks import get_domain

_VERIFIER_SUFFIX = {"verr": "\n[verifier error: KeyError: 'answer']",
                    "sbox": "\n[verifier error: SandboxError: sandbox setup failed]"}


def traj_from_texts(tasks, texts, truncated=None, version=0, seed=0):
    """texts[i]: the G responses to tasks[i], scored by the domain's real verifier (so rewards are what
    training would see). A text ending in a '[verifier error: ...]' suffix scores 0."""
    G = len(texts[0])
    rng = np.random.default_rng(seed)
    flat, rewards, passed = [], [], []
    for task, group in zip(tasks, texts, strict=True):
        assert len(group) == G
        for text in group:
            if "[verifier error:" in text:
                score, ok = 0.0, False
            else:
                v = get_domain(task.domain).verify(task, text)
                score, ok = float(v.score), bool(v.passed)
            flat.append(text)
            rewards.append(score)
            passed.append(ok)
    R, N = len(flat), 8
    return Trajectories(tasks=list(tasks), prompts=[[1, 2, 3]] * R, response=rng.integers(3, 50, size=(R, N)),
                        lengths=rng.integers(1, N + 1, size=R), rollout_logp=-rng.random((R, N)).astype(np.float32),
                        rewards=np.asarray(rewards, np.float32), passed=np.asarray(passed, bool),
                        group_ids=np.repeat(np.arange(len(tasks)), G),
                        truncated=np.zeros(R, bool) if truncated is None else np.asarray(truncated, bool),
                        version=version, gen_s=0.5, verify_s=0.01, texts=flat)


def make_traj(specs, group_size=4, version=0, seed=0):
    """specs: [(domain, tier, seed, kinds)] with kinds a list of group_size sample kinds from
    'gold' | 'wrong' | 'empty' | 'long' (truncated wrong) | 'verr' (verifier error) | 'sbox' (sandbox error)."""
    tasks, texts, truncated = [], [], []
    for domain, tier, s, kinds in specs:
        assert len(kinds) == group_size
        task = get_domain(domain).generate(s, tier)
        tasks.append(task)
        texts.append([{"gold": task.meta["answer"], "wrong": "wrong 12345", "empty": "", "long": "1 2 3 4 5 6 7 8",
                       "verr": "7", "sbox": "7"}[k] + _VERIFIER_SUFFIX.get(k, "") for k in kinds])
        truncated += [k == "long" for k in kinds]
    return traj_from_texts(tasks, texts, truncated, version, seed)


def row_of(traj, step):
    return {"step": step, "reward_mean": float(traj.rewards.mean()), "pass_rate": float(traj.passed.mean()),
            "gen_s": traj.gen_s, "verify_s": traj.verify_s, "train_s": 0.3, "idle_s": 0.0,
            **{f"reward/{d}": float(np.mean([traj.rewards[i] for i in range(len(traj.texts))
                                             if traj.tasks[traj.group_ids[i]].domain == d]))
               for d in {t.domain for t in traj.tasks}}}
