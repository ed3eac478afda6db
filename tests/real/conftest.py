"""Session fixtures for end-to-end tests on a real small model: HF checkpoint folders built once per session
(per xdist worker) by rlpt.pipeline.synthetic, with a BPE tokenizer trained on the repository's own text.

real_ckpt_tiny: ~2.2M parameters, instruct (stops on <|im_end|> and <|endoftext|>); real_ckpt_tiny_base: the
same weights, base variant (stops on <|endoftext|>); real_ckpt_100m: ~98M parameters, instruct. All float32 on
disk, seed 0; each fixture returns the folder as a str. A worker trains the tokenizer once and reuses it for
every folder it builds (build times on a 2-core CPU: docs/real_models.md).
"""
import pytest

from rlpt.pipeline.synthetic import build_checkpoint


def _build(tmp_path_factory, name: str, **kwargs) -> str:
    return str(build_checkpoint(tmp_path_factory.mktemp(name), **kwargs))


@pytest.fixture(scope="session")
def real_ckpt_tiny(tmp_path_factory):
    """Folder of the tiny instruct checkpoint (a str path)."""
    return _build(tmp_path_factory, "real_tiny", size="tiny", variant="instruct")


@pytest.fixture(scope="session")
def real_ckpt_tiny_base(tmp_path_factory):
    """Folder of the tiny base checkpoint (a str path)."""
    return _build(tmp_path_factory, "real_tiny_base", size="tiny", variant="base")


@pytest.fixture(scope="session")
def real_ckpt_100m(tmp_path_factory):
    """Folder of the ~98M-parameter instruct checkpoint (a str path; ~390 MB of float32 safetensors)."""
    return _build(tmp_path_factory, "real_100m", size="100m", variant="instruct")
