"""rlpt.eval: `python -m rlpt.eval` (suites, pass@k, comparisons, effective context, contamination); see docs/eval.md.

`rlpt.eval.heldout` keeps the in-training held-out pass@1 used by the quickstart and the SFT/DPO stages."""
