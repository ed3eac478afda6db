"""Keep the repository's kernels/ and envs/ folders from shadowing other distributions' top-level modules.

The folders install as rlpt.kernels and rlpt.envs (setup.py's package_dir), but a process started in the
repository root has that root on sys.path, where the folders look like top-level `kernels` (Hugging Face's
distribution, imported by transformers >= 5.25) and `envs` (a PyPI package). When one is imported under its bare
name, its __init__ calls `hand_back`, which loads the installed owner of that name in its place.
"""
import importlib.machinery
import importlib.util
import os
import sys

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _is_repo_root(entry: str) -> bool:
    try:
        return os.path.samefile(entry or os.getcwd(), _REPO_ROOT)
    except OSError:
        return False


def hand_back(name: str) -> None:
    """Replace sys.modules[name] (this repository's folder) by the module of that name found off the repo root."""
    path = [entry for entry in sys.path if not _is_repo_root(entry)]
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    if spec is None:
        raise ModuleNotFoundError(
            f"No module named {name!r} (the repository folder {name}/ is not it: import rlpt.{name})", name=name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # the import system returns sys.modules[name] once this __init__ finishes
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
