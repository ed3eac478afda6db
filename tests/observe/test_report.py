"""Run report: real, readable PNGs; the cost line's arithmetic; alerts listed; degrades with missing keys."""
import json

import matplotlib.image as mpimg
import numpy as np
import pytest

from rlpt.observe.cost import cost, estimate_flops
from rlpt.observe.report import write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _history(n=60, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(1, n + 1):
        p = min(0.2 + 0.01 * s, 0.9)
        rows.append({"step": s, "reward_mean": p + 0.05 * rng.standard_normal(), "pass_rate": p,
                     "reward/arith/add": p, "reward/list/sort": p / 2, "pass/arith/add": p, "pass/list/sort": p / 2,
                     "response_len": 5 + rng.random(), "entropy": 1.0 - 0.01 * s, "logp_gap": 0.01 * rng.random(),
                     "pg/approx_kl": 0.001 * s, "gen_s": 0.5, "verify_s": 0.05, "train_s": 0.3, "idle_s": 0.55,
                     "step_s": 0.85})
    return rows


def test_report_plots_are_real_pngs_and_cost_line(tmp_path):
    alerts = tmp_path / "alerts.jsonl"
    alerts.write_text(json.dumps({"message": "reward drift in 'arith/add' at step 30: mean 0.5 -> 0.1"}) + "\n")
    summary = {"sft_pass1": 0.40, "rl_pass1": 0.55, "n_params": 1_000_000, "tokens_generated": 2_000_000,
               "tokens_trained": 3_000_000.0, "wall_s": 321.0, "drift_alert_steps": [30], "alerts_file": str(alerts),
               "time_split_s": {"generate": 30.0, "train": 18.0}}
    path = write_report(str(tmp_path), title="t", summary=summary, history=_history(),
                        evals={"base": 0.0, "sft": 0.40, "rl": 0.55},
                        per_domain={"sft": {"arith/add": 0.6, "list/sort": 0.2}, "rl": {"arith/add": 0.8,
                                                                                      "list/sort": 0.3}})
    text = open(path).read()
    flops = 6 * 1e6 * 3e6 + 2 * 1e6 * 2e6  # 2.2e13
    assert summary["cost_flops"] == pytest.approx(flops) and summary["cost_gain_points"] == pytest.approx(15.0)
    assert summary["cost_flops_per_point"] == pytest.approx(flops / 15.0)
    cost_line = next(line for line in text.splitlines() if line.startswith("**Cost:**"))
    for part in ("2.00M tokens generated", "3.00M trained", "wall 321 s", "2.2e+13 FLOPs", "+15.0 points",
                 "1.47e+12 FLOPs per point"):
        assert part in cost_line, (part, cost_line)
    assert "reward drift in 'arith/add'" in text and "## Alerts (1)" in text
    pngs = ["eval.png", "pass_per_domain.png", "reward.png", "reward_per_domain.png", "length_entropy.png", "kl.png",
            "time_split.png"]
    for png in pngs:
        assert f"![{png[:-4]}]({png})" in text
        assert open(tmp_path / png, "rb").read(8) == PNG_MAGIC
        img = mpimg.imread(tmp_path / png)  # (H, W, 4) floats in [0, 1]
        assert img.shape[0] >= 300 and img.shape[1] >= 500, (png, img.shape)
        ink = (img[..., :3].mean(-1) < 0.5).mean()  # dark pixels: axes, text, lines
        assert 0.005 < ink < 0.5, (png, ink)  # neither blank nor a solid block
        assert img[..., :3].std() > 0.05


def test_cost_degrades_and_estimate():
    assert estimate_flops(10, 2, 3) == 6 * 10 * 2 + 2 * 10 * 3
    c = cost({"wall_s": 5.0})
    assert c["missing"] == ["n_params", "tokens_trained", "tokens_generated"] and "flops" not in c
    c = cost({"n_params": 1, "tokens_trained": 1, "tokens_generated": 1, "sft_pass1": 0.5, "rl_pass1": 0.4})
    assert c["gain_points"] == pytest.approx(-10.0) and c["flops_per_point"] is None


def test_report_without_history_or_cost_keys(tmp_path):
    summary = {"final": 1.0}
    path = write_report(str(tmp_path), title="sft only", summary=summary, history=[], evals={})
    text = open(path).read()
    assert "**Cost:** n/a (the summary lacks n_params, tokens_trained, tokens_generated)" in text
    assert "## Alerts (0)" in text and "cost_flops" not in summary
