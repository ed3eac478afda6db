"""Held-out pass@1 on procedural tasks: greedy generation through the sampler, scored by each domain's verifier."""
import numpy as np

from rlpt.rollout.format import batch_prompts, policy_vision, response_text, sampler_images
from rlpt.sampling import generate
from rlpt.tasks import EVAL_SEED_START, get_domain


def heldout_tasks(domains: list[str], tiers: dict[str, list[int]], per_domain: int, offset: int = 0):
    """Eval-split tasks (seeds from EVAL_SEED_START), spread evenly over each domain's tiers."""

    tasks = []
    for name in domains:
        dom, ts = get_domain(name), tiers[name]
        for i in range(per_domain):
            tasks.append(dom.generate(EVAL_SEED_START + offset + i, ts[i % len(ts)]))
    return tasks


def family_means(tasks, values) -> dict[str, dict]:
    """{"domain/family": {"mean", "n"}} over the tasks whose meta names a problem family (code domains), in
    sorted order; {} when none does. A domain's number mixes families that can sit wholly on one side of the
    train/eval split (code/* splits on the solution), so this is what tells seen from unseen problems apart."""
    groups: dict[str, list[float]] = {}
    for task, value in zip(tasks, values, strict=True):
        family = task.meta.get("family")
        if family is not None:
            groups.setdefault(f"{task.domain}/{family}", []).append(float(value))
    return {k: {"mean": float(np.mean(v)), "n": len(v)} for k, v in sorted(groups.items())}


def evaluate(model, tok, tasks, *, max_new_tokens: int = 16, batch_size: int = 128, sampler=None,
             **sampler_kwargs) -> dict:
    """pass@1 (greedy) overall, per domain and per problem family (`family_means`, where tasks name one);
    returns {"pass1", "per_domain", "per_family", "n"}. sampler: a function with `rlpt.sampling.generate`'s
    signature (default: that), e.g. `functools.partial(speculative_generate, target, draft)` with model=None;
    sampler_kwargs go to it (e.g. quant="int8")."""

    sampler = generate if sampler is None else sampler
    run = sampler if model is None else (lambda *a, **kw: sampler(model, *a, **kw))

    vision = policy_vision(model)  # a VisionLanguageModel: each task's images go in with it
    scores = []
    for start in range(0, len(tasks), batch_size):
        chunk = tasks[start:start + batch_size]
        prompts, pixels, ok = batch_prompts(tok, chunk, vision)  # a corrupt image: logged, scored 0
        out = run(prompts, max_new_tokens, temperature=0.0, stop_ids=tuple(tok.eos_ids),
                  **sampler_kwargs, **sampler_images(pixels))
        toks = np.asarray(out.tokens)
        for t, row, n, fine in zip(chunk, toks, np.asarray(out.lengths), ok):
            verdict = get_domain(t.domain).verify(t, response_text(tok, row[:int(n)]))
            scores.append((t.domain, float(verdict.passed and fine)))
    per = {}
    for d, s in scores:
        per.setdefault(d, []).append(s)
    return {"pass1": float(np.mean([s for _, s in scores])) if scores else 0.0,
            "per_domain": {d: float(np.mean(v)) for d, v in sorted(per.items())},
            "per_family": family_means(tasks, [s for _, s in scores]), "n": len(scores)}
