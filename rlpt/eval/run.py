"""Run a suite: responses from a policy (model, oracle, empty), verdicts in parallel, pass@1 and pass@k tables."""
import concurrent.futures
import time

import numpy as np

from rlpt.eval.passk import pass_at_k

RESPONSE_CLIP = 400  # characters of each greedy response kept in results.json


def model_responses(model, tok, tasks, max_new: int, *, n: int = 1, temperature: float = 0.0, top_k: int = 0,
                    top_p: float = 1.0, seed: int = 0, batch_size: int = 32) -> list[list[str]]:
    """n decoded responses per task (greedy when temperature is 0) through rlpt.sampling.generate."""
    from rlpt.rollout.format import (  # on use (start-up: jax/PIL)
        batch_prompts,
        policy_vision,
        response_text,
        sampler_images,
    )
    from rlpt.sampling import generate  # on use (start-up: jax)

    vision = policy_vision(model)  # a VisionLanguageModel: each task's images go in with it
    out: list[list[str]] = []
    for start in range(0, len(tasks), batch_size):
        chunk = tasks[start:start + batch_size]
        prompts, pixels, ok = batch_prompts(tok, chunk, vision)  # a corrupt image: logged, answered ""
        gen = generate(model, prompts, max_new, n=n, temperature=temperature,
                       top_k=top_k or None, top_p=top_p if top_p < 1.0 else None, stop_ids=tuple(tok.eos_ids),
                       seed=seed + start, keep_state=False, **sampler_images(pixels))
        toks, lens = np.asarray(gen.tokens), np.asarray(gen.lengths)  # (len(chunk) * n, max_new), (len * n,)
        for i in range(len(chunk)):  # rows are prompt-major
            out.append([response_text(tok, toks[i * n + j, :int(lens[i * n + j])]) if ok[i] else ""
                        for j in range(n)])
    return out


def fixed_responses(tasks, policy: str, n: int) -> list[list[str]]:
    """oracle: every task's gold answer (meta['answer']); empty: the empty string."""
    if policy == "oracle":
        return [[t.meta["answer"]] * n for t in tasks]
    if policy == "empty":
        return [[""] * n for t in tasks]
    raise ValueError(f"policy={policy!r} has no fixed responses")


def verify_all(suite, tasks, responses: list[list[str]], workers: int) -> list[list]:
    """Verdicts with the same nesting as `responses`; sandboxed checks run on `workers` threads."""
    flat = [(t, r) for t, rs in zip(tasks, responses) for r in rs]
    with concurrent.futures.ThreadPoolExecutor(max(1, workers)) as pool:
        verdicts = list(pool.map(lambda tr: suite.verify(*tr), flat))
    out, i = [], 0
    for rs in responses:
        out.append(verdicts[i:i + len(rs)])
        i += len(rs)
    return out


def _plain(value) -> bool:
    scalar = (str, int, float, bool, type(None))
    return isinstance(value, scalar) or (isinstance(value, (list, tuple)) and all(isinstance(x, scalar) for x in value))


def records_of(tasks, greedy: list[str], greedy_verdicts, samples=None, sample_verdicts=None) -> list[dict]:
    """One row per task: id, domain, tier, greedy pass, and (n, c) over the samples when sampled."""
    rows = []
    for i, (t, text, v) in enumerate(zip(tasks, greedy, greedy_verdicts)):
        row = {"id": t.id, "domain": t.domain, "tier": int(t.difficulty), "passed": bool(v.passed),
               "score": float(v.score), "response": text[:RESPONSE_CLIP]}
        if t.meta.get("family") is not None:  # code domains: the problem family (rlpt.tasks.native.code)
            row["family"] = f"{t.domain}/{t.meta['family']}"
        if not v.passed:  # JSON-safe details of the failure (scalars and lists of scalars)
            row["details"] = {k: val for k, val in v.details.items() if _plain(val)}
        if sample_verdicts is not None:
            row["n"] = len(sample_verdicts[i])
            row["c"] = int(sum(sv.passed for sv in sample_verdicts[i]))
        rows.append(row)
    return rows


def aggregate(rows: list[dict], ks: list[int]) -> dict:
    """{"n", "pass1", "pass@k"...} over rows; pass@k only when every row has at least k samples."""
    if not rows:
        return {"n": 0, "pass1": 0.0}
    out = {"n": len(rows), "pass1": float(np.mean([r["passed"] for r in rows]))}
    if "n" in rows[0]:
        n_min = min(r["n"] for r in rows)
        for k in sorted(set(ks)):
            if k <= n_min:
                out[f"pass@{k}"] = float(np.mean([pass_at_k(r["n"], r["c"], k) for r in rows]))
    return out


def summarize(rows: list[dict], ks: list[int]) -> dict:
    """Overall, per-domain and per-tier aggregates, and per problem family where rows name one."""
    by_domain, by_tier, by_family = {}, {}, {}
    for r in rows:
        by_domain.setdefault(r["domain"], []).append(r)
        by_tier.setdefault(str(r["tier"]), []).append(r)
        if "family" in r:
            by_family.setdefault(r["family"], []).append(r)
    return {"overall": aggregate(rows, ks),
            "per_domain": {d: aggregate(v, ks) for d, v in sorted(by_domain.items())},
            "per_tier": {t: aggregate(v, ks) for t, v in sorted(by_tier.items(), key=lambda kv: int(kv[0]))},
            "per_family": {f: aggregate(v, ks) for f, v in sorted(by_family.items())}}


def evaluate_suite(cfg, suite, tasks, policy_model=None) -> dict:
    """Results dict for `tasks` of `suite` under cfg.policy (policy_model = (model, tok) for policy=model)."""
    t0 = time.time()
    max_new = cfg.max_new_tokens or suite.max_new_tokens
    if cfg.policy == "model":
        model, tok = policy_model
        greedy = [r[0] for r in model_responses(model, tok, tasks, max_new, n=1, temperature=0.0, seed=cfg.seed,
                                                 batch_size=cfg.batch_size)]
        samples = None
        if cfg.samples > 0:
            samples = model_responses(model, tok, tasks, max_new, n=cfg.samples, temperature=cfg.temperature,
                                      top_k=cfg.top_k, top_p=cfg.top_p, seed=cfg.seed + 1, batch_size=cfg.batch_size)
    else:
        greedy = [r[0] for r in fixed_responses(tasks, cfg.policy, 1)]
        samples = fixed_responses(tasks, cfg.policy, cfg.samples) if cfg.samples > 0 else None
    t_gen = time.time() - t0
    greedy_v = [v[0] for v in verify_all(suite, tasks, [[g] for g in greedy], cfg.workers)]
    sample_v = verify_all(suite, tasks, samples, cfg.workers) if samples is not None else None
    rows = records_of(tasks, greedy, greedy_v, samples, sample_v)
    return {"suite": suite.name, "policy": cfg.policy, "checkpoint": cfg.checkpoint, "source": suite.source,
            "max_new_tokens": max_new, "samples": cfg.samples, "temperature": cfg.temperature, "seed": cfg.seed,
            **summarize(rows, cfg.k), "generate_s": round(t_gen, 2), "wall_s": round(time.time() - t0, 2),
            "records": rows}
