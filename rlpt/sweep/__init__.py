"""rlpt.sweep: read a Hydra multirun folder (`python -m rlpt.train -m ...`) and summarize it; see docs/sweeps.md.

    sweep = rlpt.sweep.load("multirun/demo")      # jobs, configurations, table(), compare(), to_pandas()
    rlpt.sweep.summarize("multirun/demo")         # summary.md, summary.csv and PNG plots in the folder
"""
from rlpt.sweep.report import summarize
from rlpt.sweep.results import Configuration, Job, Sweep, load, lower_is_better

__all__ = ["Configuration", "Job", "Sweep", "load", "lower_is_better", "summarize"]
