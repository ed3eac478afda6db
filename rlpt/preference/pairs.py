"""Where pairs come from: verifier-made (a passed and a failed policy sample of one task), synthetic (gold
answer against a corrupted one the verifier rejects) or JSONL files; every source is cleaned and counted."""
import random
import string

import jax
import numpy as np

from rlpt.config.schema import Config, RolloutConfig
from rlpt.eval.heldout import heldout_tasks
from rlpt.parallel.distributed import gather_objects, local_replica
from rlpt.preference.data import PrefPair, clean_pairs, read_pairs, train_tasks
from rlpt.rollout.format import completion_ids, task_prompt
from rlpt.rollout.single_turn import rollout
from rlpt.tasks import get_domain

SOURCES = ("verifier", "synthetic", "jsonl")
CORRUPTIONS = ("swap", "perturb", "mixed")


def verifier_pairs(model, tok, tasks, *, samples: int, temperature: float, max_new_tokens: int,
                   max_prompt_len: int, seed: int, gold_fallback: bool = False,
                   chunk: int = 64) -> tuple[list[PrefPair], dict]:
    """`samples` samples per task through the sampler; each distinct failed response is paired with the
    task's first passed one (or, with gold_fallback, the gold answer when none passed). Returns (pairs,
    counts of tasks with a pair / all passed / all failed / gold-chosen)."""
    if samples < 2:
        raise ValueError(f"pref.samples_per_task={samples}: a verifier pair needs at least 2 samples per task")
    # Several processes: chunk i is sampled by process i mod P on its own copy of the weights, and the chunks'
    # results are exchanged; seeds and rows are the chunk's, so the pairs are those of one process.
    count, me = jax.process_count(), jax.process_index()
    if count > 1:
        model = type(model)(model.config, local_replica(model.params))
    mine = {}
    for i, start in enumerate(range(0, len(tasks), chunk)):
        if i % count == me:
            mine[start] = _chunk_pairs(model, tok, tasks[start:start + chunk], samples, temperature, max_new_tokens,
                                       max_prompt_len, seed * 1_000_003 + start, gold_fallback)
    if count > 1:
        mine = {k: v for part in gather_objects(mine, "pref/verifier_pairs") for k, v in part.items()}
    pairs = []
    counts = {"tasks": len(tasks), "tasks_with_pair": 0, "all_passed": 0, "all_failed": 0, "gold_chosen": 0}
    passed_total = 0
    for start in sorted(mine):
        chunk_pairs, chunk_counts, passed = mine[start]
        pairs += chunk_pairs
        passed_total += passed
        for k, v in chunk_counts.items():
            counts[k] += v
    counts["sample_pass_rate"] = passed_total / max(len(tasks) * samples, 1)
    return pairs, counts


def _chunk_pairs(model, tok, part, samples, temperature, max_new_tokens, max_prompt_len, seed, gold_fallback):
    """(pairs, counts, passed samples) of one chunk of tasks (`verifier_pairs`)."""

    rcfg = RolloutConfig(prompts_per_step=len(part), group_size=samples, max_new_tokens=max_new_tokens,
                         temperature=temperature, max_prompt_len=max_prompt_len)
    traj = rollout(model, tok, part, rcfg, seed=seed, version=0)
    pairs, counts = [], {"tasks_with_pair": 0, "all_passed": 0, "all_failed": 0, "gold_chosen": 0}
    for i, task in enumerate(part):
        rows = range(i * samples, (i + 1) * samples)
        resp = {r: tuple(int(t) for t in traj.response[r, :int(traj.lengths[r])]) for r in rows}
        good = [r for r in rows if traj.passed[r]]
        bad = list(dict.fromkeys(resp[r] for r in rows if not traj.passed[r]))
        if not bad:
            counts["all_passed"] += 1
            continue
        if good:
            chosen = resp[good[0]]
        elif gold_fallback:
            chosen = tuple(completion_ids(tok, task.meta["answer"]))
            counts["gold_chosen"] += 1
        else:
            counts["all_failed"] += 1
            continue
        counts["tasks_with_pair"] += 1
        prompt = tuple(traj.prompts[i * samples])
        images = None if traj.images is None else traj.images[i * samples]
        pairs += [PrefPair(prompt, chosen, b, task.id, images) for b in bad]
    return pairs, counts, int(traj.passed.sum())


def _perturb(text: str, rng: random.Random) -> str:
    """Change one character to another of its class (digit, lower, upper; else a digit)."""
    if not text:
        return "0"
    i = rng.randrange(len(text))
    ch = text[i]
    pool = next((p for p in (string.digits, string.ascii_lowercase, string.ascii_uppercase) if ch in p),
                string.digits)
    return text[:i] + rng.choice([c for c in pool if c != ch]) + text[i + 1:]


def synthetic_pairs(tok, tasks, *, corruption: str, seed: int, vision=None) -> tuple[list[PrefPair], dict]:
    """Gold answer (chosen) against a corruption the domain's verifier rejects: `swap` takes another task's
    answer of the same domain and tier (what a noisy teacher writes), `perturb` changes one character. vision: a
    vision-language policy's VisionConfig (image tasks carry their pixels)."""

    if corruption not in CORRUPTIONS:
        raise ValueError(f"pref.corruption={corruption!r}; expected one of {CORRUPTIONS}")
    rng = random.Random(f"synthetic|{seed}")
    pairs, counts = [], {"tasks": len(tasks), "no_corruption": 0}
    for task in tasks:
        dom, gold = get_domain(task.domain), task.meta["answer"]
        for _ in range(20):
            kind = rng.choice(["swap", "perturb"]) if corruption == "mixed" else corruption
            bad = dom.generate(rng.randrange(1 << 29), task.difficulty).meta["answer"] if kind == "swap" \
                else _perturb(gold, rng)
            if bad != gold and not dom.verify(task, bad).passed:
                break
        else:
            counts["no_corruption"] += 1
            continue
        prompt, images = task_prompt(tok, task, vision)
        pairs.append(PrefPair(tuple(prompt), tuple(completion_ids(tok, gold)), tuple(completion_ids(tok, bad)),
                              task.id, images))
    return pairs, counts


def split_tasks(cfg: Config, split: str) -> list:
    """Tasks for pairs: train seeds for "train"; eval seeds past the pass@1 eval tasks for "heldout"."""
    from rlpt.train.sft import domain_mixture  # on use (start-up: orbax/tensorboard)

    names, _, tiers = domain_mixture(cfg)
    p = cfg.pref
    if split == "train":
        return train_tasks(names, tiers, p.train_tasks, cfg.train.seed)
    per_domain = -(-p.heldout_tasks // len(names))
    return heldout_tasks(names, tiers, per_domain, cfg.domains.eval_offset + p.eval_per_domain)


def make_pairs(cfg: Config, tok, split: str, *, model=None, seed: int = 0) -> tuple[list[PrefPair], dict]:
    """Cleaned pairs of `split` ("train" | "heldout") from cfg.pref.source, with counts of every drop."""
    p = cfg.pref
    if p.source not in SOURCES:
        raise ValueError(f"pref.source={p.source!r}; expected one of {SOURCES}")
    if p.source == "jsonl":
        path = p.path if split == "train" else p.heldout_path
        if not path:
            if split == "train":
                raise ValueError("pref.source=jsonl needs pref.path")
            return [], {"pairs_in": 0, "pairs_kept": 0}
        pairs, counts = read_pairs(path, tok), {}
    elif p.source == "synthetic":
        pairs, counts = synthetic_pairs(tok, split_tasks(cfg, split), corruption=p.corruption,
                                        seed=cfg.train.seed + seed + (0 if split == "train" else 7919),
                                        vision=cfg.model.vision)
    else:
        if model is None:
            raise ValueError("pref.source=verifier needs a policy model to sample from")
        r = cfg.rl.rollout
        pairs, counts = verifier_pairs(model, tok, split_tasks(cfg, split), samples=p.samples_per_task,
                                       temperature=p.sample_temperature, max_new_tokens=r.max_new_tokens,
                                       max_prompt_len=r.max_prompt_len, seed=cfg.train.seed + seed,
                                       gold_fallback=p.gold_fallback)
    kept, clean = clean_pairs(pairs, tok.eos_ids, p.max_len, p.overlong)
    order = np.random.default_rng([cfg.train.seed, 17, seed]).permutation(len(kept))
    return [kept[i] for i in order], counts | clean
