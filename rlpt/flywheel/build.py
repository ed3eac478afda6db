"""Failure records (<run>/failures/*.jsonl, rlpt.observe.records.FailureObserver) -> tasks.jsonl (the failing
tasks and neighbouring train seeds of the same domain and tier, for curriculum.replay_file) and
regression.jsonl (each failing response with the score the verifier gives it now, which must not change)."""
import glob
import json
import os

from rlpt.observe.tags import FAILURE_TAGS
from rlpt.tasks import get_domain
from rlpt.tasks.base import EVAL_SEED_START

# Responses with these tags are the policy's own mistakes; infrastructure failures make no regression case.
POLICY_TAGS = ("wrong_answer", "truncated", "empty")


def read_failures(folder: str) -> dict[str, dict]:
    """task_id -> the task's latest failure record, with 'failures' (records seen) and all failing responses."""
    paths = sorted(glob.glob(os.path.join(folder, "*.jsonl")))
    if not paths:
        raise FileNotFoundError(f"no failure files (*.jsonl) in {folder!r}")
    out: dict[str, dict] = {}
    for path in paths:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                rec = json.loads(line)
                missing = {"task_id", "domain", "tier", "seed", "tag", "responses"} - set(rec)
                if missing:
                    raise KeyError(f"{path}:{n}: failure record lacks {sorted(missing)}")
                if rec["tag"] not in FAILURE_TAGS:
                    raise ValueError(f"{path}:{n}: unknown failure tag {rec['tag']!r}; known: {FAILURE_TAGS}")
                prev = out.get(rec["task_id"])
                responses = (prev["responses"] if prev else []) + rec["responses"]
                out[rec["task_id"]] = {**rec, "responses": responses, "failures": (prev["failures"] if prev else 0) + 1}
    return out


def _task_row(domain: str, tier: int, seed: int, tag: str, source: str, origin: str, failures: int) -> dict:
    task = get_domain(domain).generate(seed, tier)
    return {"task_id": task.id, "domain": domain, "tier": tier, "seed": seed, "tag": tag, "source": source,
            "from": origin, "failures": failures, "prompt": task.prompt}


def build(folder: str, out_dir: str, *, neighbours: int = 2, tags: tuple[str, ...] = FAILURE_TAGS) -> dict:
    """Writes out_dir/tasks.jsonl and out_dir/regression.jsonl; returns counts. Only failures whose task tag is
    in `tags` become tasks; neighbours: train seeds seed+-1..k of the same domain and tier are added too."""
    failures = read_failures(folder)
    os.makedirs(out_dir, exist_ok=True)
    tasks: dict[str, dict] = {}
    regressions, now_passing = [], []
    for tid, rec in sorted(failures.items()):
        domain, tier, seed = rec["domain"], int(rec["tier"]), int(rec["seed"])
        task = get_domain(domain).generate(seed, tier)
        if task.id != tid:
            raise ValueError(f"failure record {tid!r} regenerates as {task.id!r}: the domain's generator changed")
        if rec["tag"] in tags:
            tasks[tid] = _task_row(domain, tier, seed, rec["tag"], "failure", tid, rec["failures"])
            for k in range(1, neighbours + 1):
                for s in (seed - k, seed + k):
                    if 0 <= s < EVAL_SEED_START:
                        row = _task_row(domain, tier, s, rec["tag"], "neighbour", tid, 0)
                        tasks.setdefault(row["task_id"], row)
        seen = set()
        for resp in rec["responses"]:
            if resp["tag"] not in POLICY_TAGS or resp["text"] in seen:
                continue
            seen.add(resp["text"])
            verdict = get_domain(domain).verify(task, resp["text"])
            case = {"task_id": tid, "domain": domain, "tier": tier, "seed": seed, "tag": resp["tag"],
                    "response": resp["text"], "score": float(verdict.score), "passed": bool(verdict.passed)}
            (now_passing if verdict.passed else regressions).append(case)
    _write(os.path.join(out_dir, "tasks.jsonl"), tasks.values())
    _write(os.path.join(out_dir, "regression.jsonl"), regressions)
    _write(os.path.join(out_dir, "now_passing.jsonl"), now_passing)
    n_fail = sum(r["source"] == "failure" for r in tasks.values())
    return {"failed_tasks": len(failures), "tasks": len(tasks), "failure_tasks": n_fail,
            "neighbour_tasks": len(tasks) - n_fail, "regression_cases": len(regressions),
            "now_passing": len(now_passing), "out": os.path.abspath(out_dir)}


def _write(path: str, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def check_regressions(path: str) -> dict:
    """Re-verify every case of a regression.jsonl: each must still fail with the recorded score."""
    broken, n = [], 0
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            case = json.loads(line)
            n += 1
            task = get_domain(case["domain"]).generate(int(case["seed"]), int(case["tier"]))
            if task.id != case["task_id"]:
                broken.append({**case, "why": f"task regenerates as {task.id!r}"})
                continue
            verdict = get_domain(case["domain"]).verify(task, case["response"])
            if verdict.passed or abs(float(verdict.score) - case["score"]) > 1e-9:
                broken.append({**case, "why": f"now scores {verdict.score} (passed={verdict.passed})"})
    return {"cases": n, "broken": len(broken), "broken_cases": broken[:20]}
