"""rlpt.models.image_processing.preprocess equals transformers' SigLIP image processor (Pillow backend) on the same
images: up- and down-scaling, non-square, RGBA / grayscale / palette PIL images, already-sized arrays; bad images raise
naming the sample."""
import numpy as np
import pytest
from PIL import Image

from rlpt.models.image_processing import preprocess

transformers = pytest.importorskip("transformers")


def _processor(size):
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    return SiglipImageProcessorPil(size={"height": size, "width": size})


def _images():
    rng = np.random.default_rng(0)
    arr = lambda h, w: (rng.random((h, w, 3)) * 255).astype(np.uint8)  # noqa: E731
    gradient = np.broadcast_to(np.linspace(0, 255, 40, dtype=np.uint8)[None, :, None], (25, 40, 3)).copy()
    return [arr(20, 30), arr(64, 48), arr(16, 16), gradient, Image.fromarray(arr(33, 17)),
            Image.fromarray(np.dstack([arr(24, 24), np.full((24, 24, 1), 128, np.uint8)]), "RGBA"),
            Image.fromarray(arr(21, 21)[..., 0], "L"), Image.fromarray(arr(18, 26)).convert("P")]


@pytest.mark.parametrize("size", [16, 32])
def test_matches_transformers(size):
    images = _images()
    want = _processor(size)(images=images, return_tensors="np")["pixel_values"]
    got = preprocess(images, size)
    assert got.shape == want.shape == (len(images), 3, size, size) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_bad_images_name_the_sample():
    with pytest.raises(ValueError, match="sample 'chart:7'.*zero size"):
        preprocess([np.zeros((0, 4, 3), np.uint8)], 16, sample_ids=["chart:7"])
    with pytest.raises(ValueError, match="sample 'a'.*shape \\(4, 4, 4\\)"):
        preprocess([np.zeros((4, 4, 4), np.uint8)], 16, sample_ids=["a"])
    with pytest.raises(ValueError, match="float32"):
        preprocess([np.zeros((4, 4, 3), np.float32)], 16)
    with pytest.raises(ValueError, match="numpy array or a PIL image"):
        preprocess(["not an image"], 16)
