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


def test_tile_grids_follow_the_aspect_ratio():
    from rlpt.models.image_processing import tile_grid

    assert tile_grid(32, 32, 32, 4) == (1, 1)
    assert tile_grid(32, 64, 32, 4) == (1, 2)  # wide: two tiles side by side
    assert tile_grid(96, 30, 32, 4) == (3, 1)  # tall
    assert tile_grid(64, 64, 32, 4) == (2, 2)
    assert tile_grid(64, 64, 32, 3) == (1, 1)  # 1 x 2 keeps no more of a square image, and wastes more
    assert tile_grid(500, 500, 32, 1) == (1, 1)


def test_tiles_are_a_thumbnail_then_the_grid_row_major():
    from rlpt.models.image_processing import preprocess_tiles, tile

    rng = np.random.default_rng(0)
    wide = rng.integers(0, 256, (32, 64, 3), dtype=np.uint8)
    tiles = tile(wide, 32, 4)
    assert len(tiles) == 3
    np.testing.assert_array_equal(tiles[1], wide[:, :32])  # the image already fits the 1 x 2 grid: no resampling
    np.testing.assert_array_equal(tiles[2], wide[:, 32:])
    np.testing.assert_array_equal(tiles[0], np.asarray(Image.fromarray(wide).resize((32, 32), Image.BICUBIC)))
    square = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
    pixels, counts = preprocess_tiles([wide, square], 32, 4, sample_ids=["a", "b"])
    assert counts == [3, 1] and pixels.shape == (4, 3, 32, 32)
    np.testing.assert_allclose(pixels[3], preprocess([square], 32)[0])
    assert len(tile(wide, 32, 1)) == 1  # max_tiles 1: the image alone (preprocess resizes it)
    with pytest.raises(ValueError, match="sample 'b'"):
        preprocess_tiles([wide, np.zeros((0, 3, 3), np.uint8)], 32, 4, sample_ids=["a", "b"])
