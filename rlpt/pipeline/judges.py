"""The judges a reward mixture names, trained or loaded for a run: `rlpt.preference.judges`, re-exported here."""
from rlpt.preference.judges import needed_judges, run_judges

__all__ = ["needed_judges", "run_judges"]
