"""The `bfcl` suite: BFCL's single-turn Python tool-calling items, scored by BFCL's AST rules (`rlpt.tasks.bfcl`)."""
from rlpt.eval.suites.base import LoadArgs, Suite, register_suite
from rlpt.tasks.bfcl import (  # noqa: F401  (re-exported: the suite's names, as before the data moved to tasks)
    CATEGORIES,
    EXCLUDED,
    SYSTEM,
    VERSION,
    check,
    data_dir,
    first_answer,
    gold_value,
    load_tasks,
    render_calls,
    unanswerable,
)


def _load(args: LoadArgs):
    return load_tasks(args.limit)


@register_suite("bfcl")
def bfcl() -> Suite:
    return Suite("bfcl", f"BFCL {', '.join(CATEGORIES)}: Python function calls checked by BFCL's AST rules",
                 _load, check, max_new_tokens=256, source="bfcl-eval (PyPI) data/BFCL_v4_*.json")
