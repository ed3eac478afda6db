"""Shared machinery of the text environments: task handling, step and time limits, observation budget."""

import abc
import time
from collections.abc import Callable

import gymnasium as gym
from rlpt.envs.spaces import UnicodeText
from rlpt.envs.toolcall import ToolCall, format_tool_response, parse_tool_calls
from rlpt.envs.truncate import truncate

# Verdict details that vary from run to run (timings) stay out of info so equal inputs give equal infos.
_VOLATILE = ("wall_s", "cpu_s", "grader_cpu_s", "stdout", "stderr", "layers")


def verdict_info(verdict) -> dict:
    """A deterministic, plain summary of a Verdict for step info."""
    d = {k: v for k, v in verdict.details.items() if k not in _VOLATILE}
    return {"score": float(verdict.score), "passed": bool(verdict.passed), "details": d}


class TextEnv(gym.Env, abc.ABC):
    """Text in, text out. Subclasses implement _start(task) -> (obs, info) and _act(action) -> step tuple."""

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        *,
        max_steps: int = 16,
        time_limit_s: float = 600.0,
        obs_budget: int = 16384,
        count_tokens: Callable[[str], int] | None = None,
        render_mode: str | None = None,
        max_action_chars: int = 1 << 20,
    ):
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        if max_steps < 1 or time_limit_s <= 0 or obs_budget < 1:
            raise ValueError(f"bad limits: max_steps={max_steps}, time_limit_s={time_limit_s}, obs_budget={obs_budget}")
        self.max_steps, self.time_limit_s, self.obs_budget = max_steps, time_limit_s, obs_budget
        self.count_tokens = count_tokens or len
        self.render_mode = render_mode
        self.observation_space = UnicodeText()
        self.action_space = UnicodeText(max_length=max_action_chars)
        self.task = None
        self._last_obs = ""
        self._done = True

    @abc.abstractmethod
    def default_task(self, seed: int):
        """The task reset() uses when options carry none."""

    @abc.abstractmethod
    def _start(self, task, options: dict) -> tuple[str, dict]:
        """Set up the episode; return the first observation and info."""

    @abc.abstractmethod
    def _act(self, action: str) -> tuple[str, float, bool, dict]:
        """Apply one action; return (observation, reward, terminated, info)."""

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._end_episode()
        options = options or {}
        task = options.get("task")
        if task is None:
            task = self.default_task(int(self.np_random.integers(0, 2**31 - 1)))
        self.task, self.steps, self.t0, self._done = task, 0, time.monotonic(), False
        obs, info = self._start(task, options)
        info = {"task_id": str(task.id), "domain": str(task.domain), **info}
        return self._observe(obs), info

    def step(self, action: str):
        if self.task is None or self._done:
            raise RuntimeError("step() called before reset() or after the episode ended")
        if not isinstance(action, str):
            raise TypeError(f"action must be str, got {type(action).__name__}")
        self.steps += 1
        obs, reward, terminated, info = self._act(action)
        truncated = False
        if not terminated and (self.steps >= self.max_steps or time.monotonic() - self.t0 > self.time_limit_s):
            truncated = True
            reward, final = self._final_reward()
            info = {**info, "final": final, "limit": "steps" if self.steps >= self.max_steps else "time"}
        self._done = terminated or truncated
        if self._done:
            self._end_episode()
        return self._observe(obs), float(reward), bool(terminated), truncated, info

    def episode_state(self) -> dict:
        """The running episode as JSON-able values, to pause it between RL steps (`rlpt.rollout.partial`);
        `restore_episode` on an env reset with the same task and seed brings it back. Environments that hold
        more per-episode state extend both."""
        if self.task is None or self._done:
            raise RuntimeError("episode_state() needs a running episode")
        return {"steps": self.steps, "last_obs": self._last_obs}

    def restore_episode(self, state: dict) -> None:
        """Continue the episode `state` (`episode_state`) in this env, just reset with its task and seed."""
        if self.task is None or self._done or self.steps:
            raise RuntimeError("restore_episode() needs an env just reset with the episode's task")
        self.steps, self._last_obs = int(state["steps"]), state["last_obs"]

    def _observe(self, text: str) -> str:
        self._last_obs = truncate(text, self.obs_budget, self.count_tokens)
        return self._last_obs

    def _final_reward(self) -> tuple[float, dict]:
        return 0.0, {}

    def _end_episode(self) -> None:
        """Release per-episode resources (workspaces, uids); safe to call twice."""

    def render(self):
        if self.render_mode == "ansi":
            return self._last_obs
        return None

    def close(self):
        self._end_episode()
        super().close()


class ToolEnv(TextEnv):
    """Agent environments: the action's <tool_call> blocks run in order; their responses are the observation.

    Subclasses define tools() -> {name: schema-checked handler(args) -> (text, end_episode, reward, info)}.
    """

    def _act(self, action: str):
        calls = parse_tool_calls(action)
        if not calls:
            return (
                (
                    "error: no <tool_call> found. Call a tool as "
                    '<tool_call>{"name": ..., "arguments": {...}}</tool_call>'
                ),
                0.0,
                False,
                {"error": "no_tool_call"},
            )
        parts, info = [], {"calls": []}
        for call in calls:
            if not isinstance(call, ToolCall):
                parts.append(format_tool_response("error", f"malformed tool call: {call.message}"))
                info["calls"].append({"error": call.message})
                continue
            text, end, reward, extra = self._dispatch(call)
            parts.append(format_tool_response(call.name, text))
            info["calls"].append({"name": call.name, **extra})
            if end:
                return "\n".join(parts), reward, True, {**info, **extra}
        return "\n".join(parts), 0.0, False, info

    @abc.abstractmethod
    def _dispatch(self, call: ToolCall) -> tuple[str, bool, float, dict]:
        """Run one tool call; return (text, end_episode, reward, info)."""
