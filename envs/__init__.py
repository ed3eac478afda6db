"""rlpt.envs: Gymnasium text environments (ids rlpt/<Name>-v0, registered on import) and their sandbox.

Installed as rlpt.envs; imported as a bare `envs` (the repository root on sys.path) it hands that name back to
its installed owner (PyPI's `envs`).
"""
if __name__ == "envs":
    from rlpt._shadow import hand_back

    hand_back(__name__)
else:
    from rlpt.envs.registry import ENV_IDS  # noqa: F401  (registers the environments)

    __all__ = ["ENV_IDS"]
