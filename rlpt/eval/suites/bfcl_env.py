"""BFCL through the tool-use environment (envs/bfcl_env.py): the reply's <tool_call> blocks are stepped through
rlpt/Bfcl-v0, which schema-checks and records them; the score is BFCL's AST check of the recorded calls."""
from rlpt.envs.toolcall import format_tool_call
from rlpt.eval.suites.base import LoadArgs, Suite, register_suite, take
from rlpt.rewards.verdict import Verdict
from rlpt.tasks import Task

MAX_STEPS = 2  # the policy's reply, then the end action when the reply did not end the episode itself


def _load(args: LoadArgs) -> list[Task]:
    from rlpt.envs.bfcl_env import bfcl_tasks  # lazy: envs.bfcl_env imports rlpt.eval.suites

    return take(list(bfcl_tasks()), args.limit)


def run_episode(task: Task, reply: str) -> tuple[float, dict]:
    """(reward, info) of one episode: `reply` is the first action; `final_answer` follows if still running."""
    from rlpt.envs.bfcl_env import END_TOOL, BfclEnv  # on use (start-up: jsonschema)

    env = BfclEnv(max_steps=MAX_STEPS)
    env.reset(options={"task": task})
    errors: list[str] = []  # error observations the policy got (no call, malformed or schema-invalid calls)
    for action in (reply, format_tool_call(END_TOOL, {})):
        _, reward, term, trunc, info = env.step(action)
        calls = info.get("calls")
        if calls is None:
            errors += [info["error"]] if info.get("error") else []
        else:
            errors += [c.get("message", c["error"]) for c in calls if c.get("name") != END_TOOL and c.get("error")]
        if term or trunc:
            break
    env.close()
    grade = info["final"] if trunc else info  # the env's grading info: passed, error (why not), recorded
    return reward, {"error": grade.get("error"), "recorded": grade.get("recorded", 0), "step_errors": errors}


def _check(task: Task, response: str) -> Verdict:
    reward, info = run_episode(task, response)
    return Verdict(reward, reward == 1.0, info)


@register_suite("bfcl_env")
def bfcl_env() -> Suite:
    return Suite("bfcl_env", "BFCL items as tool-use episodes (rlpt/Bfcl-v0): JSON <tool_call>s, schema-checked, "
                 "recorded, then BFCL's AST rules", _load, _check, max_new_tokens=384,
                 source="bfcl-eval (PyPI) data/BFCL_v4_*.json via envs/bfcl_env.py")
