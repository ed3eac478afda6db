"""CLI: `python -m rlpt.flywheel <failures folder> --out <dir>` builds tasks.jsonl + regression.jsonl;
`python -m rlpt.flywheel --check <regression.jsonl>` re-verifies a regression file (exit 1 if any case broke).
The last stdout line is one JSON object."""
import argparse
import json
import sys

from rlpt.observe.tags import FAILURE_TAGS


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlpt.flywheel", description=__doc__)
    p.add_argument("failures", nargs="?", help="folder of failure records (<run>/failures)")
    p.add_argument("--out", help="output folder for tasks.jsonl, regression.jsonl, now_passing.jsonl")
    p.add_argument("--neighbours", type=int, default=2, help="add train seeds seed+-1..k of each failed task")
    p.add_argument("--tags", default=",".join(FAILURE_TAGS), help="failure tags that become tasks")
    p.add_argument("--check", metavar="REGRESSION_JSONL", help="re-verify a regression file instead")
    a = p.parse_args(argv)
    from rlpt.flywheel.build import build, check_regressions

    if a.check:
        result = check_regressions(a.check)
        for case in result["broken_cases"]:
            print(f"[regression] {case['task_id']}: {case['why']}: {case['response'][:80]!r}", file=sys.stderr)
        print(json.dumps({"check": a.check, "cases": result["cases"], "broken": result["broken"]}))
        return 1 if result["broken"] else 0
    if not a.failures or not a.out:
        p.error("give a failures folder and --out (or --check FILE)")
    tags = tuple(t for t in a.tags.split(",") if t)
    unknown = set(tags) - set(FAILURE_TAGS)
    if unknown:
        p.error(f"--tags: unknown {sorted(unknown)}; known: {FAILURE_TAGS}")
    print(json.dumps(build(a.failures, a.out, neighbours=a.neighbours, tags=tags)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
