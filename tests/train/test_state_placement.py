"""create_state on params already placed on a device compiles the train step once."""
import jax
import jax.numpy as jnp
import numpy as np

from rlpt.config import OptimConfig
from rlpt.models import ModelConfig, init_model
from rlpt.train.losses import sft_loss
from rlpt.train.optim import make_optimizer
from rlpt.train.state import create_state
from rlpt.train.step import build_train_step


def test_placed_params_compile_the_step_once():
    """Params committed to a device (as a checkpoint load leaves them): the state's fresh scalars are committed
    beside them, so the step's second call reuses the first compilation (it compiled again before)."""
    cfg = ModelConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2,
                      num_kv_heads=1)
    params = jax.device_put(init_model(cfg, seed=0).params, jax.devices()[0])
    opt = make_optimizer(OptimConfig(name="adamw", lr=1e-3, schedule="constant"), 10)
    state = create_state(params, opt, seed=0)
    assert all(x.committed for x in jax.tree.leaves(state))
    B, T = 2, 8
    toks = np.random.default_rng(0).integers(0, cfg.vocab_size, (1, B, T + 1)).astype(np.int32)
    batch = {"inputs": toks[..., :-1], "targets": toks[..., 1:],
             "positions": np.broadcast_to(np.arange(T, dtype=np.int32), (1, B, T)),
             "segment_ids": np.ones((1, B, T), np.int32), "loss_mask": np.ones((1, B, T), np.float32)}
    step = build_train_step(sft_loss(cfg), opt, donate=False)
    for _ in range(3):
        state, _ = step(state, batch)
    assert step._cache_size() == 1
    assert int(state.step) == 3 and jnp.isfinite(state.rng).all()
