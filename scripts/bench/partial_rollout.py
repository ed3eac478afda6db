"""Benchmark: multi-turn rollout throughput with long-tailed episodes, partial rollouts against lockstep steps.

One process, the same tiny policy and the same task stream for both: each task needs a number of tool turns drawn
from a long tail (1 turn with probability 0.75, otherwise `--long` turns); each tool call takes `--tool-ms`.
The peer is the lockstep multi-turn rollout (`rlpt.rollout.multi_turn.rollout`: a step waits for its slowest
episode, as synchronous agent loops do); ours is `rlpt.rollout.partial.PartialRollout` with extra_groups =
prompts_per_step (the step ends once prompts_per_step groups have ended; the rest are paused, saved and continued
next step). Unit: trained groups per second of rollout wall time over `--steps` steps, timed on a second pass of
the same steps (the first compiles every shape); ratio = ours / peer. Also printed: policy turns per step and the
staleness of the trained rows (partial only).

    python scripts/bench/partial_rollout.py [--steps 8] [--prompts 8] [--group 4] [--long 8] [--tool-ms 20]
"""
import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402
from rlpt.envs.builtin_tasks import EnvTask  # noqa: E402

from rlpt.config.schema import PartialConfig, RolloutConfig  # noqa: E402
from rlpt.models import builtin_tokenizer, init_model  # noqa: E402
from rlpt.models.config import ModelConfig  # noqa: E402
from rlpt.rollout.multi_turn import rollout  # noqa: E402
from rlpt.rollout.partial import PartialRollout  # noqa: E402


class ToolEnv:
    """Ends with reward 1 after meta['turns'] tool calls, each taking tool_s; its state is the call count. With a
    `log` list, each call appends (task id, calls so far) to it (tests/rollout/test_partial.py uses this env too)."""

    def __init__(self, tool_s, log=None):
        self.tool_s, self.log, self.n = tool_s, log, 0

    def reset(self, seed=None, options=None):
        self.task, self.n = options["task"], 0
        return f"task {self.task.id}: call the tool", {}

    def step(self, action):
        time.sleep(self.tool_s)
        self.n += 1
        if self.log is not None:
            self.log.append((self.task.id, self.n))
        done = self.n >= self.task.meta["turns"]
        return f"ok {self.n}", float(done), done, False, {"calls": [{"name": "tool"}]}

    def episode_state(self):
        return {"n": self.n}

    def restore_episode(self, state):
        self.n = state["n"]

    def close(self):
        pass


def task_stream(seed, long_turns):
    rng, i = random.Random(seed), 0
    while True:
        yield EnvTask("bench", f"t{i}", "", meta={"turns": 1 if rng.random() < 0.75 else long_turns})
        i += 1


def policy():
    cfg = ModelConfig(family="qwen2", vocab_size=128, hidden_size=64, intermediate_size=128, num_layers=2,
                      num_heads=4, num_kv_heads=2, max_position_embeddings=4096, qkv_bias=True, tie_embeddings=True)
    m = init_model(cfg, seed=3)
    m.params["embed"] = m.params["embed"].at[2].set(m.params["embed"][2] * 40.0)  # short turns (end-of-turn)
    return m


def run(kind, model, tok, rcfg, steps, long_turns, tool_s, seed):
    """(seconds for `steps` steps, policy turns per step, staleness of trained rows)."""
    make_env = lambda task: ToolEnv(tool_s)  # noqa: E731
    stream = task_stream(seed, long_turns)
    partial = PartialRollout(rcfg, max_turns=rcfg.max_turns, make_env=make_env) if kind == "partial" else None
    wall, turns, stale = 0.0, [], []
    for step in range(1, steps + 1):
        n = partial.tasks_wanted() if partial else rcfg.prompts_per_step
        tasks = [next(stream) for _ in range(n)]
        t0 = time.perf_counter()
        if partial:
            traj = partial(model, tok, tasks, rcfg, seed=step, version=step - 1, step=step)
        else:
            traj = rollout(model, tok, tasks, rcfg, seed=step, version=step - 1, max_turns=rcfg.max_turns,
                           make_env=make_env)
        wall += time.perf_counter() - t0
        turns.append(int(traj.turns.max()))
        if traj.row_versions is not None:
            stale += list((step - 1) - traj.row_versions)
    return wall, float(np.mean(turns)), stale


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--long", type=int, default=8)
    ap.add_argument("--tool-ms", type=float, default=20.0)
    a = ap.parse_args()
    tok, model = builtin_tokenizer(), policy()
    rcfg = RolloutConfig(prompts_per_step=a.prompts, group_size=a.group, max_new_tokens=96 * (a.long + 1),
                         temperature=1.0, max_prompt_len=64, max_turns=a.long + 2,
                         partial=PartialConfig(enabled=True, extra_groups=a.prompts, max_lag=3))
    out = {}
    for kind in ("lockstep", "partial"):
        run(kind, model, tok, rcfg, a.steps, a.long, a.tool_ms / 1000, seed=0)  # compiles every shape it meets
        wall, turns, stale = run(kind, model, tok, rcfg, a.steps, a.long, a.tool_ms / 1000, seed=0)
        out[kind] = {"groups_per_s": a.steps * a.prompts / wall, "wall_s": wall, "turns_per_step": turns}
        if stale:
            out[kind] |= {"staleness_mean": float(np.mean(stale)), "staleness_max": int(max(stale))}
        print(f"{kind:9s} {out[kind]['groups_per_s']:.2f} groups/s ({wall:.1f} s for {a.steps} steps), "
              f"{turns:.1f} turns per step" + (f", staleness mean {np.mean(stale):.2f} max {max(stale)}"
                                               if stale else ""), flush=True)
    ours, peer = out["partial"]["groups_per_s"], out["lockstep"]["groups_per_s"]
    print(json.dumps({"benchmark": "partial_rollout", "ours": round(ours, 3), "peer": round(peer, 3),
                      "unit": "trained groups/s", "ratio": round(ours / peer, 3),
                      "goal": "long episodes do not stall a step: ratio > 1 with bounded staleness",
                      "config": vars(a), "detail": out}))


if __name__ == "__main__":
    main()
