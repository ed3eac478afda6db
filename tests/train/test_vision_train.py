"""Training a vision-language model: SFT rows and RL rows carry their images, and the losses read them.

The trainer's log-probs over packed rows (several images per row) equal a per-row teacher-forced forward of the
VLM; the RL rows' log-probs equal the sampler's for the same images; the tower is trained or frozen by
model.vision.train; a corrupt image drops its sample and is counted."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlpt.rollout.format as fmt
from rlpt.config import compose
from rlpt.models import builtin_tokenizer
from rlpt.models.model import init_model
from rlpt.models.transformer import forward
from rlpt.models.vision import VLMConfig, image_features, merge_embeddings, row_embeddings
from rlpt.rollout.single_turn import rollout, to_rows
from rlpt.tasks import get_domain
from rlpt.train.data import SFTData
from rlpt.train.losses import token_logprobs, token_logprobs_entropy
from rlpt.train.packing import first_fit_decreasing
from rlpt.train.sft import domain_mixture

SMALL = ["experiment=vision_tiny", "model.hidden_size=32", "model.intermediate_size=64",
         "model.vision.hidden_size=32", "model.vision.intermediate_size=48", "data.batch_size=4",
         "data.images_per_row=2", "data.seq_len=320", "rl.rollout.group_size=2"]


@pytest.fixture(scope="module")
def setup():
    cfg = compose(SMALL)
    return cfg, builtin_tokenizer(), init_model(cfg.model, seed=0)


def _reference_logp(model, batch):
    """log p(target) (B, T): each row through the VLM alone, its images spliced in by `merge_embeddings`."""
    cfg, out = model.config, []
    for r in range(batch["inputs"].shape[0]):
        n = int(batch["num_images"][r])
        tokens = jnp.asarray(batch["inputs"][r:r + 1])
        feats = image_features(model.params, cfg, jnp.asarray(batch["pixel_values"][r, :n]))
        embeds = merge_embeddings(model.params, cfg, tokens, feats, jnp.asarray(batch["segment_ids"][r:r + 1] > 0))
        logits = forward(model.params["text"], cfg.text, tokens, jnp.asarray(batch["positions"][r:r + 1]),
                         jnp.asarray(batch["segment_ids"][r:r + 1]), embeds=embeds)
        logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
        out.append(np.take_along_axis(np.asarray(logp[0]), batch["targets"][r][:, None], axis=-1)[:, 0])
    return np.stack(out)


def test_sft_rows_carry_their_images_and_the_loss_reads_them(setup):
    cfg, tok, model = setup
    vision = model.config.vision
    data = SFTData(cfg.data, tok, 0, domains=domain_mixture(cfg), vision=vision)
    batch, _ = data.next_batch()
    assert batch["pixel_values"].shape == (4, 2, 3, 32, 32)
    assert int(batch["num_images"].max()) == 2  # packing put two image samples in one row
    for r in range(4):
        n_tok = int(((batch["inputs"][r] == vision.image_token_id) & (batch["segment_ids"][r] > 0)).sum())
        assert n_tok == batch["num_images"][r] * vision.tokens_per_image
        assert not batch["pixel_values"][r, batch["num_images"][r]:].any()  # unused slots stay zero
    logp = np.asarray(jax.jit(lambda p, b: token_logprobs(p, model.config, b))(model.params, batch))
    mask = batch["loss_mask"] > 0
    np.testing.assert_allclose(logp[mask], _reference_logp(model, batch)[mask], atol=2e-5)
    # the pixels matter: other images, other log-probs at the answer tokens
    other = dict(batch, pixel_values=-batch["pixel_values"])
    logp_other = np.asarray(jax.jit(lambda p, b: token_logprobs(p, model.config, b))(model.params, other))
    assert np.abs(logp_other[mask] - logp[mask]).max() > 1e-4


@pytest.mark.parametrize("train_tower", [True, False])
def test_the_tower_trains_or_stays_frozen(setup, train_tower):
    cfg, tok, model = setup
    mcfg = VLMConfig(model.config.text, dataclasses.replace(model.config.vision, train=train_tower))
    batch, _ = SFTData(cfg.data, tok, 0, domains=domain_mixture(cfg), vision=mcfg.vision).next_batch()

    def loss(p):
        return -jnp.sum(token_logprobs(p, mcfg, batch) * batch["loss_mask"])

    grads = jax.jit(jax.grad(loss))(model.params)
    tower = max(float(jnp.abs(g).max()) for g in jax.tree.leaves(grads["vision"]))
    projector = max(float(jnp.abs(g).max()) for g in jax.tree.leaves(grads["projector"]))
    assert projector > 0
    assert (tower > 0) == train_tower


def test_a_sampled_image_token_past_the_rows_images_stays_text(setup):
    _, _, model = setup
    cfg, k = model.config, model.config.vision.tokens_per_image
    img = cfg.vision.image_token_id
    tokens = jnp.asarray([[5] + [img] * k + [6, img, 7]])  # the last image id is a generated token
    pixels = jax.random.normal(jax.random.key(1), (1, 2, 3, 32, 32))
    embeds = row_embeddings(model.params, cfg, tokens, pixels, jnp.asarray([1]))
    want = merge_embeddings(model.params, cfg, tokens[:, :k + 2], image_features(model.params, cfg, pixels[0, :1]))
    np.testing.assert_allclose(np.asarray(embeds[:, :k + 2]), np.asarray(want), atol=1e-6)
    np.testing.assert_array_equal(np.asarray(embeds[0, k + 2]), np.asarray(model.params["text"]["embed"][img]))


def test_rl_rows_give_the_samplers_log_probs(setup):
    cfg, tok, model = setup
    tasks = [get_domain(d).generate(s, 1) for s, d in enumerate(["vision/bar_value", "vision/bar_extreme",
                                                                  "vision/line_extreme"])]
    traj = rollout(model, tok, tasks, cfg.rl.rollout, seed=3, version=0)
    assert len(traj.images) == 6 and all(len(px) == 1 for px in traj.images)
    rows = to_rows(traj, cfg.rl.rollout.max_prompt_len + cfg.rl.rollout.max_new_tokens, 1)
    assert rows["pixel_values"].shape[:2] == (6, 1) and rows["num_images"].tolist() == [1] * 6
    logp, _ = jax.jit(lambda p, b: token_logprobs_entropy(p, model.config, b))(model.params, rows)
    mask = rows["loss_mask"] > 0
    np.testing.assert_allclose(np.asarray(logp)[mask], rows["rollout_logp"][mask], atol=2e-4)


def test_packing_respects_the_image_slots():
    rows, unplaced = first_fit_decreasing([10, 10, 10, 10], 2, 40, counts=[1, 1, 1, 0], max_count=1)
    assert unplaced == [2] and sorted(rows) == [[0, 3], [1]]  # the third image waits for the next batch
    rows, unplaced = first_fit_decreasing([10, 10, 10], 2, 40, counts=[1, 1, 1], max_count=1)
    assert unplaced == [2] and all(len(r) == 1 for r in rows)


def test_a_corrupt_image_drops_its_sample_and_is_counted(setup, monkeypatch):
    cfg, tok, model = setup
    real, calls = fmt.task_images, []

    def sometimes_corrupt(task, vision):
        calls.append(task.id)
        if len(calls) % 3 == 0:
            task = dataclasses.replace(task, meta=dict(task.meta, images=[np.zeros((0, 4, 3), np.uint8)]))
        return real(task, vision)

    monkeypatch.setattr(fmt, "task_images", sometimes_corrupt)
    data = SFTData(dataclasses.replace(cfg.data, images_per_row=1, seq_len=160, packing=False), tok, 0,
                   domains=domain_mixture(cfg), vision=model.config.vision)
    batch, _ = data.next_batch()
    assert batch["num_images"].tolist() == [1, 1, 1, 1]
    source = next(iter(data.sources.values()))
    assert source.bad_images >= 1


def test_a_corrupt_image_in_rl_and_eval_is_dropped_not_fatal(setup):
    cfg, tok, model = setup
    tasks = [get_domain(d).generate(s, 1) for s, d in enumerate(["vision/bar_value", "vision/bar_extreme",
                                                                  "vision/line_extreme"])]
    broken = dataclasses.replace(tasks[1], meta=dict(tasks[1].meta, images=[np.zeros((0, 4, 3), np.uint8)]))
    traj = rollout(model, tok, [tasks[0], broken, tasks[2]], cfg.rl.rollout, seed=3, version=0)
    assert traj.dropped.tolist() == [False, False, True, True, False, False]
    assert not traj.images[2].any()  # sampled on blank pixels
    from rlpt.pipeline.rl import make_batch

    rows, metrics = make_batch(traj, cfg, cfg.rl.rollout.max_prompt_len + cfg.rl.rollout.max_new_tokens)
    assert metrics["rollout/dropped_images"] == 2
    assert not rows["loss_mask"][2:4].any() and rows["loss_mask"][[0, 1, 4, 5]].any(axis=1).all()
    from rlpt.eval.heldout import evaluate

    oracle_free = evaluate(model, tok, [broken], max_new_tokens=2)
    assert oracle_free["pass1"] == 0.0 and oracle_free["n"] == 1


def test_dpo_pairs_carry_the_prompts_images(setup):
    from rlpt.preference.common import joint_logps, sequence_logps
    from rlpt.preference.data import pair_arrays
    from rlpt.preference.pairs import synthetic_pairs

    cfg, tok, model = setup
    tasks = [get_domain("vision/bar_extreme").generate(s, 1) for s in range(4)]
    pairs, _ = synthetic_pairs(tok, tasks, corruption="swap", seed=0, vision=model.config.vision)
    arrays = pair_arrays(pairs, 256)
    assert arrays["c_pixel_values"].shape[:2] == (4, 1) and arrays["r_num_images"].tolist() == [1] * 4
    fwd = jax.jit(lambda p, b: joint_logps(p, model.config, b, ("c_", "r_")))
    chosen, rejected = fwd(model.params, arrays)
    np.testing.assert_allclose(np.asarray(chosen), np.asarray(sequence_logps(model.params, model.config, arrays,
                                                                             "c_")), rtol=1e-5)
    blank = dict(arrays, c_pixel_values=np.zeros_like(arrays["c_pixel_values"]))
    assert np.abs(np.asarray(fwd(model.params, blank)[0]) - np.asarray(chosen)).max() > 1e-4  # the images matter


@pytest.mark.parametrize("overrides", [["lora.rank=4", "lora.targets=[wq,wv]"],
                                       ["lora.rank=4", "lora.targets=[wq]", "lora.vision_targets=[wq,fc1]"],
                                       ["model.vision.train=false", "optim.weight_decay=0.1"]])
def test_lora_and_a_frozen_tower_train_only_their_parts(overrides, tmp_path):
    from rlpt.train.loop import make_trainer
    from rlpt.train.losses import sft_loss

    cfg = compose(SMALL + overrides + ["train.ckpt_every=0", f"train.out_dir={tmp_path}", "optim.lr=1e-2",
                                       "optim.warmup_steps=0"])
    trainer = make_trainer(cfg, sft_loss)
    lora = cfg.lora.rank > 0
    assert set(trainer.state.params) == ({"text", "vision", "projector"} if lora else {"text", "projector"})
    batch, _ = SFTData(cfg.data, builtin_tokenizer(), 0, domains=domain_mixture(cfg),
                       vision=trainer.model_cfg.vision).next_batch()
    before = jax.device_get(trainer.model().params)
    for _ in range(2):
        trainer.step(batch)
    after = jax.device_get(trainer.model().params)

    def same(a, b):
        return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))

    assert not same(before["projector"], after["projector"])
    if lora:  # the adapted targets move (merged into the policy), every other text weight stays
        assert not same(before["text"]["layers"]["wq"], after["text"]["layers"]["wq"])
        assert same(before["text"]["layers"]["wk"], after["text"]["layers"]["wk"])
        assert same(before["text"]["embed"], after["text"]["embed"])
        tower = before["vision"]["layers"], after["vision"]["layers"]
        if cfg.lora.vision_targets:  # the tower's adapted projections move, the rest of the tower stays
            assert not same(tower[0]["wq"], tower[1]["wq"]) and not same(tower[0]["fc1"], tower[1]["fc1"])
            assert same(tower[0]["wk"], tower[1]["wk"]) and same(before["vision"]["patch"], after["vision"]["patch"])
        else:
            assert not same(before["vision"], after["vision"])
    else:  # no gradient and no weight decay on the frozen tower
        assert same(before["vision"], after["vision"])
        assert not same(before["text"], after["text"])
