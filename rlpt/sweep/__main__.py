"""`python -m rlpt.sweep summarize <folder> [--baseline LABEL] [--metrics a,b]`: summary.md, summary.csv and plots
of a Hydra multirun folder, written into it. The last stdout line is one JSON object.

argparse, not Hydra: the one argument is an existing folder to read, and a Hydra app would make a run folder of its
own for a command that writes into the sweep folder."""
import argparse
import json
import sys

from rlpt.sweep.report import summarize


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlpt.sweep", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("summarize", help="write summary.md, summary.csv and plots into a sweep folder")
    p.add_argument("folder", help="the sweep folder (hydra.sweep.dir), holding job folders 0/, 1/, ...")
    p.add_argument("--baseline", default=None,
                   help="configuration to compare against: its label or 'k=v ...' overrides (default: the first)")
    p.add_argument("--metrics", default=None,
                   help="comma-separated summary.json keys (default: the numeric ones every ok job has)")
    p.add_argument("--curves", default=None, help="comma-separated metrics-log keys to plot as learning curves "
                                                  "(default: reward_mean,pass_rate where present, else loss)")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples")
    args = parser.parse_args(argv)
    split = lambda s: [x for x in s.split(",") if x] if s else None
    try:
        out = summarize(args.folder, metrics=split(args.metrics), baseline=args.baseline,
                        curve_metrics=split(args.curves), resamples=args.resamples)
    except (FileNotFoundError, ValueError) as e:
        print(f"rlpt.sweep: error: {e}", file=sys.stderr)
        return 2
    print(f"[sweep] {out['summary_md']}")
    for num, folder, error in out["failed_jobs"]:
        print(f"[sweep] job {num} failed ({folder}): {error}")
    print(json.dumps({k: out[k] for k in ("sweep", "jobs", "ok", "failed", "missing", "summary_md")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
