"""Measures the reward-drift detector (rlpt.observe.drift) on simulated streams: detection delay after a shift
and false-positive rate on stationary and slowly-learning streams, with the ObserveConfig defaults (or overrides).

Streams: binary pass/fail rewards, 256 (or 32, or 8) per step for one domain; shift streams run 100 steps with
the shift at step 60, stationary and learning streams 300 steps (rlpt.observe.drift_sim.SCENARIOS).
Delay = steps from the first shifted step to the first alert.
Usage: python scripts/drift_simulation.py [--seeds 200] [observe.drift_window=8 ...]
The last stdout line is one JSON object.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from rlpt.observe.drift import DriftDetector  # noqa: E402
from rlpt.observe.drift_sim import SCENARIOS, run_scenario  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=200)
    p.add_argument("overrides", nargs="*", help="observe.* settings, e.g. observe.drift_window=8")
    a = p.parse_args()
    from rlpt.config.schema import ObserveConfig

    ocfg = ObserveConfig()
    for o in a.overrides:
        key, value = o.split("=", 1)
        field = key.removeprefix("observe.")
        if not hasattr(ocfg, field):
            raise KeyError(f"unknown ObserveConfig field {key!r}")
        setattr(ocfg, field, type(getattr(ocfg, field))(value))

    def make():
        return DriftDetector(window=ocfg.drift_window, baseline=ocfg.drift_baseline,
                             min_samples=ocfg.drift_min_samples, bins=ocfg.drift_bins,
                             ks_threshold=ocfg.drift_ks_threshold, psi_threshold=ocfg.drift_psi_threshold)

    print(f"{'scenario':36s} {'detected':>8s} {'delay mean/p95/max':>20s} {'FP/1k steps (97.5% ub)':>22s} "
          f"{'runs w/ FP':>10s}", flush=True)
    results = []
    for sc in SCENARIOS:
        r = run_scenario(sc, make, a.seeds)
        results.append(r)
        det = f"{r['detected']:.2f}" if "detected" in r else "-"
        delay = f"{r['delay_mean']:.1f}/{r['delay_p95']:.0f}/{r['delay_max']:.0f}" if "detected" in r else "-"
        fp = f"{r['false_alerts_per_1k_steps']:.3f} ({r['false_alerts_per_1k_steps_ub']:.3f})"
        print(f"{r['scenario']:36s} {det:>8s} {delay:>20s} {fp:>22s} "
              f"{r['runs_with_false_alert']:10.3f}", flush=True)
    settings = {k: getattr(ocfg, k) for k in ("drift_window", "drift_baseline", "drift_min_samples", "drift_bins",
                                               "drift_ks_threshold", "drift_psi_threshold")}
    print(json.dumps({"benchmark": "drift_simulation", "seeds": a.seeds, "settings": settings, "results": results}))


if __name__ == "__main__":
    main()
