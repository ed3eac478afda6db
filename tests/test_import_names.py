"""rlpt's kernels/ and envs/ folders never take the top-level names `kernels` (Hugging Face) and `envs` (PyPI).

In one process, from the repository root and from another folder: transformers (whose hub integration imports
Hugging Face's `kernels`) builds and runs a Qwen2 model while rlpt.kernels runs blockwise, flash (interpret)
and ring attention against the reference.
"""
import os
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent('''
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import json, sys
    import torch, transformers
    from transformers.integrations import hub_kernels  # does `from kernels import CUDAProperties, ...`
    import kernels
    import rlpt.kernels, rlpt.envs
    import gymnasium as gym
    import jax, jax.numpy as jnp, numpy as np

    repo = sys.argv[1]
    out = {"hf_kernels": kernels.__file__, "rlpt_kernels": rlpt.kernels.__file__}
    cfg = transformers.Qwen2Config(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        logits = model(torch.arange(12).reshape(1, 12)).logits
    out["hf_logits_finite"] = bool(torch.isfinite(logits).all())
    out["hf_logits_shape"] = list(logits.shape)

    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal((2, 32, 4, 16)), jnp.float32) for _ in range(3))
    ref = rlpt.kernels.attention(q, k, v, impl="reference")
    errs = {"blockwise": rlpt.kernels.attention(q, k, v, impl="blockwise", block_q=8, block_k=8),
            "flash": rlpt.kernels.attention(q, k, v, impl="flash", interpret=True, block_q=16, block_k=16)}
    mesh = jax.make_mesh((4,), ("seq",), axis_types=(jax.sharding.AxisType.Explicit,))
    with jax.set_mesh(mesh):
        errs["ring"] = rlpt.kernels.attention(q, k, v, impl="ring")
    out["max_err"] = {name: float(jnp.max(jnp.abs(got - ref))) for name, got in errs.items()}
    out["env"] = type(gym.make("rlpt/SingleTurn-v0").unwrapped).__module__
    print("RESULT " + json.dumps(out))
''')


@pytest.mark.parametrize("where", ["repo_root", "other_folder"])
def test_transformers_and_rlpt_kernels_in_one_process(where, tmp_path):
    pytest.importorskip("kernels")  # installed with transformers >= 5.25 (dev-lock.txt)
    cwd = REPO if where == "repo_root" else str(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "XLA_FLAGS")}
    # `python -c` puts the working directory first on sys.path, as a user's shell or notebook in the repo does.
    proc = subprocess.run([sys.executable, "-c", SCRIPT, REPO], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    import json

    out = json.loads(proc.stdout.split("RESULT ", 1)[1])
    assert not out["hf_kernels"].startswith(REPO + os.sep), out["hf_kernels"]
    assert out["rlpt_kernels"].startswith(REPO + os.sep), out["rlpt_kernels"]
    assert out["hf_logits_finite"] and out["hf_logits_shape"] == [1, 12, 97]
    for name, err in out["max_err"].items():
        assert err < 1e-5, (name, err)
    assert out["env"] == "rlpt.envs.single_turn"


@pytest.mark.parametrize("name", ["kernels", "envs"])
def test_bare_name_from_repo_root_is_never_ours(name):
    """From the repo root a bare import finds the installed owner, or fails naming rlpt's module instead."""
    code = (f"import importlib.util, sys\n"
            f"try:\n    import {name} as m\nexcept ModuleNotFoundError as e:\n    print('MISSING', e)\n"
            f"else:\n    print('FILE', m.__file__)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    kind, _, rest = proc.stdout.strip().partition(" ")
    if kind == "FILE":
        assert not rest.startswith(os.path.join(REPO, name)), rest
    else:
        assert f"rlpt.{name}" in rest, rest


def test_installed_names(monkeypatch):
    """What setup.py installs: rlpt and its subpackages only (kernels/ and envs/ mapped under rlpt)."""
    import runpy

    import setuptools

    seen = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kw: seen.update(kw))
    monkeypatch.chdir(REPO)
    runpy.run_path(os.path.join(REPO, "setup.py"))
    packages = seen["packages"]
    assert {"rlpt", "rlpt.kernels", "rlpt.envs", "rlpt.envs.sandbox"} <= set(packages), packages
    assert all(p == "rlpt" or p.startswith("rlpt.") for p in packages), packages
    assert seen["package_dir"] == {"rlpt.kernels": "kernels", "rlpt.envs": "envs"}
