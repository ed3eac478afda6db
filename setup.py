"""rlpt: JAX post-training (SFT, preference alignment, RL with verifiable rewards, agentic RL)."""
import os

from setuptools import find_packages, setup

CORE = [
    "jax>=0.10.2,<0.11",
    "flax>=0.12.8,<0.13",
    "optax>=0.2.8,<0.3",
    "orbax-checkpoint>=0.12.8,<0.13",
    "numpy>=1.26",
    "gymnasium>=1.4,<2",
    "hydra-core==1.3.8",
    "tensorboard>=2.20",
    "tokenizers>=0.21",
    "safetensors>=0.5",
    "jinja2>=3.1.6",
    "tqdm>=4.66",
    "rich>=13",
    "matplotlib>=3.8",
    "reasoning-gym==0.1.25",
    "math-verify>=0.7",
    "sympy>=1.13",
    "pyseccomp>=0.1.2",
    "jsonschema>=4",
    # quantized sampling (rl.rollout.quant, rlpt.models.quant): QArray, quantize / dequantize, dot_general
    "qwix>=0.1.8,<0.2",
]
def _lock(name: str) -> list[str]:
    """Requirement lines of a lock file beside this one (comments and blank lines dropped)."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), name)) as f:
        return [line.split("#")[0].strip() for line in f if line.split("#")[0].strip()]


# The dev/test stack is pinned to exact versions known to pass (dev-lock.txt); the library keeps ranges.
DEV = _lock("dev-lock.txt")
# Compile-only rehearsals for TPU slices on a CPU (python -m rlpt.plan); libtpu must match jaxlib exactly.
PLAN = ["libtpu==0.0.51"]
# The verification and environment fleet on Ray (fleet=ray, rlpt.fleet; docs/fleet.md).
FLEET = ["ray>=2.40,<3"]
# Sweeps on a SLURM cluster: python -m rlpt.train -m hydra/launcher=submitit_slurm ... (docs/sweeps.md)
SLURM = ["hydra-submitit-launcher>=1.2"]
GPU = [
    "jax[cuda12]>=0.10.2,<0.11",
    "jax-triton>=0.4",
]

setup(
    name="rlpt",
    version="0.1.0",
    description=__doc__,
    python_requires=">=3.11",
    # The repository keeps kernels/ and envs/ at its root (fixed layout), but they install as rlpt.kernels and
    # rlpt.envs: bare top-level `kernels` and `envs` are other distributions' import names (Hugging Face's
    # `kernels`, which transformers >= 5.25 imports, and PyPI's `envs`).
    packages=find_packages(include=["rlpt", "rlpt.*"])
    + [f"rlpt.{p}" for p in find_packages(include=["kernels", "kernels.*", "envs", "envs.*"])],
    package_dir={"rlpt.kernels": "kernels", "rlpt.envs": "envs"},
    include_package_data=True,
    install_requires=CORE,
    extras_require={"dev": DEV, "fleet": FLEET, "gpu": GPU, "plan": PLAN, "slurm": SLURM},
)
