"""Image domains: bar and line charts, ARC-style grids and coloured shapes drawn as small RGB arrays, strict verifiers.

A task's meta['images'] is a list of (H, W, 3) uint8 arrays and its prompt holds one IMAGE_TOKEN per image, in
order. Images are IMAGE_SIZE pixels square (16 patches of 8x8 for the tiny VLM), drawn without anti-aliasing in
solid colours so every feature is readable at that size; no text is rendered. Prompts repeat across tasks, so the
split hashes meta['spec'], canonical JSON of what the image shows (bar heights, grid cells, shape positions; not
jitter such as distractor colours): every question about one picture falls in the same split. meta['query'] holds
the question's parameters.
"""

import json

import numpy as np
from PIL import Image, ImageDraw

from rlpt.models.image_processing import IMAGE_TOKEN, PIL_MODES, to_rgb_array  # noqa: F401  (re-exported)
from rlpt.rewards.guard import final_answer
from rlpt.rewards.verdict import Verdict
from rlpt.rewards.verifiers import register_verifier
from rlpt.tasks.native.common import domain

IMAGE_SIZE = 32
GRID_WALK_ENV = "rlpt/GridWalk-v0"
TIERS = (1, 2, 3)
BACKGROUND = (255, 255, 255)
AXIS = (0, 0, 0)
GRID_LINE = (215, 215, 215)
UNIT = 4  # pixels per unit of vision/bar_value; its grid lines sit every UNIT rows above the axis
COLORS = {
    "red": (220, 30, 30),
    "blue": (30, 70, 220),
    "green": (30, 160, 50),
    "yellow": (240, 200, 0),
    "purple": (140, 50, 180),
    "orange": (250, 130, 20),
}
# ARC's ten-colour palette, in its order (0 = black ... 9 = maroon).
ARC_COLORS = {
    "black": (0, 0, 0),
    "blue": (0, 116, 217),
    "red": (255, 65, 54),
    "green": (46, 204, 64),
    "yellow": (255, 220, 0),
    "gray": (170, 170, 170),
    "magenta": (240, 18, 190),
    "orange": (255, 133, 27),
    "azure": (127, 219, 255),
    "maroon": (135, 12, 37),
}


def validate_image(image, sample_id) -> np.ndarray:
    """`image` as a contiguous (H, W, 3) uint8 RGB array; a corrupt or unsupported one raises a ValueError naming
    `sample_id` (rlpt.models.image_processing.to_rgb_array: the vision tower's preprocessing reads images the same
    way)."""
    return np.ascontiguousarray(to_rgb_array(image, sample_id))


def validate_sample(prompt: str, images, sample_id) -> list[np.ndarray]:
    """The images of one sample, validated; raises ValueError naming `sample_id` unless the prompt holds exactly
    one IMAGE_TOKEN per image."""
    if not isinstance(images, list | tuple):
        raise ValueError(f"sample {sample_id!r}: images is {type(images).__name__}, expected a list")
    if prompt.count(IMAGE_TOKEN) != len(images):
        raise ValueError(f"sample {sample_id!r}: prompt has {prompt.count(IMAGE_TOKEN)} {IMAGE_TOKEN} placeholders "
                         f"for {len(images)} images")
    return [validate_image(image, sample_id) for image in images]


def _task(name: str, canvas: np.ndarray, question: str, answer: str, spec, query: dict) -> tuple[str, dict]:
    """(prompt, meta) of a one-image task; meta['spec'] is `spec` (what the image shows) as the canonical JSON the
    split hashes. The image is read-only: a consumer that normalises in place must not change the task."""
    spec_text = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    prompt = f"{IMAGE_TOKEN}\n{question}"
    images = [np.array(img) for img in validate_sample(prompt, [canvas], f"{name} {spec_text} {query}")]
    for img in images:
        img.setflags(write=False)
    return prompt, {"answer": answer, "images": images, "spec": spec_text, "query": query}


def _canvas() -> np.ndarray:
    return np.full((IMAGE_SIZE, IMAGE_SIZE, 3), BACKGROUND, np.uint8)  # (H, W, 3)


def _bar_columns(n: int) -> list[tuple[int, int]]:
    """[left, right) pixel columns of n bars spread evenly across the image, with gaps between them."""
    slot = IMAGE_SIZE // n
    start = (IMAGE_SIZE - n * slot) // 2
    return [(start + i * slot + 1, start + (i + 1) * slot - 1) for i in range(n)]


def bar_chart(heights: list[int], colors: list[tuple[int, int, int]], grid: int = 0) -> np.ndarray:
    """Bars of `heights` pixels standing on a black axis in the bottom row; light grid lines every `grid` rows
    above the axis (0: none). A bar of height h fills rows [IMAGE_SIZE-1-h, IMAGE_SIZE-1)."""
    img = _canvas()
    axis = IMAGE_SIZE - 1
    if grid:
        img[axis - grid:0:-grid] = GRID_LINE
    img[axis] = AXIS
    for (left, right), h, color in zip(_bar_columns(len(heights)), heights, colors, strict=True):
        img[axis - h:axis, left:right] = color
    return img


def _bar_colors(rng, n: int, tier: int) -> list:
    """One colour for every bar below tier 3; at tier 3 each bar draws its own (a distractor, not a cue)."""
    if tier < 3:
        return [COLORS["blue"]] * n
    return [COLORS[rng.choice(list(COLORS))] for _ in range(n)]


def _bar_value(rng, t):
    n, top = {1: (3, 5), 2: (4, 6), 3: (6, 7)}[t]
    heights = [rng.randint(1, top) for _ in range(n)]
    k = rng.randrange(n)
    img = bar_chart([h * UNIT for h in heights], _bar_colors(rng, n, t), grid=UNIT)
    question = (f"The grid lines are one unit apart. How many units tall is bar {k + 1}? "
                "Bars are numbered from 1 on the left. Answer with an integer.")
    return _task("vision/bar_value", img, question, str(heights[k]), heights, {"bar": k + 1})


def _extreme_values(rng, n: int, lo: int, hi: int, gap: int, ask: str) -> list[int]:
    """n values in [lo, hi] whose max (ask='max') or min beats every other value by at least `gap`."""
    while True:
        values = [rng.randint(lo, hi) for _ in range(n)]
        ranked = sorted(values, reverse=ask == "max")
        if abs(ranked[0] - ranked[1]) >= gap:
            return values


def _bar_extreme(rng, t):
    n, gap = {1: (3, 6), 2: (5, 4), 3: (6, 2)}[t]
    ask = "max" if t == 1 else rng.choice(["max", "min"])
    heights = _extreme_values(rng, n, 2, IMAGE_SIZE - 4, gap, ask)
    pick = max(heights) if ask == "max" else min(heights)
    img = bar_chart(heights, _bar_colors(rng, n, t))
    word = "tallest" if ask == "max" else "shortest"
    question = f"Which bar is the {word}? Bars are numbered from 1 on the left. Answer with its number."
    return _task("vision/bar_extreme", img, question, str(heights.index(pick) + 1), heights, {"ask": ask})


def line_points(values: list[int]) -> list[tuple[int, int]]:
    """(x, y) pixels of a line chart's points: evenly spaced columns, value v drawn v rows above row IMAGE_SIZE-3."""
    n = len(values)
    return [(round(2 + i * (IMAGE_SIZE - 5) / (n - 1)), IMAGE_SIZE - 3 - v) for i, v in enumerate(values)]


def _line_extreme(rng, t):
    n, gap = {1: (4, 6), 2: (6, 4), 3: (8, 2)}[t]
    ask = "max" if t == 1 else rng.choice(["max", "min"])
    values = _extreme_values(rng, n, 0, IMAGE_SIZE - 6, gap, ask)
    pick = max(values) if ask == "max" else min(values)
    image = Image.fromarray(_canvas())
    ImageDraw.Draw(image).line(line_points(values), fill=COLORS["blue"], width=1)
    word = "highest" if ask == "max" else "lowest"
    question = (f"The line chart has {n} points, numbered from 1 on the left. Which point is the {word}? "
                "Answer with its number.")
    return _task("vision/line_extreme", np.asarray(image), question, str(values.index(pick) + 1), values, {"ask": ask})


def _draw_shape(draw, kind: str, x: int, y: int, size: int, color) -> None:
    box = (x, y, x + size - 1, y + size - 1)
    if kind == "square":
        draw.rectangle(box, fill=color)
    else:
        draw.ellipse(box, fill=color)


SHAPE_CELL = 8  # vision/count_shapes puts at most one shape in each 8x8 cell (one patch)


def _count_shapes(rng, t):
    target = rng.choice(list(COLORS))
    others = [c for c in COLORS if c != target]
    if t == 1:
        count, distractors, kinds, sizes = rng.randint(1, 4), [], ["square"], (6, 6)
    elif t == 2:
        count, kinds, sizes = rng.randint(1, 5), ["square", "circle"], (5, 6)
        distractors = [rng.choice(others)] * rng.randint(1, 3)
    else:
        count, kinds, sizes = rng.randint(1, 7), ["square", "circle"], (4, 6)
        palette = rng.sample(others, rng.randint(2, 3))
        distractors = [rng.choice(palette) for _ in range(rng.randint(2, 6))]
    per_row = IMAGE_SIZE // SHAPE_CELL
    cells = rng.sample(range(per_row * per_row), count + len(distractors))
    image = Image.fromarray(_canvas())
    draw = ImageDraw.Draw(image)
    placed = []
    for cell, color in zip(cells, [target] * count + distractors, strict=True):
        kind, size = rng.choice(kinds), rng.randint(*sizes)
        x = (cell % per_row) * SHAPE_CELL + rng.randint(1, SHAPE_CELL - size)
        y = (cell // per_row) * SHAPE_CELL + rng.randint(1, SHAPE_CELL - size)
        _draw_shape(draw, kind, x, y, size, COLORS[color])
        placed.append([cell, color])
    question = f"How many {target} shapes are in the image? Answer with an integer."
    return _task("vision/count_shapes", np.asarray(image), question, str(count), sorted(placed), {"color": target})


def grid_image(cells: list[list[str]]) -> np.ndarray:
    """An ARC-style grid: each cell a square of its ARC colour, the grid centred on a white background."""
    n = len(cells)
    side = IMAGE_SIZE // n
    start = (IMAGE_SIZE - n * side) // 2
    img = _canvas()
    for r, row in enumerate(cells):
        for c, name in enumerate(row):
            y, x = start + r * side, start + c * side
            img[y:y + side, x:x + side] = ARC_COLORS[name]
    return img


def _grid(rng, t) -> tuple[int, list[str], list[list[str]]]:
    """(n, palette, cells): an n x n grid over the tier's first colours of ARC's palette."""
    n, k = {1: (3, 4), 2: (4, 6), 3: (6, 10)}[t]
    palette = list(ARC_COLORS)[1:k + 1] if k < len(ARC_COLORS) else list(ARC_COLORS)
    return n, palette, [[rng.choice(palette) for _ in range(n)] for _ in range(n)]


def _grid_cell(rng, t):
    n, palette, cells = _grid(rng, t)
    r, c = rng.randrange(n), rng.randrange(n)
    question = (f"The image shows a {n}x{n} grid of coloured cells. What colour is the cell in row {r + 1}, column "
                f"{c + 1}? Rows are numbered from 1 at the top, columns from 1 at the left. Answer with one of: "
                f"{', '.join(palette)}.")
    return _task("vision/grid_cell", grid_image(cells), question, cells[r][c], cells, {"row": r + 1, "col": c + 1})


def _grid_count(rng, t):
    n, palette, cells = _grid(rng, t)
    color = rng.choice(sorted({name for row in cells for name in row}))  # a colour present: the count is >= 1
    count = sum(row.count(color) for row in cells)
    question = f"The image shows a {n}x{n} grid of coloured cells. How many cells are {color}? Answer with an integer."
    return _task("vision/grid_count", grid_image(cells), question, str(count), cells, {"color": color})


def _apart(a, b) -> bool:
    """Two (x, y, size) boxes with at least one background pixel between them."""
    return a[0] + a[2] < b[0] or b[0] + b[2] < a[0] or a[1] + a[2] < b[1] or b[1] + b[2] < a[1]


def _spatial(rng, t):
    size, sep = {1: (6, 12), 2: (6, 10), 3: (4, 6)}[t]  # sep > size: the two shapes never touch
    relation = rng.choice(["left", "right"] if t == 1 else ["left", "right", "above", "below"])
    first, second, *others = rng.sample(list(COLORS), len(COLORS))
    hi = IMAGE_SIZE - 1 - size
    while True:
        # The relation's axis is apart by at least `sep` pixels, the other by at most a third of that.
        along, across = rng.randint(sep, hi - 1), rng.randint(-(sep // 3), sep // 3)
        bx, by = rng.randint(1, hi), rng.randint(1, hi)
        dx, dy = {"left": (-along, across), "right": (along, across),
                  "above": (across, -along), "below": (across, along)}[relation]
        a = (bx + dx, by + dy, size)
        if 1 <= a[0] <= hi and 1 <= a[1] <= hi:
            break
    boxes = [a, (bx, by, size)]
    colors = [first, second]
    for _ in range(rng.randint(2, 3) if t == 3 else 0):  # distractors in other colours
        while True:
            box = (rng.randint(1, hi), rng.randint(1, hi), size)
            if all(_apart(box, other) for other in boxes):
                break
        boxes.append(box)
        colors.append(rng.choice(others))
    image = Image.fromarray(_canvas())
    draw = ImageDraw.Draw(image)
    kinds = [rng.choice(["square", "circle"]) if t == 3 else "square" for _ in boxes]
    for (x, y, s), color, kind in zip(boxes, colors, kinds, strict=True):
        _draw_shape(draw, kind, x, y, s, COLORS[color])
    if t == 1:
        question = f"Is the {first} square left or right of the {second} square? Answer left or right."
    else:
        question = (f"Where is the {first} shape relative to the {second} shape? Answer with one word: left, right, "
                    "above or below.")
    spec = sorted([color, *box] for color, box in zip(colors, boxes))
    return _task("vision/spatial", np.asarray(image), question, relation, spec, {"first": first, "second": second})


MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
WALKER, GOAL = ARC_COLORS["red"], ARC_COLORS["green"]


def walk_image(n: int, pos: tuple[int, int], goal: tuple[int, int]) -> np.ndarray:
    """An n x n board of gray cells (one-pixel white gaps), the walker in red and the goal in green."""
    cells = [["gray"] * n for _ in range(n)]
    img = grid_image(cells)
    side = IMAGE_SIZE // n
    start = (IMAGE_SIZE - n * side) // 2
    for (r, c), color in ((goal, GOAL), (pos, WALKER)):
        y, x = start + r * side, start + c * side
        img[y + 1:y + side - 1, x + 1:x + side - 1] = color
    img[start:start + n * side:side, start:start + n * side] = BACKGROUND  # the gaps between rows
    img[start:start + n * side, start:start + n * side:side] = BACKGROUND  # and columns
    return img


def walk(n: int, pos: tuple[int, int], moves: list[str]) -> tuple[tuple[int, int] | None, str | None]:
    """(where the walker ends, None) after `moves`, or (None, why) for an unknown move or one off the board."""
    r, c = pos
    for m in moves:
        if m not in MOVES:
            return None, f"unknown move {m[:20]!r}"
        r, c = r + MOVES[m][0], c + MOVES[m][1]
        if not (0 <= r < n and 0 <= c < n):
            return None, f"move {m!r} leaves the board"
    return (r, c), None


def walk_question(n: int) -> str:
    return (f"The image shows a {n}x{n} board. Walk the red square to the green square. Moves: up, down, left, "
            "right. Answer with the moves separated by spaces.")


def _grid_walk(rng, t):
    n = {1: 3, 2: 4, 3: 5}[t]
    cells = [(r, c) for r in range(n) for c in range(n)]
    pos, goal = rng.sample(cells, 2)
    path = ["down" if goal[0] > pos[0] else "up"] * abs(goal[0] - pos[0])
    path += ["right" if goal[1] > pos[1] else "left"] * abs(goal[1] - pos[1])
    # what the picture shows, row by row (W walker, G goal): the split key, and its length grows with the tier
    spec = ["".join("W" if (r, c) == pos else "G" if (r, c) == goal else "." for c in range(n)) for r in range(n)]
    return _task("vision/grid_walk", walk_image(n, pos, goal), walk_question(n), " ".join(path), spec,
                 {"n": n, "start": list(pos), "goal": list(goal), "max_moves": 2 * len(path)})


@register_verifier("grid_walk")
def check_walk(task, response: str) -> Verdict:
    """The moves (words, any case, spaces or commas between) take the walker onto the goal without leaving the
    board, in at most meta['query']['max_moves'] moves."""
    q = task.meta["query"]
    got = final_answer(response)
    moves = [] if got is None else [m for m in got.lower().replace(",", " ").split() if m]
    if not moves or len(moves) > q["max_moves"]:
        return Verdict(0.0, False, {"moves": len(moves), "why": "no moves" if not moves else "too many moves"})
    end, why = walk(q["n"], tuple(q["start"]), moves)
    ok = end == tuple(q["goal"])
    return Verdict(float(ok), ok, {"moves": len(moves), "why": why or ("" if ok else "ends off the goal")})


def domains():
    num, word = "numeric", "normalised"
    vision = {
        "bar_value": (_bar_value, num, "height of bar k in grid units (3-6 bars, per-bar colours at tier 3)"),
        "bar_extreme": (_bar_extreme, num, "position of the tallest/shortest bar (3-6 bars, margins 6-2 px)"),
        "line_extreme": (_line_extreme, num, "position of the highest/lowest point of a line chart (4-8 points)"),
        "count_shapes": (_count_shapes, num, "how many shapes of a colour (distractor colours from tier 2)"),
        "grid_cell": (_grid_cell, word, "colour of cell (r, c) of an ARC-style grid (3x3 to 6x6, 4-10 colours)"),
        "grid_count": (_grid_count, num, "how many cells of an ARC-style grid have a colour"),
        "spatial": (_spatial, word, "is one shape left/right/above/below another (distractors at tier 3)"),
    }
    out = [domain(f"vision/{name}", make, verifier, description, tiers=TIERS, split_on="spec")
           for name, (make, verifier, description) in vision.items()]
    # multi-turn: rlpt/GridWalk-v0 shows the board after each move (an image observation per turn)
    out.append(domain("vision/grid_walk", _grid_walk, "grid_walk", "walk a red square to a green one on a 3x3 to "
                      "5x5 board seen as pixels (multi-turn: one move per turn, rlpt/GridWalk-v0)", tiers=TIERS,
                      split_on="spec", env_id=GRID_WALK_ENV))
    return out
