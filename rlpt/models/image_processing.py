"""Image preprocessing for the vision tower, as SigLIP's image processor does it (transformers'
SiglipImageProcessorPil): RGB (transparency over white), bicubic resize to (size, size) with Pillow, scale to
[0, 1], normalise with mean and std 0.5, channels first. Checked against transformers on the same images
(tests/models/test_image_processing.py).
"""

import numpy as np
from PIL import Image

IMAGE_TOKEN = "<image>"  # a prompt's image placeholder; it expands to tokens_per_image tokens per tile
MEAN = (0.5, 0.5, 0.5)
STD = (0.5, 0.5, 0.5)


# PIL modes with a clear RGB meaning (converted); others (F, I, I;16, LAB, HSV, ...) are rejected
PIL_MODES = ("1", "L", "LA", "La", "P", "PA", "RGB", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr")


def to_rgb_array(image, sample_id=None) -> np.ndarray:
    """An (H, W, 3) uint8 RGB array from a PIL image of a mode in PIL_MODES (transparency composited over white,
    as transformers' convert_to_rgb does) or an (H, W, 3) uint8 array; a corrupt or unsupported image (zero size,
    another mode, shape or dtype, a truncated file) raises a ValueError naming `sample_id`."""
    where = f"sample {sample_id!r}: " if sample_id is not None else ""
    if isinstance(image, Image.Image):
        if image.mode not in PIL_MODES:
            raise ValueError(f"{where}unsupported image mode {image.mode!r} (supported: {', '.join(PIL_MODES)})")
        if image.width == 0 or image.height == 0:
            raise ValueError(f"{where}image has zero size {image.width}x{image.height}")
        try:
            image.load()  # a truncated or corrupt file fails here rather than at first use
            if image.mode == "RGB":
                return np.asarray(image)
            rgba = image.convert("RGBA")
            return np.asarray(Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255)), rgba).convert("RGB"))
        except (OSError, ValueError, SyntaxError) as err:
            raise ValueError(f"{where}corrupt image ({type(err).__name__}: {err})") from err
    if not isinstance(image, np.ndarray):
        raise ValueError(f"{where}image is {type(image).__name__}, expected a numpy array or a PIL image")
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"{where}image array has shape {image.shape}, expected (H, W, 3) RGB")
    if image.dtype != np.uint8:
        raise ValueError(f"{where}image array has dtype {image.dtype}, expected uint8")
    if image.shape[0] == 0 or image.shape[1] == 0:
        raise ValueError(f"{where}image has zero size {image.shape[1]}x{image.shape[0]}")
    return image


def preprocess(images, size: int, *, mean=MEAN, std=STD, sample_ids=None) -> np.ndarray:
    """pixel_values (N, 3, size, size) float32 for a list of images (PIL or (H, W, 3) uint8)."""
    out = np.empty((len(images), 3, size, size), np.float32)
    for i, image in enumerate(images):
        rgb = to_rgb_array(image, None if sample_ids is None else sample_ids[i])
        if rgb.shape[:2] != (size, size):
            rgb = np.asarray(Image.fromarray(rgb).resize((size, size), resample=Image.Resampling.BICUBIC))
        x = rgb.astype(np.float32) * np.float32(1 / 255)
        x = (x - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
        out[i] = x.transpose(2, 0, 1)
    return out


def tile_grid(height: int, width: int, size: int, max_tiles: int) -> tuple[int, int]:
    """(rows, cols) of size-pixel tiles for a height x width image, among the grids of at most max_tiles tiles:
    the one that keeps the most of the image's pixels when it is scaled (aspect kept) to fit the grid, then the
    one that wastes the fewest (LLaVA-NeXT's select_best_resolution)."""
    best, best_key = (1, 1), None
    for rows in range(1, max_tiles + 1):
        for cols in range(1, max_tiles // rows + 1):
            scale = min(rows * size / height, cols * size / width)
            kept = min(int(height * scale) * int(width * scale), height * width)
            key = (kept, -(rows * size * cols * size - kept))
            if best_key is None or key > best_key:
                best, best_key = (rows, cols), key
    return best


def tile(image, size: int, max_tiles: int, sample_id=None) -> list[np.ndarray]:
    """The (size, size, 3) RGB arrays the tower sees for one image (variable resolution by tiling, LLaVA-NeXT
    style): the image itself when max_tiles is 1 or `tile_grid` picks one tile; otherwise a thumbnail of the whole
    image first, then the rows x cols tiles (row-major) of the image resized (bicubic) to the grid."""
    rgb = to_rgb_array(image, sample_id)
    if max_tiles <= 1 or rgb.shape[:2] == (size, size):
        return [rgb]
    rows, cols = tile_grid(rgb.shape[0], rgb.shape[1], size, max_tiles)
    if rows * cols == 1:
        return [rgb]
    pil = Image.fromarray(rgb)
    grid = rgb if rgb.shape[:2] == (rows * size, cols * size) else np.asarray(
        pil.resize((cols * size, rows * size), resample=Image.Resampling.BICUBIC))
    thumbnail = np.asarray(pil.resize((size, size), resample=Image.Resampling.BICUBIC))
    return [thumbnail] + [grid[r * size:(r + 1) * size, c * size:(c + 1) * size]
                          for r in range(rows) for c in range(cols)]


def preprocess_tiles(images, size: int, max_tiles: int = 1, *, sample_ids=None) -> tuple[np.ndarray, list[int]]:
    """(pixel_values (T, 3, size, size) of every image's tiles in order, tiles per image) (`tile`, `preprocess`)."""
    tiles, counts = [], []
    for i, image in enumerate(images):
        parts = tile(image, size, max_tiles, None if sample_ids is None else sample_ids[i])
        tiles += parts
        counts.append(len(parts))
    return preprocess(tiles, size), counts
