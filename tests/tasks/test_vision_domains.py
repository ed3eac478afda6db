"""vision/* domains: deterministic valid images, strict verifiers, a split on what the image shows, answers that can
be read back from the pixels, named errors for bad images, and oracle 1.0 / empty 0.0 through the eval suites."""

import io
import json

import numpy as np
import pytest
from PIL import Image

from rlpt.tasks import EVAL_SEED_START, get_domain, resolve, split_of_prompt
from rlpt.tasks.native.vision import (
    ARC_COLORS,
    BACKGROUND,
    COLORS,
    GRID_LINE,
    IMAGE_SIZE,
    IMAGE_TOKEN,
    UNIT,
    line_points,
    validate_image,
    validate_sample,
)

NAMES = resolve(["vision/*"])
SEEDS = range(30)
WORDS = {"vision/grid_cell": list(ARC_COLORS), "vision/spatial": ["left", "right", "above", "below"]}


def _tasks(name, seeds=SEEDS):
    domain = get_domain(name)
    return [domain.generate(seed, tier) for tier in domain.tiers for seed in seeds]


def test_domains_and_tiers():
    assert NAMES == ["vision/bar_extreme", "vision/bar_value", "vision/count_shapes", "vision/grid_cell",
                     "vision/grid_count", "vision/grid_walk", "vision/line_extreme", "vision/spatial"]
    for name in NAMES:
        domain = get_domain(name)
        assert domain.tiers == (1, 2, 3) and domain.split_on == "spec" and domain.description, name


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_valid_images_one_placeholder_each(name):
    domain = get_domain(name)
    for task in _tasks(name, range(10)):
        again = domain.generate(int(task.id.rsplit(":s", 1)[1]), task.difficulty)
        assert (again.prompt, again.meta["answer"], again.meta["spec"]) == (task.prompt, task.meta["answer"],
                                                                             task.meta["spec"])
        assert all(np.array_equal(a, b) for a, b in zip(again.meta["images"], task.meta["images"], strict=True))
        images = task.meta["images"]
        assert isinstance(images, list) and len(images) == task.prompt.count(IMAGE_TOKEN) == 1
        assert task.prompt.startswith(IMAGE_TOKEN + "\n") and task.prompt.isascii()
        for img in images:
            assert isinstance(img, np.ndarray) and img.shape == (IMAGE_SIZE, IMAGE_SIZE, 3) and img.dtype == np.uint8
            assert not img.flags.writeable
        assert 0 < len(task.meta["answer"]) <= (48 if name == "vision/grid_walk" else 7)  # a walk: several moves
        json.loads(task.meta["spec"])


@pytest.mark.parametrize("name", NAMES)
def test_tiers_grow_harder(name):
    """Higher tiers show more bars, points, cells or shapes (the spec's length) and no fewer colours."""
    def content(tier):
        tasks = [get_domain(name).generate(s, tier) for s in SEEDS]
        items = np.mean([len(json.loads(t.meta["spec"])) for t in tasks])
        colours = np.mean([len(np.unique(t.meta["images"][0].reshape(-1, 3), axis=0)) for t in tasks])
        return items, colours

    (i1, c1), (i2, c2), (i3, c3) = content(1), content(2), content(3)
    assert i1 <= i2 <= i3 and c1 <= c3 and (i1, c1) < (i3, c3), [(i1, c1), (i2, c2), (i3, c3)]


@pytest.mark.parametrize("name", NAMES)
def test_oracle_passes_wrong_hedged_and_empty_fail(name):
    domain = get_domain(name)
    for task in _tasks(name, range(10)):
        gold = task.meta["answer"]
        for good in (gold, f"<answer>{gold}</answer>", f" {gold}\n", gold.upper()):
            assert domain.verify(task, good).passed, good
        if name == "vision/grid_walk":  # the walk reversed: on the board, away from the goal
            back = {"up": "down", "down": "up", "left": "right", "right": "left"}
            wrong = [" ".join(back[m] for m in gold.split())]
        elif name in WORDS:
            wrong = [w for w in WORDS[name] if w != gold]
        else:
            wrong = [str(int(gold) + 1), str(int(gold) - 1)]
        for bad in ("", "<answer></answer>", f"{gold} or {wrong[0]}", f"{gold} {wrong[0]}", wrong[0],
                    f"<answer>{gold}</answer><answer>{wrong[0]}</answer>", IMAGE_TOKEN, task.prompt):
            verdict = domain.verify(task, bad)
            assert verdict.score == 0.0 and not verdict.passed, (task.id, bad)


@pytest.mark.parametrize("name", NAMES)
def test_split_hashes_what_the_image_shows(name):
    domain = get_domain(name)
    train = [domain.generate(s, 1) for s in range(150)]
    evals = [domain.generate(s, 1) for s in range(EVAL_SEED_START, EVAL_SEED_START + 30)]
    train_specs, eval_specs = {t.meta["spec"] for t in train}, {t.meta["spec"] for t in evals}
    assert train_specs and eval_specs and not train_specs & eval_specs
    assert all(split_of_prompt(t.meta["spec"]) == t.meta["split"] for t in train + evals)
    # Why the prompt cannot be the split key: the same question text shows different pictures.
    assert len({t.prompt for t in train}) < len(train_specs)


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, stop) of the runs of True in a 1-D mask."""
    edges = np.diff(np.concatenate([[0], mask.astype(int), [0]]))
    return list(zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)))


def _bar_heights(img: np.ndarray) -> list[int]:
    """Bar heights in pixels read from the image: bars are the ink runs just above the axis (bottom row)."""
    ink = ~(np.all(img == BACKGROUND, axis=-1) | np.all(img == GRID_LINE, axis=-1))  # (H, W)
    ink[-1] = False  # the axis
    return [int(ink[:, (a + b) // 2].sum()) for a, b in _runs(ink[-2])]


def _read_bar_value(task):
    heights = _bar_heights(task.meta["images"][0])
    assert len(heights) == {1: 3, 2: 4, 3: 6}[task.difficulty] and all(h % UNIT == 0 for h in heights)
    return str(heights[task.meta["query"]["bar"] - 1] // UNIT)


def _read_bar_extreme(task):
    heights = _bar_heights(task.meta["images"][0])
    pick = max(heights) if task.meta["query"]["ask"] == "max" else min(heights)
    assert heights.count(pick) == 1
    return str(heights.index(pick) + 1)


def _read_line_extreme(task):
    img = task.meta["images"][0]
    rows, cols = np.nonzero(~np.all(img == BACKGROUND, axis=-1))
    row = rows.min() if task.meta["query"]["ask"] == "max" else rows.max()
    xs = [x for x, _ in line_points(json.loads(task.meta["spec"]))]
    col = cols[rows == row].mean()
    return str(int(np.argmin([abs(x - col) for x in xs])) + 1)


def _read_count_shapes(task):
    img, color = task.meta["images"][0], COLORS[task.meta["query"]["color"]]
    hit = np.all(img == color, axis=-1).reshape(4, IMAGE_SIZE // 4, 4, IMAGE_SIZE // 4)  # (4 rows, 8, 4 cols, 8)
    return str(int(hit.any(axis=(1, 3)).sum()))


def _cell_colors(task) -> list[list[str]]:
    """Each cell's colour name read from its centre pixel; the grid size n comes from the prompt."""
    img = task.meta["images"][0]
    n = int(task.prompt.split("x", 1)[0].rsplit(" ", 1)[1])
    side = IMAGE_SIZE // n
    start = (IMAGE_SIZE - n * side) // 2
    by_rgb = {rgb: name for name, rgb in ARC_COLORS.items()}
    return [[by_rgb[tuple(img[start + r * side + side // 2, start + c * side + side // 2])] for c in range(n)]
            for r in range(n)]


def _read_grid_cell(task):
    return _cell_colors(task)[task.meta["query"]["row"] - 1][task.meta["query"]["col"] - 1]


def _read_grid_count(task):
    return str(sum(row.count(task.meta["query"]["color"]) for row in _cell_colors(task)))


def _read_spatial(task):
    img = task.meta["images"][0]
    (ya, xa), (yb, xb) = (np.argwhere(np.all(img == COLORS[task.meta["query"][k]], axis=-1)).mean(axis=0)
                          for k in ("first", "second"))
    dx, dy = xa - xb, ya - yb
    if abs(dx) > abs(dy):
        return "left" if dx < 0 else "right"
    return "above" if dy < 0 else "below"


def _read_grid_walk(task):
    """Find the red walker and the green goal cells in the picture; the moves down/up, then right/left."""
    img, n = task.meta["images"][0], task.meta["query"]["n"]
    side = IMAGE_SIZE // n
    start = (IMAGE_SIZE - n * side) // 2
    (wr, wc), (gr, gc) = ((np.argwhere(np.all(img == ARC_COLORS[c], axis=-1)).mean(axis=0) - start) // side
                          for c in ("red", "green"))
    moves = ["down" if gr > wr else "up"] * int(abs(gr - wr)) + ["right" if gc > wc else "left"] * int(abs(gc - wc))
    return " ".join(moves)


READERS = {"vision/grid_walk": _read_grid_walk, "vision/bar_value": _read_bar_value,
           "vision/bar_extreme": _read_bar_extreme,
           "vision/line_extreme": _read_line_extreme, "vision/count_shapes": _read_count_shapes,
           "vision/grid_cell": _read_grid_cell, "vision/grid_count": _read_grid_count,
           "vision/spatial": _read_spatial}


@pytest.mark.parametrize("name", NAMES)
def test_answer_can_be_read_from_the_pixels(name):
    """The gold answer recovered from the image array alone (a rendering bug would break the match)."""
    assert set(READERS) == set(NAMES)
    for task in _tasks(name, range(40)) + _tasks(name, range(EVAL_SEED_START, EVAL_SEED_START + 10)):
        assert READERS[name](task) == task.meta["answer"], (task.id, task.meta["spec"], task.meta["query"])


def _truncated_png() -> Image.Image:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buf, "PNG")
    return Image.open(io.BytesIO(buf.getvalue()[: len(buf.getvalue()) // 2]))


@pytest.mark.parametrize("image,reason", [
    (np.zeros((32, 32, 3), np.float32), "dtype float32"),
    (np.zeros((32, 32), np.uint8), r"shape \(32, 32\)"),
    (np.zeros((32, 32, 4), np.uint8), r"shape \(32, 32, 4\)"),
    (np.zeros((0, 32, 3), np.uint8), "zero size"),
    ([[0, 0, 0]], "list"),
    (b"\x89PNG", "bytes"),
    (None, "NoneType"),
    (Image.new("RGB", (0, 8)), "zero size"),
    (Image.new("F", (8, 8)), "unsupported image mode 'F'"),
    (Image.new("I;16", (8, 8)), "unsupported image mode 'I;16'"),
    (_truncated_png(), "corrupt image"),
])
def test_bad_images_are_named_errors(image, reason):
    with pytest.raises(ValueError, match=f"sample 'vision/x:t1:s7'.*{reason}"):
        validate_image(image, "vision/x:t1:s7")


def test_pil_images_of_any_supported_mode_become_rgb():
    rgb = np.random.default_rng(1).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    assert np.array_equal(validate_image(rgb, 0), rgb) and np.array_equal(validate_image(Image.fromarray(rgb), 0), rgb)
    gray = validate_image(Image.new("L", (7, 5), 90), 0)
    assert gray.shape == (5, 7, 3) and gray.dtype == np.uint8 and (gray == 90).all()
    clear = validate_image(Image.new("RGBA", (4, 4), (200, 0, 0, 0)), 0)
    assert (clear == BACKGROUND).all()  # transparent pixels read as the white background, not their hidden colour
    palette = Image.new("P", (3, 3), 0)
    palette.putpalette([10, 20, 30] * 256)
    assert (validate_image(palette, 0) == (10, 20, 30)).all()


def test_placeholders_must_match_the_images():
    img = np.zeros((4, 4, 3), np.uint8)
    assert len(validate_sample(f"{IMAGE_TOKEN}{IMAGE_TOKEN} which?", [img, img], "s1")) == 2
    for prompt, images in ((f"{IMAGE_TOKEN} which?", [img, img]), ("which?", [img]), (IMAGE_TOKEN, img)):
        with pytest.raises(ValueError, match="sample 's1'"):
            validate_sample(prompt, images, "s1")


@pytest.mark.parametrize("suite_name", ["domains:vision/*", "vision"])
def test_eval_suites_score_oracle_one_and_empty_zero(suite_name):
    from rlpt.eval.suites import LoadArgs, get_suite

    suite = get_suite(suite_name)
    tasks = suite.load(LoadArgs(per_domain=9))
    assert {t.domain for t in tasks} == set(NAMES) and {t.difficulty for t in tasks} == {1, 2, 3}
    assert all(t.meta["split"] == "eval" for t in tasks) and len({t.id for t in tasks}) == len(tasks)
    assert all(suite.verify(t, t.meta["answer"]).score == 1.0 for t in tasks)
    assert not any(suite.verify(t, "").passed for t in tasks)


def test_eval_cli_reports_per_domain_pass1(tmp_path):
    from rlpt.eval.__main__ import main

    for policy, want in (("oracle", 1.0), ("empty", 0.0)):
        line = main(["suite=domains:vision/*", f"policy={policy}", "per_domain=6", f"out={tmp_path / policy}"])
        assert line["pass1"] == want and line["n"] == 6 * len(NAMES)
        res = json.loads((tmp_path / policy / "results.json").read_text())
        assert {d: r["pass1"] for d, r in res["per_domain"].items()} == dict.fromkeys(NAMES, want)
