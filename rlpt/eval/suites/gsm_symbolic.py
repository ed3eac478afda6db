"""GSM-Symbolic (reasoning-gym's `gsm_symbolic`: GSM8K templates with re-drawn numbers), strict numeric match."""
from rlpt.eval.suites.base import LoadArgs, Suite, register_suite
from rlpt.rewards.guard import final_answer
from rlpt.rewards.verdict import Verdict
from rlpt.rewards.verifiers import parse_number
from rlpt.tasks import Task

DEFAULT_SIZE = 200
DATASET_SEED = 20_241_001  # fixed: `seed=` shifts it, so a different seed is a different (reproducible) set


def _load(args: LoadArgs) -> list[Task]:
    import reasoning_gym

    size = args.limit if args.limit > 0 else DEFAULT_SIZE
    data = reasoning_gym.create_dataset("gsm_symbolic", seed=DATASET_SEED + args.seed, size=size)
    tasks = []
    for i, item in enumerate(data):
        if parse_number(item["answer"]) is None:
            raise ValueError(f"gsm_symbolic item {i}: gold answer {item['answer']!r} is not a number literal")
        meta = {"answer": item["answer"], "source_index": item["metadata"]["source_index"]}
        tasks.append(Task("gsm_symbolic", f"gsm_symbolic:s{DATASET_SEED + args.seed}:{i}", item["question"], 1, meta))
    return tasks


def _check(task: Task, response: str) -> Verdict:
    """One number literal (integer, decimal or a/b), the whole answer, equal to the gold value."""
    got = final_answer(response)
    value = None if got is None else parse_number(got)
    ok = value is not None and value == parse_number(task.meta["answer"])
    return Verdict(float(ok), ok, {"got": None if got is None else got[:100]})


@register_suite("gsm_symbolic")
def gsm_symbolic() -> Suite:
    return Suite("gsm_symbolic", f"GSM-Symbolic word problems ({DEFAULT_SIZE} by default), strict numeric match",
                 _load, _check, max_new_tokens=512, source="reasoning-gym (PyPI) gsm_symbolic generator")
