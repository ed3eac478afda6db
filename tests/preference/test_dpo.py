"""DPO-family stage: each registry loss through the stage's loss_fn equals the algos function on hand-summed
log-probs; precomputed and on-the-fly references agree; a pulse run ends with pass1_before/after."""
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.algos import PairedLogps, UnpairedLogps, get_preference_loss
from rlpt.config import compose
from rlpt.models import builtin_tokenizer, init_model
from rlpt.preference.data import PrefPair, pair_arrays
from rlpt.preference.dpo import preference_loss, reference_logps, row_groups
from rlpt.rollout.format import completion_ids, prompt_ids
from rlpt.train.losses import token_logprobs

TOK = builtin_tokenizer()
SMALL = ["model.hidden_size=32", "model.intermediate_size=64", "train.progress=false"]


def _pairs():
    items = [("1+2=", "3", "4"), ("10+20=", "30", "31"), ("7+7=", "14", "41"), ("5+0=", "5", "50")]
    return [PrefPair(tuple(prompt_ids(TOK, p)), tuple(completion_ids(TOK, c)), tuple(completion_ids(TOK, r)))
            for p, c, r in items]


def _manual_sums(params, cfg, arrays, prefix):
    rows = {k: jnp.asarray(arrays[prefix + k]) for k in ("inputs", "targets", "positions", "segment_ids")}
    return np.asarray(jnp.sum(token_logprobs(params, cfg, rows) * arrays[prefix + "mask"], -1))


# Losses whose formulas only differ inside the registry function (parity-tested in tests/algos) run with `-m slow`.
@pytest.mark.parametrize("loss", ["sigmoid", "simpo", "kto"] + [pytest.param(name, marks=pytest.mark.slow)
                                                             for name in ("ipo", "robust", "hinge", "orpo")])
def test_stage_loss_equals_registry_loss_on_hand_sums(loss):
    cfg = compose(SMALL + [f"pref.loss={loss}", "pref.beta=0.3"])
    ref_model, policy = init_model(cfg.model, 0), init_model(cfg.model, 1)
    arrays = pair_arrays(_pairs(), 24, kl_rows=loss == "kto")
    batch = arrays | reference_logps(ref_model, arrays, row_groups(loss))
    loss_sum, weight, metrics = preference_loss(cfg.pref)(cfg.model)(policy.params, {}, batch, None)
    s = {g: _manual_sums(policy.params, cfg.model, arrays, g) for g in row_groups(loss)}
    r = {g: _manual_sums(ref_model.params, cfg.model, arrays, g) for g in row_groups(loss)}
    if loss == "kto":
        inp = UnpairedLogps(np.concatenate([s["c_"], s["r_"]]), np.concatenate([r["c_"], r["r_"]]),
                            np.array([1] * 4 + [0] * 4, bool), np.concatenate([s["kc_"], s["kr_"]]),
                            np.concatenate([r["kc_"], r["kr_"]]))
    else:
        inp = PairedLogps(s["c_"], s["r_"], r["c_"], r["r_"], arrays["c_mask"].sum(-1), arrays["r_mask"].sum(-1))
    want, want_metrics = get_preference_loss(loss)(inp, beta=0.3)
    assert float(weight) == 4.0
    np.testing.assert_allclose(float(loss_sum) / 4, float(want), rtol=1e-5, atol=1e-6)
    for k, v in want_metrics.items():
        np.testing.assert_allclose(float(metrics[f"pref/{k}"]) / 4, float(v), rtol=1e-5, atol=1e-6)


def test_online_reference_equals_precomputed_and_init_loss_is_log2():
    cfg = compose(SMALL)
    model = init_model(cfg.model, 0)
    arrays = pair_arrays(_pairs(), 24)
    pre = arrays | reference_logps(model, arrays, ("c_", "r_"))
    a = preference_loss(cfg.pref)(cfg.model)(model.params, {}, pre, None)
    online = compose(SMALL + ["pref.ref=online"]).pref
    b = preference_loss(online)(cfg.model)(model.params, {"ref": model.params}, arrays, None)
    np.testing.assert_allclose(float(a[0]), float(b[0]), rtol=1e-6)
    np.testing.assert_allclose(float(a[0]) / 4, math.log(2.0), rtol=1e-5)  # policy == reference


def test_bad_names_fail_before_training():
    with pytest.raises(KeyError, match="unknown preference loss 'dpoo'"):
        preference_loss(compose(SMALL + ["pref.loss=dpoo"]).pref)
    with pytest.raises(ValueError, match="pref.ref"):
        preference_loss(compose(SMALL + ["pref.ref=sometimes"]).pref)


def test_dpo_pulse_and_training_separates_pairs(tmp_path, capsys):
    from rlpt.preference.dpo import run

    cfg = compose(["experiment=dpo_tiny", "pref.sft_steps=2", "pref.steps=12", "pref.lr=3e-3", "pref.rpo_alpha=0",
                   "pref.eval_per_domain=4", "pref.source=synthetic", "pref.train_tasks=16", "pref.batch_size=8",
                   "data.batch_size=8", "train.ckpt_every=6", f"train.out_dir={tmp_path}"] + SMALL)
    out = run(cfg)
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["pass1_before"] is not None and last["pass1_after"] is not None
    assert last["pairs"]["pairs_kept"] == 16
    assert out["last_metrics"]["pref/reward_accuracy"] >= 0.75  # the policy moved chosen above rejected
    assert out["last_metrics"]["loss"] < math.log(2.0)
    assert (tmp_path / "sft" / "hf" / "config.json").exists()
    assert jax.tree.leaves(out["model"].params)


def test_rpo_alpha_adds_the_chosen_token_mean_nll():
    cfg = compose(SMALL)
    rpo = compose(SMALL + ["pref.rpo_alpha=0.5"]).pref
    model, policy = init_model(cfg.model, 0), init_model(cfg.model, 1)
    arrays = pair_arrays(_pairs(), 24)
    batch = arrays | reference_logps(model, arrays, ("c_", "r_"))
    base = preference_loss(cfg.pref)(cfg.model)(policy.params, {}, batch, None)
    got = preference_loss(rpo)(cfg.model)(policy.params, {}, batch, None)
    nll = -_manual_sums(policy.params, cfg.model, arrays, "c_").sum() / arrays["c_mask"].sum()
    np.testing.assert_allclose(float(got[0]) / 4, float(base[0]) / 4 + 0.5 * nll, rtol=1e-5)
    np.testing.assert_allclose(float(got[2]["pref/nll"]) / 4, nll, rtol=1e-5)
