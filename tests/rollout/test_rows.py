"""RL train rows are only as wide as the batch needs (a power of two up to the configured row length), and
the log-probs on policy tokens do not depend on that width."""
import numpy as np
import pytest

from rlpt.models import ModelConfig, init_model
from rlpt.rollout.single_turn import Trajectories, to_rows
from rlpt.train.losses import token_logprobs
from rlpt.train.packing import fit_width


def test_fit_width_powers_of_two_capped():
    assert [fit_width(n, 30) for n in (0, 1, 8, 9, 15, 16, 17, 30)] == [8, 8, 8, 16, 16, 16, 30, 30]
    assert fit_width(3, 64, floor=4) == 4
    with pytest.raises(ValueError, match="31 tokens exceeds the row length 30"):
        fit_width(31, 30)


def _traj(lengths, prompt_len=5):
    rng = np.random.default_rng(0)
    R, N = len(lengths), max(lengths)
    return Trajectories(tasks=[None] * R, prompts=[rng.integers(3, 60, prompt_len).tolist() for _ in range(R)],
                        response=rng.integers(3, 60, (R, N)).astype(np.int32), lengths=np.asarray(lengths),
                        rollout_logp=-rng.random((R, N)).astype(np.float32), rewards=np.zeros(R, np.float32),
                        passed=np.zeros(R, bool), group_ids=np.arange(R), truncated=np.zeros(R, bool), version=0,
                        gen_s=0.0, verify_s=0.0, texts=[""] * R)


def test_rows_take_the_batch_width_and_name_an_overlong_row():
    assert to_rows(_traj([2, 3]), 64)["inputs"].shape == (2, 8)  # 5 + 3 - 1 = 7 inputs
    assert to_rows(_traj([2, 12]), 64)["inputs"].shape == (2, 16)
    assert to_rows(_traj([2, 12]), 12 + 4)["inputs"].shape == (2, 16)
    with pytest.raises(ValueError, match="row 1: 16 tokens exceed the RL row length 15"):
        to_rows(_traj([2, 12]), 15)


def test_policy_token_logprobs_do_not_depend_on_the_row_width():
    cfg = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2)
    params = init_model(cfg, 0).params
    traj = _traj([2, 9, 5])
    narrow = to_rows(traj, 64)
    wide = {k: np.pad(v, ((0, 0), (0, 64 - v.shape[1]))) for k, v in narrow.items()}
    lp_n = np.asarray(token_logprobs(params, cfg, narrow)) * narrow["loss_mask"]
    lp_w = np.asarray(token_logprobs(params, cfg, wide)) * wide["loss_mask"]
    assert narrow["inputs"].shape[1] == 16
    np.testing.assert_allclose(lp_w[:, :16], lp_n, rtol=1e-6, atol=1e-6)
    assert not lp_w[:, 16:].any()
