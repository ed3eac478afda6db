"""RL's loss on a 2 data x 4 seq mesh with ring attention: loss and gradients equal the one-device dense loss."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.train.losses import rl_loss

OVERRIDES = ["model.vocab_size=32", "model.hidden_size=32", "model.intermediate_size=64", "model.num_layers=2",
             "model.num_heads=4", "model.num_kv_heads=2", "mesh=seq", "mesh.seq=4", "mesh.data=2",
             "train.ckpt_every=0", "rl.rollout.group_size=3",
             "rl.rollout.prompts_per_step=4", "rl.algo.entropy_coef=0.01"]


def _group_traj(seed, P=4, G=3, N=7, prompt_lens=(2, 10)):
    """P prompts sampled G times each (lengths in [prompt_lens), the first prompt_lens[1] long), ragged
    responses of 1..N tokens; group 0 has a full response, so its rows are the widest."""
    from rlpt.rollout.single_turn import Trajectories

    rng = np.random.default_rng(seed)
    plens = rng.integers(prompt_lens[0], prompt_lens[1], P)
    plens[0] = prompt_lens[1]
    prompts = [p for n in plens for p in [rng.integers(3, 32, n).tolist()] * G]
    lengths = rng.integers(1, N + 1, P * G)
    lengths[0] = N  # its window shifts left into the prompt: the shared prefix ends before the prompt does
    R = P * G
    return Trajectories(tasks=[None] * R, prompts=prompts, response=rng.integers(3, 32, (R, N)).astype(np.int32),
                        lengths=lengths, rollout_logp=-rng.random((R, N)).astype(np.float32),
                        rewards=rng.random(R).astype(np.float32), passed=np.zeros(R, bool),
                        group_ids=np.repeat(np.arange(P), G), truncated=np.zeros(R, bool), version=0, gen_s=0.0,
                        verify_s=0.0, texts=[""] * R)


def _ratio_of(loss_fn):
    def f(params, batch):
        num, den, _ = loss_fn(params, {}, batch, None)
        return num / den
    return f


def _trainer(layout, share, impl="ring"):
    from rlpt.config import compose
    from rlpt.pipeline.rl import shared_prefix_group
    from rlpt.train.loop import make_trainer

    cfg = compose(OVERRIDES + [f"model.attention_impl={impl}", f"data.cp_layout={layout}",
                               f"rl.exec.share_prefix={str(share).lower()}"])
    group = shared_prefix_group(cfg)
    trainer = make_trainer(cfg, rl_loss(cfg.rl.algo, group, layout))
    assert dict(trainer.mesh.shape)["seq"] == 4 and dict(trainer.mesh.shape)["data"] == 2
    return cfg, group, trainer


def _check(layout, share, row_len=64, impl="ring", **traj):
    from rlpt.parallel import axis_rules
    from rlpt.pipeline.rl import make_batch

    cfg, group, trainer = _trainer(layout, share, impl)
    batch, _ = make_batch(_group_traj(3, **traj), cfg, row_len)
    rng = np.random.default_rng(0)
    batch["old_logp"] = (batch["old_logp"] + 0.2 * rng.normal(size=batch["old_logp"].shape)) * batch["loss_mask"]
    params = jax.device_get(trainer.state.params)  # before the step donates them

    full = {k: jnp.asarray(v) for k, v in batch.items() if k != "window"}
    dense = dataclasses.replace(trainer.model_cfg, attention_impl="dense")
    want, want_g = jax.jit(jax.value_and_grad(_ratio_of(rl_loss(cfg.rl.algo)(dense))))(params, full)

    placed = jax.tree.map(lambda a: a[0], trainer.device_batch(batch))  # the step's one micro-batch
    with jax.set_mesh(trainer.mesh), axis_rules(cfg.mesh.rules):
        got, got_g = jax.jit(jax.value_and_grad(_ratio_of(rl_loss(cfg.rl.algo, group, layout)(trainer.model_cfg))))(
            params, placed)
    np.testing.assert_allclose(float(got), float(want), rtol=1e-5)
    for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(got_g)[0], jax.tree.leaves(want_g)):
        tol = 1e-5 * max(1.0, float(jnp.abs(b).max()))
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=tol, err_msg=jax.tree_util.keystr(path))
    np.testing.assert_allclose(float(trainer.step(batch)["loss"]), float(want), rtol=1e-5)
    return batch


@pytest.mark.parametrize("layout", ["zigzag", pytest.param("striped", marks=pytest.mark.slow)])
def test_rl_loss_on_a_ring_mesh_matches_dense_full_rows(layout):
    """share_prefix=false: whole rows in the cp layout, ring attention over seq=4, data=2."""
    _check(layout, share=False)


@pytest.mark.parametrize("layout,row_len,traj,widths", [
    # the default run keeps the zigzag layout with a padded prefix and with a window as wide as the row; the plain
    # cases and the other layouts run under -m slow (the CI budget)
    pytest.param("zigzag", 64, {}, (16, 8), marks=pytest.mark.slow),
    pytest.param("striped", 64, {}, (16, 8), marks=pytest.mark.slow),
    pytest.param("contiguous", 64, {}, (16, 8), marks=pytest.mark.slow),
    ("zigzag", 20, dict(prompt_lens=(2, 12)), (20, 8)),  # a 12-column prefix, padded to 16
    ("zigzag", 20, dict(N=17, prompt_lens=(2, 3)), (20, 20)),  # no prefix at all; the window padded to 24
], ids=["zigzag", "striped", "contiguous", "zigzag-padded-prefix", "zigzag-window-is-the-row"])
def test_shared_prefix_on_a_ring_mesh_matches_dense_full_rows(layout, row_len, traj, widths):
    """share_prefix=true: each group's prompt once, prefix and window streams each in the cp layout (padded to
    widths it can split), ring attention per stream merged by log-sum-exp: same loss and gradients."""
    batch = _check(layout, share=True, row_len=row_len, **traj)
    assert (batch["inputs"].shape[1], batch["window"].shape[1]) == widths


def test_lay_out_stream_pads_permutes_and_reads_back():
    from rlpt.kernels.layouts import apply_layout

    from rlpt.train.losses import lay_out_stream

    x = np.arange(2 * 12).reshape(2, 12) + 1
    for layout, width in (("zigzag", 16), ("striped", 12), ("contiguous", 12)):
        (out,), back = lay_out_stream((jnp.asarray(x),), layout, 4)
        padded = np.pad(x, ((0, 0), (0, width - 12)))
        np.testing.assert_array_equal(np.asarray(out), apply_layout(padded, layout, 4), err_msg=layout)
        np.testing.assert_array_equal(np.asarray(out)[:, back], x, err_msg=layout)
    (out,), back = lay_out_stream((jnp.zeros((3, 0), jnp.int32),), "zigzag", 4)
    assert out.shape == (3, 8) and not np.asarray(out).any() and back.shape == (0,)


@pytest.mark.parametrize("impl", ["allgather", pytest.param("dense", marks=pytest.mark.slow)])
def test_shared_prefix_on_a_seq_mesh_with_other_attention(impl):
    """The other context-parallel impl (all-gather K/V), and dense attention left to XLA's partitioner."""
    _check("zigzag", share=True, impl=impl)


def test_recompute_old_logp_with_shared_prefix_on_a_ring_mesh():
    """rl.algo.old_logp=recompute runs the shared-prefix forward on token-order rows: the full-row log-probs."""
    from rlpt.pipeline.rl import make_batch, recompute_old_logp
    from rlpt.rollout.single_turn import to_rows
    from rlpt.train.losses import token_logprobs

    cfg, group, trainer = _trainer("zigzag", share=True)
    traj = _group_traj(4)
    batch, _ = make_batch(traj, cfg, 64)
    out = recompute_old_logp(trainer, batch, group)
    dense = dataclasses.replace(trainer.model_cfg, attention_impl="dense")
    rows = {k: jnp.asarray(v) for k, v in to_rows(traj, 64).items()}
    want = np.asarray(token_logprobs(jax.device_get(trainer.state.params), dense, rows)) * batch["loss_mask"]
    np.testing.assert_allclose(out["old_logp"], want, rtol=1e-5, atol=1e-6)


def test_shared_prefix_without_prefix_columns_on_one_device():
    """A response window as wide as the row leaves the shared prefix no columns: one padding column stands in."""
    from rlpt.models import init_model
    from rlpt.models.config import ModelConfig
    from rlpt.rollout.single_turn import response_window, to_rows
    from rlpt.train.losses import token_logprobs, token_logprobs_entropy

    cfg = ModelConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                      num_kv_heads=2, attention_impl="dense")
    params = init_model(cfg, 0).params
    traj = _group_traj(5, N=17, prompt_lens=(2, 3))
    rows = to_rows(traj, 20)
    rows["window"] = response_window(traj, 20)
    assert rows["window"].shape == (12, 20)
    batch = jax.tree.map(jnp.asarray, rows)
    shared = token_logprobs_entropy(params, cfg, batch, 3)[0] * batch["loss_mask"]
    full = token_logprobs(params, cfg, batch) * batch["loss_mask"]
    np.testing.assert_allclose(np.asarray(shared), np.asarray(full), rtol=1e-5, atol=1e-6)
