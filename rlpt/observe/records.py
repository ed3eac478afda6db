"""Observers that write records to disk: every trajectory (gzip JSONL audit log) and failed tasks (flywheel)."""
import json
import os

import numpy as np

from rlpt.observe.tags import PASSED, response_of, sample_tags, seed_of, task_tag
from rlpt.observe.trajectory_log import TrajectoryLog


def groups(traj) -> list[np.ndarray]:
    """Row indices of each task's samples (task i owns the rows with group_ids == i)."""
    return [np.flatnonzero(traj.group_ids == i) for i in range(len(traj.tasks))]


class TrajectoryLogObserver:
    """One record per sample: task, response text and token ids, reward, pass, tag, policy version."""

    def __init__(self, directory: str, max_bytes: int, max_files: int):
        self.log = TrajectoryLog(directory, max_bytes, max_files)

    def on_step(self, step: int, traj, row: dict) -> None:
        tags = sample_tags(traj)
        records = []
        for i, rows in enumerate(groups(traj)):
            task = traj.tasks[i]
            for r in rows:
                n = int(traj.lengths[r])
                records.append({
                    "step": step, "version": int(traj.version), "task_id": task.id, "domain": task.domain,
                    "tier": int(task.difficulty), "sample": int(r), "prompt": task.prompt,
                    "response": traj.texts[r], "response_ids": [int(t) for t in traj.response[r, :n]],
                    "reward": float(traj.rewards[r]), "passed": bool(traj.passed[r]),
                    "truncated": bool(traj.truncated[r]), "tag": tags[r],
                    "logp_mean": float(np.mean(traj.rollout_logp[r, :n])) if n else 0.0})
                if traj.verdicts is not None:
                    records[-1]["outcome"] = float(traj.verdicts[r].score)
                if traj.components is not None:  # the reward's breakdown (rlpt.rewards.RewardMixture)
                    records[-1]["components"] = {k: float(v) for k, v in traj.components[r].items()}
        self.log.write(records)

    def close(self) -> dict:
        self.log.close()
        return {"trajectories_logged": self.log.records, "trajectory_log_dir": self.log.dir}


class FailureObserver:
    """Appends each task with at least one failed sample to <dir>/failures-from-step-<first step>.jsonl:
    its id, domain, tier, seed, prompt, pass rate, task tag, tag counts and up to `max_responses` failing
    responses (the policy's own text, verifier-error suffix removed) with their tags and rewards."""

    def __init__(self, directory: str, max_responses: int):
        os.makedirs(directory, exist_ok=True)
        self.dir, self.max_responses = directory, max_responses
        self._f = None
        self.failed_tasks = 0
        self.tag_counts: dict[str, int] = {}

    def on_step(self, step: int, traj, row: dict) -> None:
        if self._f is None:
            self._f = open(os.path.join(self.dir, f"failures-from-step-{step:07d}.jsonl"), "a")
        tags = sample_tags(traj)
        for i, rows in enumerate(groups(traj)):
            failed = [r for r in rows if tags[r] != PASSED]
            if not failed:
                continue
            task, tag = traj.tasks[i], task_tag([tags[r] for r in rows])
            counts = {t: sum(tags[r] == t for r in rows) for t in sorted({tags[r] for r in rows})}
            self._f.write(json.dumps({
                "step": step, "task_id": task.id, "domain": task.domain, "tier": int(task.difficulty),
                "seed": seed_of(task), "prompt": task.prompt, "pass_rate": float(np.mean(traj.passed[rows])),
                "tag": tag, "tags": counts,
                "responses": [{"text": response_of(traj.texts[r]), "tag": tags[r], "reward": float(traj.rewards[r])}
                              for r in failed[:self.max_responses]]}) + "\n")
            self.failed_tasks += 1
            self.tag_counts[tag] = self.tag_counts.get(tag, 0) + 1
        self._f.flush()

    def close(self) -> dict:
        if self._f is not None:
            self._f.close()
        return {"failed_tasks_logged": self.failed_tasks, "failures_dir": self.dir,
                **{f"failed_tasks/{t}": n for t, n in sorted(self.tag_counts.items())}}
