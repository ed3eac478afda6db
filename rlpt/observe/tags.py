"""Failure tags per sample and per task, and the per-task outcomes the curriculum folds in (data flywheel)."""
import re

import numpy as np

# Order = precedence when two failure tags are equally frequent among a task's samples.
FAILURE_TAGS = ("sandbox_error", "verifier_error", "empty", "truncated", "wrong_answer")
PASSED = "passed"
_MARK = "\n[verifier error: "  # what rlpt.rollout.single_turn.verify_all appends after the policy's text
_NAME = re.compile(r"[A-Za-z_][\w.]*")


def _suffix_at(text: str) -> int:
    """Index of the verifier-error suffix (the last mark, the text ending in ']'), or -1."""
    i = text.rfind(_MARK)
    return i if i >= 0 and text.endswith("]") else -1


def verifier_error(text: str) -> str | None:
    """The exception name of a '[verifier error: Name: msg]' suffix, else None."""
    i = _suffix_at(text)
    if i < 0:
        return None
    m = _NAME.match(text, i + len(_MARK))
    return m.group(0) if m else "Exception"


def response_of(text: str) -> str:
    """The policy's own text, without a verifier-error suffix."""
    i = _suffix_at(text)
    return text if i < 0 else text[:i]


def sample_tag(text: str, passed: bool, truncated: bool) -> str:
    """'passed' or one of FAILURE_TAGS for one sample."""
    if passed:
        return PASSED
    err = verifier_error(text)
    if err is not None:
        return "sandbox_error" if "Sandbox" in err else "verifier_error"
    if not response_of(text).strip():
        return "empty"
    return "truncated" if truncated else "wrong_answer"


def sample_tags(traj) -> list[str]:
    """(R,) tags of a Trajectories batch."""
    return [sample_tag(traj.texts[r], bool(traj.passed[r]), bool(traj.truncated[r])) for r in range(len(traj.texts))]


def task_tag(tags: list[str]) -> str:
    """The tag of a task from its samples' tags: 'passed' if all passed, else the most frequent failure tag
    (ties go to the earlier tag in FAILURE_TAGS)."""
    counts = [tags.count(t) for t in FAILURE_TAGS]
    return PASSED if max(counts) == 0 else FAILURE_TAGS[int(np.argmax(counts))]


def seed_of(task) -> int:
    """The generation seed of a task from its stable id '<domain>:t<tier>:s<seed>'."""
    try:
        return int(task.id.rsplit(":s", 1)[1])
    except (IndexError, ValueError):
        raise ValueError(f"task id {task.id!r} does not end in ':s<seed>'") from None


def task_outcomes(traj, group_size: int) -> list[tuple[str, int, int, float, str]]:
    """(domain, tier, seed, pass rate, tag) per task: what Curriculum.update takes (failures enter the replay
    pool with their tag)."""
    tags = sample_tags(traj)
    out = []
    for i, t in enumerate(traj.tasks):
        sl = slice(i * group_size, (i + 1) * group_size)
        out.append((t.domain, int(t.difficulty), seed_of(t), float(np.mean(traj.passed[sl])), task_tag(tags[sl])))
    return out
