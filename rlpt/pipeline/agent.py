"""The agent stage (`experiment=agent_code_tiny`, `agent_repo_tiny`): a tiny model from scratch learns the
tool-call protocol from a noisy teacher's demonstrations (SFT cold start), then GRPO on multi-turn episodes in
the sandbox.

- CodeAgent (rlpt.tasks code domains): the policy writes solution.py with `write_file`, runs the hidden tests
  with `run_tests` and is rewarded by them (1 if they pass).
- RepoAgent (`agent/repo`): the policy reads the module with `read_file`, fixes the buggy line it shows with
  `apply_patch` (per bug) and `submit`s; the hidden tests grade it.

data.tokenizer=bpe trains the run's tokenizer on the teacher's demonstrations first (`task_tokenizer`).

The teacher shows the protocol, but with probability rl.sft_noise it is wrong (CodeAgent: another task's solution;
RepoAgent, by rl.sft_noise_kind: it opens another module of the package, or the buggy one, and submits without a
patch), so the cold-start policy is often wrong; RL has to fix that from the tests' reward alone.
"""
import concurrent.futures
import dataclasses
import functools
import json
import os
import random
import re
import time

import numpy as np

from rlpt.config.schema import Config, SourceConfig
from rlpt.eval.heldout import family_means, heldout_tasks
from rlpt.models.tokenizer import builtin_tokenizer
from rlpt.observe.observers import default_observers
from rlpt.pipeline.rl import run_rl
from rlpt.pipeline.synthetic import builtin_bpe
from rlpt.rollout.multi_turn import default_env, env_task, observation_budget, rollout
from rlpt.rollout.partial import PartialRollout
from rlpt.rollout.single_turn import rollout as single_turn_rollout
from rlpt.tasks import get_domain
from rlpt.train.loop import finish_run
from rlpt.train.sft import domain_mixture, get_tokenizer
from rlpt.train.sft import run as run_sft

SOLUTION = "solution.py"
REPO_AGENT = "rlpt/RepoAgent-v0"


def tool_call(name: str, arguments: dict) -> str:
    """A Hermes-style tool call with compact JSON (fewer tokens for a character-level model)."""
    body = json.dumps({"name": name, "arguments": arguments}, separators=(",", ":"), ensure_ascii=False)
    return f"<tool_call>{body}</tool_call>"


def compact_source(source: str) -> str:
    """Python source with one space per indentation level instead of four (same program, fewer tokens)."""
    lines = []
    for line in source.splitlines():
        n = len(line) - len(line.lstrip(" "))
        lines.append(" " * (n // 4) + line[n:])
    return "\n".join(lines) + "\n"


def make_env_fn(cfg: Config, tok):
    rcfg = cfg.rl.rollout
    return functools.partial(default_env, max_turns=rcfg.max_turns, time_limit_s=rcfg.episode_timeout_s,
                             obs_budget=observation_budget(tok, rcfg),
                             count_tokens=lambda s: len(tok.encode(s)))


def train_tasks(cfg: Config, count: int, seed_offset: int = 0) -> list:
    """Train-split tasks of the configured domains and tiers (seeds from the train range)."""
    names, _, tiers = domain_mixture(cfg)
    out = []
    for i in range(count):
        name = names[i % len(names)]
        ts = tiers[name]
        out.append(get_domain(name).generate(seed_offset + i, ts[(i // len(names)) % len(ts)]))
    return out


def teacher_actions(task, content) -> list[str]:
    """The teacher's tool calls: CodeAgent `content` is solution.py's text (write it, run the tests); RepoAgent
    `content` is a list of (path, buggy line, fixed line) patches: for each, read the module, then patch it (a
    patch without lines, (path, None, None), only reads); then submit. A line is shown without its indentation when
    that still occurs once in the file (fewer tokens to copy)."""
    if task.env_id != REPO_AGENT:
        return [tool_call("write_file", {"path": SOLUTION, "content": content}), tool_call("run_tests", {})]
    calls = []
    for path, old, new in content:
        if old is None:  # a wrong teacher's read that patches nothing (REPO_NOISE)
            calls.append(tool_call("read_file", {"path": path}))
            continue
        if task.meta["files"].get(path, "").count(old.strip()) == 1:  # both lines share the indentation
            old, new = old.strip(), new.strip()
        calls += [tool_call("read_file", {"path": path}),
                  tool_call("apply_patch", {"path": path, "old": old, "new": new})]
    return calls + [tool_call("submit", {})]


def demonstration(make_env, task, content) -> list[dict]:
    """One teacher episode as chat messages (`teacher_actions`; the last call is not run); the observations are
    the real environment's (reset and the tool calls run in the sandboxed workspace), so SFT sees exactly the
    tokens RL rollouts will see."""
    env = make_env(env_task(task))
    actions = teacher_actions(task, content)
    try:
        obs, _ = env.reset(seed=0, options={"task": env_task(task)})
        msgs = [{"role": "user", "content": obs}]
        for action in actions[:-1]:
            obs, _, terminated, _, _ = env.step(action)
            if terminated:
                raise RuntimeError(f"task {task.id}: environment ended after {action[:60]}")
            msgs += [{"role": "assistant", "content": action}, {"role": "tool", "content": obs}]
    finally:
        env.close()
    return msgs + [{"role": "assistant", "content": actions[-1]}]


def guessed_module(task, rng: random.Random) -> list:
    """A wrong RepoAgent teacher's content: it opens a module of the package that holds no bug, finds nothing to
    fix there and gives up (read, then submit)."""
    buggy = {path for path, _, _ in task.meta["fix"]}
    others = [f"pkg/{m}.py" for m in task.meta["modules"] if f"pkg/{m}.py" not in buggy]
    return [(rng.choice(others), None, None)]


def gave_up(task, rng: random.Random) -> list:
    """A wrong RepoAgent teacher's content: it opens the module that holds the (first) bug, then submits without
    patching it (rng unused: REPO_NOISE's entries share one signature)."""
    return [(task.meta["fix"][0][0], None, None)]


# rl.sft_noise_kind -> a wrong RepoAgent demonstration's content
REPO_NOISE = {"wrong_module": guessed_module, "give_up": gave_up}


def write_demonstrations(cfg: Config, tok, path: str, count: int, noise: float) -> dict:
    """`count` demonstrations to a JSONL file; a share `noise` is wrong: CodeAgent writes another task's solution,
    RepoAgent submits without a patch, after opening another module (rl.sft_noise_kind=wrong_module,
    `guessed_module`) or the right one (give_up, `gave_up`)."""
    tasks = train_tasks(cfg, count)
    rng = random.Random(f"agent-demos|{cfg.train.seed}")
    contents, wrong = [], 0
    for t in tasks:
        key = "fix" if t.env_id == REPO_AGENT else "answer"
        src = t.meta[key]
        if rng.random() < noise:
            if t.env_id == REPO_AGENT:
                src = REPO_NOISE[cfg.rl.sft_noise_kind](t, rng)
                wrong += 1
            else:
                other = tasks[rng.randrange(count)]
                wrong += other.meta[key] != src
                src = other.meta[key]
        contents.append(src if t.env_id == REPO_AGENT else compact_source(src))
    make_env = make_env_fn(cfg, tok)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        demos = list(pool.map(lambda a: demonstration(make_env, *a), zip(tasks, contents)))
    write_chats(path, demos)
    lengths = [len(tok.encode_chat(d)[0]) for d in demos]
    return {"demos": count, "demos_wrong": wrong, "demo_tokens_max": max(lengths)}


def task_tokenizer(cfg: Config, folder: str) -> str:
    """data.tokenizer=bpe: `builtin_bpe` of at most model.vocab_size ids, trained on clean teacher demonstrations of
    the data.pool_size train tasks (rendered with the built-in chat template; observations cut at 8x
    rl.rollout.max_prompt_len characters), saved to `folder`. Deterministic in the config, so a resumed run trains
    the same one."""
    btok = builtin_tokenizer()
    rcfg = cfg.rl.rollout
    wide = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, rollout=dataclasses.replace(
        rcfg, max_prompt_len=8 * rcfg.max_prompt_len)))
    path = os.path.join(folder, "corpus.jsonl")
    write_demonstrations(wide, btok, path, cfg.data.pool_size, 0.0)
    with open(path) as f:
        texts = [btok.apply_chat_template(json.loads(line)["messages"]) for line in f]
    builtin_bpe(texts, cfg.model.vocab_size).save(folder)
    return folder


def single_turn_answer(task) -> str:
    """What a policy without tools must write: a repository task's fixed modules as `# file:` blocks (indentation
    compacted as the teacher's), other tasks' meta["answer"]."""
    if task.env_id == REPO_AGENT:
        return _BLOCK.sub(lambda m: f"{m.group(1)}{compact_source(m.group(2))}```", task.meta["answer"])
    return task.meta["answer"]


_BLOCK = re.compile(r"(```python\n# file: [^\n]+\n)(.*?)```", re.DOTALL)


def no_tool_baseline(cfg: Config, tok, eval_tasks) -> dict:
    """Held-out pass@1 of a same-size policy without tools: trained from scratch for rl.no_tool_steps SFT steps
    (the cold start's settings, a clean teacher) on the train tasks' single-turn answers (`single_turn_answer`),
    then greedy on the held-out prompts with room for the longest train answer, graded by the domain's verifier
    (agent/repo: `repo_hidden_tests`, the same hidden tests)."""
    out = os.path.join(cfg.train.out_dir, "no_tool")
    path = os.path.join(out, "answers.jsonl")
    chats = [[{"role": "user", "content": t.prompt}, {"role": "assistant", "content": single_turn_answer(t)}]
             for t in train_tasks(cfg, cfg.data.pool_size)]
    write_chats(path, chats)
    # room for the longest answer (the agent's budget is sized for a patch, not whole modules): its assistant tokens
    longest = max(sum(tok.encode_chat(c)[1]) for c in chats)
    rcfg = dataclasses.replace(greedy(cfg.rl.rollout), max_new_tokens=max(cfg.rl.rollout.max_new_tokens, longest + 16))
    seq_len = max(cfg.data.seq_len, rcfg.max_prompt_len + rcfg.max_new_tokens)
    model = sft_on_chats(dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, seq_len=seq_len)), "answers", path,
                         cfg.rl.no_tool_steps, out)["model"]
    traj = single_turn_rollout(model, tok, eval_tasks, rcfg, seed=cfg.train.seed, version=-1)
    return {"pass1": float(traj.passed.mean()), "sample": traj.texts[0]}


def write_chats(path: str, chats: list[list[dict]]) -> None:
    """Chats (lists of messages) as a JSONL file of {"messages": [...]} lines, the SFT data format."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for msgs in chats:
            f.write(json.dumps({"messages": msgs}) + "\n")


def sft_on_chats(cfg: Config, name: str, path: str, steps: int, out_dir: str) -> dict:
    """SFT from scratch (the config's model and optimizer) for `steps` steps on the chats in `path`, data source
    `name` (loss on the assistant turns), checkpoints in out_dir; `rlpt.train.sft.run`'s result."""
    sft_cfg = dataclasses.replace(
        cfg, data=dataclasses.replace(cfg.data, sources={name: SourceConfig(kind="jsonl", path=path)}),
        train=dataclasses.replace(cfg.train, steps=steps, eval_every=0, out_dir=out_dir))
    return run_sft(sft_cfg, print_result=False)


def greedy(rcfg):
    """rl.rollout for evaluation: one greedy sample per task."""
    return dataclasses.replace(rcfg, group_size=1, temperature=0.0, top_k=None, top_p=None)


def agent_rollout(cfg: Config):
    """The RL stage's rollout_fn: multi-turn episodes, paused across steps with rl.rollout.partial.enabled."""
    if cfg.rl.rollout.partial.enabled:
        return PartialRollout(cfg.rl.rollout, max_turns=cfg.rl.rollout.max_turns)
    return functools.partial(rollout, max_turns=cfg.rl.rollout.max_turns)


def evaluate_agent(model, tok, tasks, rcfg, seed: int) -> dict:
    """Greedy multi-turn episodes on held-out tasks: pass rate (overall and per problem family), mean turns and
    tool calls per episode."""
    traj = rollout(model, tok, tasks, greedy(rcfg), seed=seed, version=-1, max_turns=rcfg.max_turns)
    return {"pass1": float(traj.passed.mean()), "per_family": family_means(tasks, traj.passed),
            "turns": float(traj.turns.mean()), "tool_calls": float(traj.tool_calls.mean()), "sample": traj.texts[0]}


class EpisodeStats:
    """Observer for run_rl: turns and executed tool calls per episode into each step's metrics row."""

    def __init__(self):
        self.turns, self.calls, self.statuses = [], [], {}

    def on_step(self, step, traj, row):
        row["turns_per_episode"] = float(traj.turns.mean())
        row["tool_calls_per_episode"] = float(traj.tool_calls.mean())
        self.turns.append(row["turns_per_episode"])
        self.calls.append(row["tool_calls_per_episode"])
        for s in traj.status:
            self.statuses[s] = self.statuses.get(s, 0) + 1

    def close(self) -> dict:
        return {"turns_per_episode": float(np.mean(self.turns)) if self.turns else 0.0,
                "tool_calls_per_episode": float(np.mean(self.calls)) if self.calls else 0.0,
                "episode_status": dict(sorted(self.statuses.items()))}


def run(cfg: Config) -> dict:
    t0 = time.time()
    out = cfg.train.out_dir
    if cfg.data.tokenizer == "bpe":  # every later load (SFT, RL, its resume, the export) reads the folder
        folder = task_tokenizer(cfg, os.path.join(out, "tokenizer"))
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, tokenizer=folder))
    tok = get_tokenizer(cfg)
    if cfg.data.tokenizer != "builtin":
        print(f"[agent] tokenizer {cfg.data.tokenizer}: {tok.vocab_size} ids", flush=True)
    rcfg = cfg.rl.rollout
    demo_path = os.path.join(out, "sft", "demos.jsonl")
    # data.pool_size: examples generated per procedural pass, here the number of teacher episodes
    demo_info = write_demonstrations(cfg, tok, demo_path, cfg.data.pool_size, cfg.rl.sft_noise)
    print(f"[agent] {demo_info['demos']} teacher demonstrations ({demo_info['demos_wrong']} with a wrong "
          f"solution), longest {demo_info['demo_tokens_max']} tokens", flush=True)
    sft = sft_on_chats(cfg, "demos", demo_path, cfg.rl.sft_steps, os.path.join(out, "sft"))
    names, _, tiers = domain_mixture(cfg)
    eval_tasks = heldout_tasks(names, tiers, cfg.rl.eval_per_domain, cfg.domains.eval_offset)
    sft_eval = evaluate_agent(sft["model"], tok, eval_tasks, rcfg, seed=cfg.train.seed)
    print(f"[eval sft] held-out pass@1 {sft_eval['pass1']:.3f}, {sft_eval['turns']:.2f} turns and "
          f"{sft_eval['tool_calls']:.2f} tool calls per episode", flush=True)
    no_tool = None
    if cfg.rl.no_tool_steps:
        no_tool = no_tool_baseline(cfg, tok, eval_tasks)
        print(f"[eval no tools] held-out pass@1 {no_tool['pass1']:.3f} (a same-size policy trained "
              f"{cfg.rl.no_tool_steps} steps on single-turn answers)", flush=True)
    stats = EpisodeStats()
    rl_dir = os.path.join(out, "rl")
    rl = run_rl(cfg, tok, init_model=sft["model"], out_dir=rl_dir, observers=[stats, *default_observers(cfg, rl_dir)],
                rollout_fn=agent_rollout(cfg))
    rl_eval = evaluate_agent(rl["model"], tok, eval_tasks, rcfg, seed=cfg.train.seed)
    print(f"[eval rl]  held-out pass@1 {rl_eval['pass1']:.3f}, {rl_eval['turns']:.2f} turns and "
          f"{rl_eval['tool_calls']:.2f} tool calls per episode", flush=True)
    hist = rl["history"]
    k = max(1, min(5, len(hist) // 4))
    first = float(np.mean([h["reward_mean"] for h in hist[:k]])) if hist else None
    last = float(np.mean([h["reward_mean"] for h in hist[-k:]])) if hist else None
    print(f"[agent] training reward {first:.3f} (first {k} steps) -> {last:.3f} (last {k} steps)", flush=True)
    summary = {"experiment": cfg.experiment_name, **demo_info, "sft_steps": cfg.rl.sft_steps,
               "sft_final_loss": sft["final_loss"], "reward_first": first, "reward_last": last,
               "reward_window": k, "sft_pass1": sft_eval["pass1"], "rl_pass1": rl_eval["pass1"],
               "no_tool_pass1": None if no_tool is None else no_tool["pass1"],
               "eval_tasks": len(eval_tasks), "max_turns": cfg.rl.rollout.max_turns, **rl["summary"],
               "wall_s": round(time.time() - t0, 2), "run_dir": os.path.abspath(out)}
    families = sorted(set(sft_eval["per_family"]) | set(rl_eval["per_family"]))
    if families:
        summary["per_family"] = {f: {"n": (sft_eval["per_family"].get(f) or rl_eval["per_family"][f])["n"],
                                     "sft_pass1": sft_eval["per_family"].get(f, {}).get("mean"),
                                     "rl_pass1": rl_eval["per_family"].get(f, {}).get("mean")} for f in families}
        print("[eval] held-out pass@1 per problem family (sft -> rl):", ", ".join(
            f"{f} {v['sft_pass1']:.2f} -> {v['rl_pass1']:.2f} (n={v['n']})" for f, v in summary["per_family"].items()),
            flush=True)
    print(f"[agent] sample episode after RL:\n{rl_eval['sample']}", flush=True)
    return finish_run(summary, cfg.train.out_dir, model=rl["model"])
