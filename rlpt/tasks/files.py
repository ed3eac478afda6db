"""RL prompt files: a JSONL file of prompts with verifier specs becomes a registered Domain named file/<stem>.

One row per line (docs/rl_data.md):
  {"prompt": "text"} or {"messages": [{"role": ..., "content": ...}, ...]}   what the policy sees
  "answer": gold text (the SFT demonstration; the answer of exact / numeric / math specs that give none)
  "verifier": a spec (rlpt.tasks.spec; default {"type": "exact"} on the row's answer)
  "id" (string or integer), "difficulty" or "tier" (integer >= 0, default 0), "meta" (an object, kept as is)
Every row is checked when the file loads; the first problem raises FileTaskError naming file:line.

Rows are split into train and eval by the content hash of their prompt (rlpt.tasks.base.split_of_prompt; a
chat prompt hashes its canonical JSON), so held-out evaluation on eval seeds never sees a training row. The
row a (seed, tier) draws is uniform over that tier's rows of the seed's split, from Domain.rng(seed, tier, 0).
"""

import dataclasses
import hashlib
import json
import os
import re

from rlpt.rewards.verdict import Verdict
from rlpt.tasks.base import Domain, Task, split_of_prompt, split_of_seed
from rlpt.tasks.registry import get_domain, list_domains, register
from rlpt.tasks.spec import SpecError, check_spec, judge_names, parse_spec

PREFIX = "file/"
ROW_KEYS = {"prompt", "messages", "answer", "verifier", "id", "difficulty", "tier", "meta"}
ROLES = ("system", "user", "assistant", "tool")
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


class FileTaskError(ValueError):
    """A bad RL prompt file; the message names the file and line."""


@dataclasses.dataclass(frozen=True)
class FileRow:
    """One checked row. prompt: text, or a tuple of {"role", "content"} dicts; key: the text its split hashes."""

    line: int
    id: str
    prompt: str | tuple
    key: str
    tier: int
    answer: str | None
    verifier: dict
    meta: dict


def prompt_key(prompt) -> str:
    """The text a prompt's split is hashed from: the text itself, or the messages' canonical JSON."""
    if isinstance(prompt, str):
        return prompt
    return json.dumps([{"role": m["role"], "content": m["content"]} for m in prompt], ensure_ascii=False,
                      sort_keys=True, separators=(",", ":"))


def _messages(value) -> tuple:
    if not isinstance(value, list) or not value:
        raise ValueError(f"'messages' must be a non-empty list of role/content objects, got {value!r}"[:300])
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or set(m) != {"role", "content"}:
            raise ValueError(f"messages[{i}] must be an object with exactly 'role' and 'content', got {m!r}"[:300])
        if m["role"] not in ROLES or not isinstance(m["content"], str):
            raise ValueError(f"messages[{i}]: role must be one of {list(ROLES)} and content a string, got {m!r}"[:300])
        out.append({"role": m["role"], "content": m["content"]})
    if out[-1]["role"] == "assistant":
        raise ValueError("the last message is the assistant's: a prompt ends before the turn the policy writes")
    if not any(m["role"] == "user" and m["content"].strip() for m in out):
        raise ValueError("'messages' hold no non-empty user message")
    return tuple(out)


def _row(rec, line: int) -> FileRow:
    """One row checked; raises ValueError saying what is wrong (the caller adds file:line)."""
    if not isinstance(rec, dict):
        raise ValueError(f"expected a JSON object, got {type(rec).__name__}")
    extra = sorted(set(rec) - ROW_KEYS)
    if extra:
        raise ValueError(f"unknown keys {extra}; a row takes {sorted(ROW_KEYS)}")
    if ("prompt" in rec) == ("messages" in rec):
        raise ValueError("a row needs exactly one of 'prompt' (text) and 'messages' (a chat)")
    if "prompt" in rec:
        prompt = rec["prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(f"'prompt' must be a non-empty string, got {prompt!r}"[:300])
    else:
        prompt = _messages(rec["messages"])
    if "difficulty" in rec and "tier" in rec and rec["difficulty"] != rec["tier"]:
        raise ValueError(f"'difficulty'={rec['difficulty']!r} and 'tier'={rec['tier']!r} disagree; give one")
    tier = rec.get("tier", rec.get("difficulty", 0))
    if isinstance(tier, bool) or not isinstance(tier, int) or tier < 0:
        raise ValueError(f"'difficulty'/'tier' must be an integer >= 0, got {tier!r}")
    rid = rec.get("id", f"line{line}")
    if isinstance(rid, bool) or not isinstance(rid, (str, int)) or rid == "":
        raise ValueError(f"'id' must be a non-empty string or an integer, got {rid!r}")
    answer = rec.get("answer")
    if answer is not None:
        if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
            raise ValueError(f"'answer' must be a string or a number, got {type(answer).__name__}")
        answer = answer if isinstance(answer, str) else repr(answer)
    if "verifier" not in rec and answer is None:
        raise ValueError("a row needs an 'answer' or a 'verifier' (without one there is nothing to score against)")
    meta = rec.get("meta", {})
    if not isinstance(meta, dict):
        raise ValueError(f"'meta' must be an object, got {type(meta).__name__}")
    try:
        spec = parse_spec(rec.get("verifier", {"type": "exact"}), answer)
    except SpecError as err:
        raise ValueError(f"bad 'verifier': {err}") from None
    return FileRow(line, str(rid), prompt, prompt_key(prompt), tier, answer, spec, meta)


def load_rows(path: str) -> list[FileRow]:
    """Every row of an RL prompt file, checked; FileTaskError names file:line of the first problem."""
    if not os.path.isfile(path):
        raise FileTaskError(f"{path}: RL prompt file not found")
    rows, seen = [], {}
    with open(path, "rb") as f:
        for line, raw in enumerate(f, start=1):
            where = f"{path}:{line}"
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise FileTaskError(f"{where}: not UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1})") from None
            if not text.strip():
                continue
            try:
                rec = json.loads(text)
            except json.JSONDecodeError as e:
                raise FileTaskError(f"{where}: invalid JSON ({e.msg} at column {e.colno})") from None
            try:
                row = _row(rec, line)
            except ValueError as err:
                raise FileTaskError(f"{where}: {err}") from None
            if row.id in seen:
                raise FileTaskError(f"{where}: id {row.id!r} was already used on line {seen[row.id]}")
            seen[row.id] = line
            rows.append(row)
    if not rows:
        raise FileTaskError(f"{path}: no rows (an RL prompt file needs at least one)")
    return rows


@dataclasses.dataclass(frozen=True)
class FileDomain(Domain):
    """A Domain over the rows of one file. `rows[(tier, split)]` holds the rows of that tier and split; the
    maker receives (split, rng) from `rng` and draws one of them, so every attempt lands in the right split."""

    path: str = ""
    digest: str = ""
    rows: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def rng(self, seed: int, tier: int, attempt: int):
        return split_of_seed(seed), super().rng(seed, tier, attempt)

    def judges(self) -> list[str]:
        """Judge names this file's verifier specs need (register them before a run)."""
        return judge_names(r.verifier for rows in self.rows.values() for r in rows)


def _make(name: str, path: str, rows: dict):
    def make(draw, tier: int):
        split, rng = draw
        pool = rows.get((tier, split), [])
        if not pool:
            other = len(rows.get((tier, "train" if split == "eval" else "eval"), []))
            raise ValueError(f"domain {name!r} ({path}): tier {tier} has no {split} rows ({other} rows of that tier "
                             "hash into the other split, which holds ~90% of distinct prompts for train, ~10% for "
                             "eval); add rows to that tier or merge it with another")
        row = pool[rng.randrange(len(pool))]
        meta = {"answer": row.answer, "verifier": row.verifier, "row_id": row.id, "line": row.line,
                "split_key": row.key, "file": path}
        if row.meta:
            meta["row_meta"] = row.meta
        return row.prompt, meta

    return make


def _check(task: Task, response: str) -> Verdict:
    return check_spec(task.meta["verifier"], response, task.prompt)


def domain_name(path: str) -> str:
    """file/<stem>: the file name without its extension, characters outside [A-Za-z0-9_.-] as '_'."""
    stem = os.path.basename(path)
    stem = stem.rsplit(".", 1)[0] if "." in stem.lstrip(".") else stem
    return PREFIX + (_NAME_CHARS.sub("_", stem) or "_")


def file_domain(path: str) -> FileDomain:
    """The (unregistered) domain of one RL prompt file."""
    rows = load_rows(path)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    pools: dict = {}
    for row in rows:
        pools.setdefault((row.tier, split_of_prompt(row.key)), []).append(row)
    name, path = domain_name(path), os.path.abspath(path)
    kinds = sorted({r.verifier["type"] for r in rows})
    return FileDomain(name=name, tiers=tuple(sorted({r.tier for r in rows})), make=_make(name, path, pools),
                      check=_check, source=f"file:{path}", verifier="spec:" + ",".join(kinds),
                      description=f"{len(rows)} rows from {path}", split_on="split_key", path=path, digest=digest,
                      rows=pools)


def register_file(path: str) -> str:
    """Register the domain of an RL prompt file (once per process) and return its name.

    Loading the same unchanged file again returns the registered domain. A different file with the same stem,
    or this file changed since it was registered, raises: domain names are what checkpoints and logs record.
    """

    dom = file_domain(path)
    if dom.name not in list_domains():
        register(dom)
        return dom.name
    old = get_domain(dom.name)
    if not isinstance(old, FileDomain) or old.path != dom.path:
        raise FileTaskError(f"{path}: its domain name {dom.name!r} is already taken by {old.source}; "
                            "rename one of the files (the name is file/<file stem>)")
    if old.digest != dom.digest:
        raise FileTaskError(f"{path}: the file changed since it was registered as {dom.name!r} in this process; "
                            "restart to load the new contents")
    return dom.name


def file_sources(data_cfg) -> list[tuple[str, float]]:
    """(domain name, weight) of each `kind: rl_jsonl` source of a DataConfig, registering the files."""
    out = []
    for key in sorted(data_cfg.sources):
        src = data_cfg.sources[key]
        if src.kind != "rl_jsonl":
            continue
        if not src.path:
            raise FileTaskError(f"data.sources.{key}.path is empty: set data.path=<file.jsonl> (data=rl_jsonl)")
        out.append((register_file(src.path), float(src.weight)))
    return out


def demonstrations(path: str, tok) -> list[tuple[list[int], list[int], int]]:
    """SFT examples (ids, completion mask, tier) from the train-split rows of an RL prompt file that have an
    'answer' (eval-split rows stay held out); raises when none has one."""
    from rlpt.rollout.format import completion_ids, prompt_ids  # on use (start-up: PIL)

    rows = load_rows(path)
    out = []
    for row in rows:
        if row.answer is None or split_of_prompt(row.key) != "train":
            continue
        p, c = prompt_ids(tok, row.prompt), completion_ids(tok, row.answer)
        out.append((p + c, [0] * len(p) + [1] * len(c), row.tier))
    if not out:
        raise FileTaskError(f"{path}: no train-split row has an 'answer', so SFT has no demonstration to learn "
                            f"(of {len(rows)} rows)")
    return out


def require_answers(names) -> None:
    """Raise unless every train-split row of the file domains among `names` has an 'answer' (SFT on tasks
    uses the gold answer as the completion)."""

    for name in names:
        dom = get_domain(name)
        if not isinstance(dom, FileDomain):
            continue
        missing = sorted(r.line for (_, split), rows in dom.rows.items() if split == "train" for r in rows
                         if r.answer is None)
        if missing:
            raise FileTaskError(f"{dom.path}:{missing[0]}: no 'answer', so domain {name!r} cannot give SFT "
                                f"demonstrations ({len(missing)} train rows lack one); add answers or leave the "
                                "file out of SFT")


def needed_judges(names) -> list[str]:
    """Judge names the verifier specs of the file domains among `names` score with, in first-seen order: each
    must be registered (rlpt.rewards.register_judge) before the run, or its rows score 0 with the error logged."""

    found = [j for n in names if isinstance(get_domain(n), FileDomain) for j in get_domain(n).judges()]
    return list(dict.fromkeys(found))


def check_prompt_lengths(names, tok, limit: int) -> None:
    """Raise naming file:line of the longest prompt of any file domain among `names` that renders (chat
    template included, rlpt.rollout.format.prompt_ids) to more than `limit` tokens (rl.rollout.max_prompt_len)."""
    from rlpt.rollout.format import prompt_ids  # on use (start-up: PIL)

    for name in names:
        dom = get_domain(name)
        if not isinstance(dom, FileDomain):
            continue
        rows = [r for pool in dom.rows.values() for r in pool]
        n, line = max((len(prompt_ids(tok, r.prompt)), r.line) for r in rows)
        if n > limit:
            over = sum(len(prompt_ids(tok, r.prompt)) > limit for r in rows)
            raise FileTaskError(f"{dom.path}:{line}: the prompt renders to {n} tokens > rl.rollout.max_prompt_len="
                                f"{limit} ({over} of {len(rows)} rows are over); raise the limit or shorten them")
