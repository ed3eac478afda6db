"""rlpt: JAX post-training (SFT, preference alignment, RL with verifiable rewards, agentic RL).

The notebook API (rlpt/api.py) is importable from here: `rlpt.compose`, `rlpt.run`, `rlpt.evaluate`, `rlpt.RunResult`,
and `rlpt.sweep.load`. Names are resolved on first use, so `import rlpt` stays light.
"""
_API = ("compose", "run", "evaluate", "RunResult")


def __getattr__(name: str):
    if name in _API:
        from rlpt import api  # on use: `import rlpt` stays light

        return getattr(api, name)
    if name == "sweep":
        import importlib

        return importlib.import_module("rlpt.sweep")
    raise AttributeError(f"module 'rlpt' has no attribute {name!r}")


__all__ = list(_API) + ["sweep"]
