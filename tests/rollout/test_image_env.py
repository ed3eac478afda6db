"""rlpt/GridWalk-v0: an environment whose observations are a picture and a line of text (spaces.Dict), played by
a vision-language policy over several turns; every observation's image reaches the sampler once, and the train
rows built from the episodes give the sampler's log-probs."""
import dataclasses

import gymnasium as gym
import jax
import numpy as np
import pytest
import rlpt.envs  # noqa: F401  (registers rlpt/GridWalk-v0)
from gymnasium.utils.env_checker import check_env

from rlpt.config import compose
from rlpt.models import builtin_tokenizer
from rlpt.models.model import init_model
from rlpt.rollout import multi_turn
from rlpt.rollout.single_turn import to_rows
from rlpt.tasks import get_domain
from rlpt.train.losses import token_logprobs_entropy


def test_env_follows_the_gymnasium_api_and_grades_the_walk():
    env = gym.make("rlpt/GridWalk-v0", max_steps=6)
    check_env(env.unwrapped, skip_render_check=True)
    task = get_domain("vision/grid_walk").generate(5, 2)
    obs, _ = env.reset(seed=0, options={"task": task})
    assert env.observation_space.contains(obs) and obs["text"].startswith("<image>")
    moves = task.meta["answer"].split()
    for move in moves:
        obs, reward, done, truncated, info = env.step(move)
    assert (reward, done, truncated) == (1.0, True, False) and info["verdict"]["passed"]
    assert not np.array_equal(obs["image"], task.meta["images"][0])  # the walker moved in the picture
    env.reset(seed=0, options={"task": task})
    for _ in range(6):
        out = env.step("jump")  # not a move: nothing changes, and the walk truncates at max_steps
    assert out[2:4] == (False, True) and out[4]["verdict"]["score"] == 0.0


def _ends_turns_soon(model, eos: int):
    """The untrained VLM with its end-of-turn token likely at every text position: one residual dimension is a
    constant in every token embedding, and the LM head reads it into the end-of-turn logit. Turns then end after a
    few tokens; every other weight stays random, so the images still move the log-probs."""
    text = dict(model.params["text"])
    text["embed"] = text["embed"].at[:, 0].add(1.0)
    text["lm_head"] = text["lm_head"].at[0, eos].set(1.0)
    return model.with_params(dict(model.params, text=text))


def test_a_vision_policy_plays_several_turns_and_trains_on_its_own_log_probs():
    cfg = compose(["experiment=vision_tiny", "model.hidden_size=32", "model.intermediate_size=64",
                   "model.vision.hidden_size=32", "model.vision.intermediate_size=48", "model.tie_embeddings=false"])
    tok = builtin_tokenizer()
    model = _ends_turns_soon(init_model(cfg.model, seed=0), tok.eos_ids[0])
    rcfg = dataclasses.replace(cfg.rl.rollout, group_size=2, max_new_tokens=64, max_prompt_len=200,
                               temperature=1.0)
    tasks = [get_domain("vision/grid_walk").generate(s, 1) for s in range(2)]
    traj = multi_turn.rollout(model, tok, tasks, rcfg, seed=1, version=0, max_turns=3)
    assert max(traj.turns) >= 2  # the untrained policy stops its turns early enough for a second observation
    k = model.config.vision.tokens_per_image
    for r in range(4):
        in_response = int((traj.response[r, :traj.lengths[r]] == model.config.vision.image_token_id).sum())
        tool_images = len(traj.images[r]) - 1  # the first image is the prompt's
        assert in_response >= tool_images * k and tool_images == sum(1 for kind, *_ in traj.spans[r]
                                                                      if kind == "tool")
    rows = to_rows(traj, rcfg.max_prompt_len + rcfg.max_new_tokens, images_per_row=4)
    fwd = jax.jit(lambda p, b: token_logprobs_entropy(p, model.config, b)[0])
    logp = np.asarray(fwd(model.params, rows))
    mask = rows["loss_mask"] > 0
    np.testing.assert_allclose(logp[mask], rows["rollout_logp"][mask], atol=2e-4)
    blank = np.asarray(fwd(model.params, dict(rows, pixel_values=np.zeros_like(rows["pixel_values"]))))
    assert np.abs(blank[mask] - logp[mask]).max() > 1e-3  # a check the images could fail
    with pytest.raises(ValueError, match="no vision tower"):
        multi_turn.rollout(model.text_model(), tok, tasks[:1], dataclasses.replace(rcfg, group_size=1), seed=1,
                           version=0, max_turns=2)
