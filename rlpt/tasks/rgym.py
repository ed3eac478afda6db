"""reasoning-gym adapter: each usable generator is domain 'rg/<name>', its curriculum levels spread over
up to five tiers, scored strictly (pass only at the scorer's full 1.0, never its substring partial credit).

Item i of a reasoning-gym dataset is drawn from Random(seed + i), so all items come from ONE dataset seed
and a task's item index comes from `item_index(seed, attempt)`: train seeds (< EVAL_SEED_START) and eval
seeds map to disjoint index ranges (16M train and 4M eval items per tier, all indices below 2**32).
"""

import contextlib
import dataclasses
import functools
import io
import json
import re

from rlpt.rewards.guard import MAX_RESPONSE_CHARS, final_answer
from rlpt.rewards.isolated import run_isolated
from rlpt.rewards.verdict import Verdict
from rlpt.tasks.base import EVAL_SEED_START, MAX_ATTEMPTS, Domain

RG_VERSION = "0.1.25"
DATASET_SEED = 1_000_003
VIRTUAL_SIZE = 1 << 40
MAX_TIERS = 5
# A cold worker imports reasoning-gym and sympy first (seconds on a busy machine); the alarm inside the
# worker bounds the scoring itself, the outer timeout kills what an alarm cannot interrupt (C bigints).
SCORE_TIMEOUT_S = 120.0
SCORE_ALARM_S = 5

EXCLUDED = {
    "codeio": "executes dataset code in-process at generation (and prints from it)",
    "composite": "a container of other datasets, not a generator",
    "game_of_life_halting": "scorer pays 1.0 for any non-empty answer when the gold is truthy",
    "acre": "precomputes items in proportion to the dataset size (index-bounded)",
    "gsm_symbolic": "precomputes a template list of length size (index-bounded)",
    "list_functions": "precomputes a template list of length size (index-bounded)",
    "word_ladder": "index-bounded (size <= 20000)",
    "boxnet": "items carry no reference answer (any valid plan scores), so there is no gold for SFT or oracles",
    "rush_hour": "items carry no reference answer (any valid move list scores)",
    "propositional_logic": "any entailed formula scores and premises are often inconsistent: the answers of "
    "4 other items all passed one level-4 item",
    "polynomial_equations": "generation took ~0.6 s per item even at level 0 (sympy)",
    "puzzle24": "generation took ~0.5 s per item even at level 0; its scorer also ignores which numbers are used",
    "rubiks_cube": "generation took ~0.25 s per item at level 0; higher levels' example answers fail its scorer",
}
# Generators that print to stdout while generating (bf's Brainf*ck compiler prints a dot per pass).
_PRINTS = {"bf"}
# Items whose `answer` is None keep a reference solution in these metadata fields.
_GOLD_FIELDS = ("example_answer", "example_correct_answer", "possible_answer")
# Scorers that pass policy text to eval(): the answer may hold no call, power or repetition.
_LIST_EVAL = {"string_insertion", "spiral_matrix", "binary_matrix", "n_queens"}
# Scorers that pass policy text to sympy's parse_expr (an eval): plain maths only, scored in a worker
# process with a timeout (9**9**9 is plain maths too).
_SYMPY_EVAL = {
    "simple_integration",
    "intermediate_integration",
    "polynomial_multiplication",
    "countdown",
}
_SAFE_MATH = re.compile(r"[0-9A-Za-z+\-*/^()., =\n]{0,6000}")
_POWER_BOMB = re.compile(r"(\*\*|\^)\s*\(?\s*\w+\s*\)?\s*(\*\*|\^)|(\*\*|\^)\s*\(?\s*\d{4,}")
_MATH_NAMES = {
    "sin",
    "cos",
    "tan",
    "exp",
    "log",
    "sqrt",
    "pi",
    "E",
    "I",
    "C",
    "atan",
    "asin",
    "acos",
    "sinh",
    "cosh",
    "tanh",
    "ln",
}
# (first, last) curriculum level generated online: levels outside took over ~60 ms per item on the 2-core
# reference machine (sokoban's level 0 took 40 s), fail the library's own scorer, or have no eval items.
LEVEL_RANGE = {
    "advanced_geometry": (0, 0),
    "bf": (0, 0),
    "countdown": (0, 0),
    "futoshiki": (0, 0),
    "game_of_life": (0, 0),
    "intermediate_integration": (0, 0),
    "jugs": (0, 0),
    "kakurasu": (0, 3),
    "mahjong_puzzle": (0, 2),
    "maze": (0, 1),
    "n_queens": (0, 3),
    "polynomial_multiplication": (0, 0),
    "pool_matrix": (0, 2),
    "sokoban": (3, 6),
    # Level 0 has 6 distinct items (3 disks, 3 pegs), all in the train split: no eval task exists.
    "tower_of_hanoi": (1, 3),
    "zebra_puzzles": (0, 1),
}


@functools.cache
def _dataset(name: str, level: int | None):
    import reasoning_gym  # noqa: F401  (registers the generators)
    from reasoning_gym.factory import DATASETS, create_curriculum

    from rlpt.tasks.rgym_fixes import REPLACEMENTS  # on use (start-up: reasoning_gym/PIL)

    cls, config_cls = DATASETS[name]
    cls = REPLACEMENTS.get(name, cls)
    if level is None:
        config = config_cls(seed=DATASET_SEED, size=VIRTUAL_SIZE)
    else:
        curriculum = create_curriculum(name)
        curriculum.set_global_level(level)
        config = curriculum.generate_configuration({"seed": DATASET_SEED, "size": VIRTUAL_SIZE})
    return cls(config=config)


def _levels(name: str) -> list[int | None]:
    """Curriculum levels whose configuration validates, within LEVEL_RANGE; [None] without a curriculum."""
    from reasoning_gym.factory import create_curriculum, has_curriculum

    if not has_curriculum(name):
        return [None]
    n = max(len(a.levels) for a in create_curriculum(name).attributes.values())
    first, last = LEVEL_RANGE.get(name, (0, n - 1))
    ok = []
    for level in range(first, min(n, last + 1)):
        curriculum = create_curriculum(name)
        curriculum.set_global_level(level)
        try:
            config = curriculum.generate_configuration({"seed": DATASET_SEED, "size": VIRTUAL_SIZE})
            if hasattr(config, "validate"):
                config.validate()
        except (AssertionError, ValueError, TypeError):
            continue
        ok.append(level)
    return ok


def _tier_levels(levels: list) -> dict[int, int | None]:
    """Spread the valid levels over up to MAX_TIERS tiers, first and last level included."""
    n = min(len(levels), MAX_TIERS)
    if n == 1:
        return {1: levels[0]}
    return {t: levels[round((t - 1) * (len(levels) - 1) / (n - 1))] for t in range(1, n + 1)}


def _score_in_worker(name: str, level, answer: str, entry: dict) -> float | None:
    """The dataset's score, or None when its scorer ran past SCORE_ALARM_S (recorded as a timeout)."""
    import signal

    import sympy  # noqa: F401  (imported before the alarm: a cold sympy import must not count as scoring)

    dataset = _dataset(name, level)

    def alarm(signum, frame):
        raise TimeoutError(f"{name} scorer ran past {SCORE_ALARM_S} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(SCORE_ALARM_S)
    try:
        return float(dataset.score_answer(answer, entry))
    except TimeoutError:
        return None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# Some generators seed numpy with dataset seed + index, which must stay below 2**32: train seeds fold onto
# TRAIN_ITEMS item slots and eval seeds onto EVAL_ITEMS slots above them, MAX_ATTEMPTS indices per slot.
TRAIN_ITEMS = 16_000_000
EVAL_ITEMS = 4_000_000
assert DATASET_SEED + (TRAIN_ITEMS + EVAL_ITEMS) * MAX_ATTEMPTS < 2**32


def item_index(seed: int, attempt: int) -> int:
    """Item index of (seed, attempt): train and eval seeds map to disjoint index ranges below 2**32."""
    if seed < EVAL_SEED_START:
        return (seed % TRAIN_ITEMS) * MAX_ATTEMPTS + attempt
    return (TRAIN_ITEMS + (seed - EVAL_SEED_START) % EVAL_ITEMS) * MAX_ATTEMPTS + attempt


@dataclasses.dataclass(frozen=True)
class IndexedDomain(Domain):
    """A Domain whose maker receives an item index instead of a random stream."""

    def rng(self, seed: int, tier: int, attempt: int) -> int:
        return item_index(seed, attempt)


def _make_fns(name: str, tier_levels: dict):
    from rlpt.tasks.rgym_fixes import ITEM_FILTERS  # on use (start-up: reasoning_gym/PIL)

    reject = ITEM_FILTERS.get(name)

    def make(index: int, tier: int):
        level = tier_levels[tier]
        try:
            if name in _PRINTS:
                with contextlib.redirect_stdout(io.StringIO()):
                    item = _dataset(name, level)[index]
            else:
                item = _dataset(name, level)[index]
        except Exception:  # third-party generators fail on some draws ("Failed to generate a capture
            return None, {}  # problem"): a failed draw is re-drawn, it must not take the registry down
        gold = _gold(item)
        if gold is None or not gold.strip() or (reject is not None and reject(item)):
            return None, {}
        if len(gold) > MAX_RESPONSE_CHARS // 2:  # e.g. tower_of_hanoi with 13 disks: a reply the guard refuses
            return None, {}
        entry = {"question": item["question"], "answer": item["answer"], "metadata": item.get("metadata", {})}
        meta = {"answer": gold, "rg_entry": entry, "rg_level": level}
        # A reference solution taken from metadata is not always accepted by the library's own scorer
        # (graph_color): check those; plain `answer` golds pass (tested per domain and tier).
        if item["answer"] is None and _score(name, level, gold, entry)[0] < 1.0:
            return None, {}
        return item["question"], meta

    def check(task, response: str) -> Verdict:
        got = final_answer(response)
        if not got:
            return Verdict(0.0, False, {"got": None})
        raw, why = _score(name, task.meta["rg_level"], got, task.meta["rg_entry"])
        ok = raw >= 1.0
        return Verdict(1.0 if ok else 0.0, ok, {"rg_score": raw, "got": got[:200], **({"why": why} if why else {})})

    return make, check


def _gold(item: dict) -> str | None:
    if item["answer"] is not None:
        return str(item["answer"])
    for field in _GOLD_FIELDS:
        value = item.get("metadata", {}).get(field)
        if value is not None:
            return value if isinstance(value, str) else json.dumps(value)
    return None


def _score(name: str, level, answer: str, entry: dict) -> tuple[float, str | None]:
    from rlpt.tasks.rgym_fixes import ANSWER_FORMATS, STRICT_SCORES  # on use (start-up: reasoning_gym/PIL)

    if name in ANSWER_FORMATS and not ANSWER_FORMATS[name].fullmatch(answer):
        return 0.0, "answer is not in the format the question asks for"
    if name in STRICT_SCORES:
        return STRICT_SCORES[name](answer, entry), None
    if name in _LIST_EVAL and re.search(r"[()*@]", answer):
        return 0.0, "answer holds ( ) * or @, which this scorer would evaluate"
    if name in _SYMPY_EVAL:
        names = set(re.findall(r"[A-Za-z_]+", answer))
        if not _SAFE_MATH.fullmatch(answer) or any(len(n) > 1 and n not in _MATH_NAMES for n in names):
            return 0.0, "answer is not plain maths"
        if _POWER_BOMB.search(answer):
            return 0.0, "answer holds a chained or huge power"
        done, value = run_isolated(_score_in_worker, name, level, answer, entry, timeout_s=SCORE_TIMEOUT_S)
        if not done:
            return 0.0, f"scorer failed: {value}"
        if value is None:
            return 0.0, "scorer timed out"
        return value, None
    try:
        return float(_dataset(name, level).score_answer(answer, entry)), None
    except Exception as err:  # third-party scorer on untrusted text: a crash is a failed answer, not ours
        return 0.0, f"scorer raised {type(err).__name__}"


def domains() -> list[Domain]:
    import reasoning_gym  # noqa: F401
    from reasoning_gym.factory import DATASETS

    out = []
    for name in sorted(DATASETS):
        if name in EXCLUDED:
            continue
        levels = _levels(name)
        if not levels:
            continue
        tier_levels = _tier_levels(levels)
        make, check = _make_fns(name, tier_levels)
        out.append(
            IndexedDomain(
                name=f"rg/{name}",
                tiers=tuple(tier_levels),
                make=make,
                check=check,
                source=f"reasoning-gym {RG_VERSION}: {name}",
                verifier="rg_strict",
                description=f"levels {list(tier_levels.values())} as tiers 1..{len(tier_levels)}",
            )
        )
    return out


def register_all(register) -> None:
    for domain in domains():
        register(domain)
