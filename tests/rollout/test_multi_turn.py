"""Multi-turn rollouts against scripted environments: token in/out, masks, spans, cache continuation,
turn limits, deadlines and crashing environments."""
import dataclasses
import time

import jax
import numpy as np
import pytest

from rlpt.config.schema import RolloutConfig
from rlpt.rollout.format import observation_ids, prompt_ids, response_text
from rlpt.rollout.multi_turn import rollout
from rlpt.rollout.single_turn import Trajectories, to_rows
from rlpt.train.losses import token_logprobs


@dataclasses.dataclass(frozen=True)
class FakeTask:
    domain: str
    id: str
    prompt: str
    difficulty: int = 0
    meta: dict = dataclasses.field(default_factory=dict)
    env_id: str = "fake"


class ScriptedEnv:
    """Echoes the action length; ends with reward 1 after `ends_after` steps; may crash or stall."""

    def __init__(self, ends_after=3, crash_on=None, stall_s=0.0):
        self.ends_after, self.crash_on, self.stall_s = ends_after, crash_on, stall_s
        self.actions, self.closed = [], False

    def reset(self, seed=None, options=None):
        self.task = options["task"]
        return f"task {self.task.id}: call a tool", {}

    def step(self, action):
        self.actions.append(action)
        if self.crash_on is not None and len(self.actions) == self.crash_on:
            raise RuntimeError("sandbox exploded")
        time.sleep(self.stall_s)
        done = len(self.actions) >= self.ends_after
        info = {"calls": [{"name": "echo"}]}
        return f"len={len(action)}", float(done), done, False, info

    def close(self):
        self.closed = True


def _rcfg(**kw):
    base = dict(prompts_per_step=2, group_size=3, max_new_tokens=96, temperature=1.0, max_prompt_len=64,
                episode_timeout_s=600.0)
    return RolloutConfig(**(base | kw))


def _run(model, tok, envs, rcfg, max_turns=4, seed=7):
    tasks = [FakeTask("fake", f"t{i}", "unused") for i in range(rcfg.prompts_per_step)]
    made = iter(envs)
    return rollout(model, tok, tasks, rcfg, seed=seed, version=5, max_turns=max_turns,
                   make_env=lambda task: next(made)), envs


def test_multi_turn_tokens_masks_spans_and_continuation(model, tok):
    rcfg = _rcfg()
    traj, envs = _run(model, tok, [ScriptedEnv() for _ in range(6)], rcfg)
    assert isinstance(traj, Trajectories) and traj.version == 5
    assert traj.response.shape == (6, rcfg.max_new_tokens) and traj.policy_mask.shape == traj.response.shape
    multi = 0
    for r in range(6):
        n, spans, ep = int(traj.lengths[r]), traj.spans[r], envs[r]
        resp, mask = traj.response[r, :n], traj.policy_mask[r]
        assert spans[0][1] == 0 and spans[-1][2] == n
        assert all(a[2] == b[1] for a, b in zip(spans, spans[1:]))
        assert (mask[n:] == 0).all() and (traj.response[r, n:] == 0).all()
        policy_spans = [s for s in spans if s[0] == "policy"]
        tool_spans = [s for s in spans if s[0] == "tool"]
        assert traj.turns[r] == len(policy_spans) and len(tool_spans) in (len(policy_spans), len(policy_spans) - 1)
        for kind, a, b in spans:
            assert (mask[a:b] == (1.0 if kind == "policy" else 0.0)).all()
            if kind == "tool":
                assert (traj.rollout_logp[r, a:b] == 0).all()
        # Token in, token out: the env saw exactly the decoded policy tokens; the tool tokens are its replies.
        for j, (_, a, b) in enumerate(policy_spans[:len(ep.actions)]):
            assert ep.actions[j] == response_text(tok, resp[a:b])
            if j < len(tool_spans):
                _, c, d = tool_spans[j]
                assert list(resp[c:d]) == observation_ids(tok, f"len={len(ep.actions[j])}")
        if traj.status[r] == "done":
            assert traj.rewards[r] == 1.0 and traj.turns[r] == 3 and traj.tool_calls[r] == 3
            assert resp[policy_spans[-1][2] - 1] == tok.eos_ids[0]
        else:
            assert traj.status[r] == "budget" and traj.rewards[r] == 0.0 and traj.truncated[r]
        multi += traj.turns[r] >= 2
        assert ep.closed
    assert multi >= 2, "the seed must give multi-turn episodes for this test to mean anything"
    # Decoding continued from the cache: rollout log-probs equal a teacher-forced forward pass of the whole
    # row (prompt, policy turns and tool turns), on every policy token.
    rows = to_rows(traj, rcfg.max_prompt_len + rcfg.max_new_tokens)
    lp = np.asarray(token_logprobs(model.params, model.config, {k: jax.numpy.asarray(v) for k, v in rows.items()}))
    m = rows["loss_mask"] > 0
    np.testing.assert_allclose(lp[m], rows["rollout_logp"][m], atol=2e-4)
    assert m.sum() == traj.policy_mask.sum()
    # Loss mask: only policy tokens; the prompt and tool tokens never.
    for r in range(6):
        start = len(traj.prompts[r]) - 1
        np.testing.assert_array_equal(rows["loss_mask"][r, start:start + rcfg.max_new_tokens][:traj.lengths[r]],
                                      traj.policy_mask[r, :traj.lengths[r]])
        assert rows["loss_mask"][r, :start].sum() == 0
        assert list(rows["inputs"][r, :len(traj.prompts[r])]) == prompt_ids(tok, f"task t{r // 3}: call a tool")


def test_turn_limit_and_crashing_env(model, tok):
    envs = [ScriptedEnv(ends_after=99), ScriptedEnv(crash_on=1), ScriptedEnv(crash_on=2),
            ScriptedEnv(ends_after=99), ScriptedEnv(crash_on=1), ScriptedEnv(ends_after=99)]
    traj, _ = _run(model, tok, envs, _rcfg(), max_turns=2, seed=11)
    for r in (1, 2, 4):
        if traj.status[r] != "budget":  # a row that ran out of tokens before the crashing call
            assert traj.status[r] == "error" and traj.rewards[r] == 0.0, (r, traj.status[r])
            assert "sandbox exploded" in traj.texts[r]
    for r in (0, 3, 5):
        assert traj.status[r] in ("turn_limit", "budget") and traj.turns[r] <= 2
    assert "error" in traj.status and "turn_limit" in traj.status
    assert (traj.rewards == 0).all()


@pytest.mark.slow
def test_episode_deadline_cuts_a_stalled_tool_call(model, tok):
    envs = [ScriptedEnv(stall_s=60.0) for _ in range(6)]
    t0 = time.time()
    traj, _ = _run(model, tok, envs, _rcfg(episode_timeout_s=8.0), max_turns=4, seed=7)
    assert time.time() - t0 < 40, "a stalled tool call must not hold the batch past its deadline"
    assert set(traj.status) <= {"timeout", "budget"} and "timeout" in traj.status
    assert (traj.rewards == 0).all()


def test_single_turn_rows_unchanged(tok):
    """Without a policy mask every response token is the policy's (the single-turn contract)."""
    traj = Trajectories(tasks=[None], prompts=[[1, 5, 9, 6]], response=np.array([[11, 12, 2, 0]], np.int32),
                        lengths=np.array([3]), rollout_logp=np.array([[-1.0, -2.0, -3.0, 0.0]], np.float32),
                        rewards=np.zeros(1, np.float32), passed=np.zeros(1, bool), group_ids=np.zeros(1, int),
                        truncated=np.zeros(1, bool), version=0, gen_s=0.0, verify_s=0.0, texts=[""])
    rows = to_rows(traj, 8)
    np.testing.assert_array_equal(rows["loss_mask"][0], [0, 0, 0, 1, 1, 1, 0, 0])
    np.testing.assert_array_equal(rows["rollout_logp"][0], [0, 0, 0, -1, -2, -3, 0, 0])
    masked = dataclasses.replace(traj, policy_mask=np.array([[1, 0, 1, 0]], np.float32))
    rows = to_rows(masked, 8)
    np.testing.assert_array_equal(rows["loss_mask"][0], [0, 0, 0, 1, 0, 1, 0, 0])
    np.testing.assert_array_equal(rows["rollout_logp"][0], [0, 0, 0, -1, 0, -3, 0, 0])
