"""The train step gives the same losses on 1 device and on 8 fake devices under every mesh layout."""
import jax
import numpy as np
import pytest

from rlpt.config import compose
from rlpt.models import builtin_tokenizer
from rlpt.train.data import SFTData
from rlpt.train.loop import make_trainer, param_shardings_match_rules
from rlpt.train.losses import sft_loss
from rlpt.train.sft import domain_mixture

COMMON = ["model.hidden_size=64", "model.intermediate_size=128", "model.num_layers=2", "train.ckpt_every=0",
          "data.seq_len=48", "data.batch_size=8", "optim.warmup_steps=0", "optim.lr=1e-2"]


def _batches(cfg, n):
    data = SFTData(cfg.data, builtin_tokenizer(), cfg.train.seed, domains=domain_mixture(cfg))
    return [data.next_batch()[0] for _ in range(n)]


def _losses(overrides, devices=None, steps=5):
    cfg = compose(COMMON + overrides)
    trainer = make_trainer(cfg, sft_loss, devices=devices)
    out = [float(trainer.step(b)["loss"]) for b in _batches(cfg, steps)]
    return out, trainer


@pytest.fixture(scope="module")
def single():
    return _losses(["mesh=single"], devices=jax.devices()[:1])[0]


@pytest.mark.parametrize("mesh", [["mesh=single"], ["mesh=fsdp"], ["mesh=fsdp_tp", "mesh.tensor=4"]],
                         ids=["data8", "fsdp8", "fsdp2xtp4"])
def test_same_losses_across_meshes(single, mesh):
    assert len(jax.devices()) == 8
    losses, trainer = _losses(mesh)
    np.testing.assert_allclose(losses, single, rtol=1e-5)
    assert losses[-1] < losses[0]
    bad = param_shardings_match_rules(trainer.model_cfg, trainer.state.params, trainer.mesh,
                                      trainer.cfg.mesh.rules)
    assert not bad, bad
    if "mesh=fsdp_tp" in mesh:
        spec = tuple(trainer.state.params["layers"]["wq"].sharding.spec)
        assert spec + (None,) * (4 - len(spec)) == (None, "fsdp", "tensor", None)
        # Optimizer moments follow their parameters' shardings.
        mu = trainer.state.opt_state[1][0].mu["layers"]["w_up"]
        assert mu.sharding.is_equivalent_to(trainer.state.params["layers"]["w_up"].sharding, 3)


def test_sequence_parallel_ring_with_zigzag_matches_single_device(single):
    """mesh=seq (8) with ring attention: zigzag and contiguous layouts give the single-device losses."""
    seq = ["mesh=seq", "model.attention_impl=ring"]
    zigzag, trainer = _losses(seq + ["data.cp_layout=zigzag"], steps=2)
    contiguous, _ = _losses(seq + ["data.cp_layout=contiguous"], steps=2)
    assert trainer.mesh.shape["seq"] == 8
    np.testing.assert_allclose(zigzag, single[:2], rtol=1e-5)
    np.testing.assert_allclose(contiguous, single[:2], rtol=1e-5)
