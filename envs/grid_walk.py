"""rlpt/GridWalk-v0: a board seen as pixels, one move per turn (an environment with image observations).

Observations are `spaces.Dict(text=UnicodeText, image=Box(0, 255, (32, 32, 3), uint8))`: the board as the
vision/grid_walk task draws it (red walker, green goal) and a line of text. The first observation holds the task's
question; each action is one move (its first word: up, down, left or right) and the next observation shows the
board after it. Reaching the goal ends the episode with reward 1; a move off the board or an unknown move leaves the
walker where it is (the observation says so); max_steps moves without reaching the goal truncate with reward 0.
info['verdict'] on the last step carries the outcome for the reward mixture.
"""

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from rlpt.envs.spaces import UnicodeText

from rlpt.tasks import get_domain
from rlpt.tasks.native.vision import IMAGE_SIZE, IMAGE_TOKEN, MOVES, walk, walk_image


class GridWalkEnv(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 2}

    def __init__(self, *, max_steps: int = 8, render_mode: str | None = None, **_limits):
        """max_steps: moves before truncation. Text-env limits (time_limit_s, obs_budget, count_tokens) are
        accepted and unused: an observation is one short line and a picture."""
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        if max_steps < 1:
            raise ValueError(f"max_steps={max_steps}; expected >= 1")
        self.max_steps, self.render_mode = max_steps, render_mode
        self.observation_space = spaces.Dict({
            "text": UnicodeText(),
            "image": spaces.Box(0, 255, (IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8),
        })
        self.action_space = UnicodeText(max_length=1 << 12)
        self.n = self.pos = self.goal = None
        self.steps = 0

    def _obs(self, text: str) -> dict:
        return {"text": f"{IMAGE_TOKEN}\n{text}", "image": walk_image(self.n, self.pos, self.goal)}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        task = (options or {}).get("task")
        if task is None:
            task = get_domain("vision/grid_walk").generate(int(self.np_random.integers(0, 2**29)), 1)
        q = task.meta["query"]
        self.n, self.pos, self.goal, self.steps = q["n"], tuple(q["start"]), tuple(q["goal"]), 0
        question = (f"The image shows a {self.n}x{self.n} board. Walk the red square to the green square. Reply "
                    "with one move per turn: up, down, left or right.")
        return self._obs(question), {"task_id": task.id}

    def step(self, action: str):
        if self.n is None:
            raise RuntimeError("step() before reset()")
        self.steps += 1
        words = str(action).strip().lower().split()
        move = words[0].strip(".,!") if words else ""
        if move not in MOVES:
            text = f"{move[:20]!r} is not a move (up, down, left, right)."
        else:
            end, why = walk(self.n, self.pos, [move])
            if end is None:
                text = f"Blocked: {why}."
            else:
                self.pos, text = end, f"Moved {move}."
        done = self.pos == self.goal
        truncated = not done and self.steps >= self.max_steps
        info = {"moves": self.steps}
        if done or truncated:
            info["verdict"] = {"score": float(done), "passed": bool(done), "details": {"moves": self.steps}}
        return self._obs(text + (" Goal reached." if done else "")), float(done), done, truncated, info

    def render(self):
        return walk_image(self.n, self.pos, self.goal) if self.render_mode == "rgb_array" else None
