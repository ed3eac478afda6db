"""A real small checkpoint built offline: a byte-level BPE trained on the repository's own text, ChatML, random weights.

`build_checkpoint(folder)` writes an HF folder (config.json, model.safetensors, tokenizer.json,
tokenizer_config.json, generation_config.json, build_info.json) that `transformers` and `rlpt` both load. The
tokenizer is trained deterministically on README.md, docs/*.md and text rendered from rlpt's procedural task
domains, so a fresh checkout builds the same one with no download. Command line:

    python -m rlpt.pipeline.synthetic FOLDER [--size 100m|tiny] [--variant instruct|base] [--seed 0] [--dtype float32]
"""
import argparse
import functools
import hashlib
import json
import re
import time
from pathlib import Path

import tokenizers
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors, trainers

from rlpt.models import chat
from rlpt.models.config import ModelConfig
from rlpt.models.model import init_model
from rlpt.models.tokenizer import (
    BUILTIN_SPECIALS,
    GENERATION_CONFIG_FILE,
    TOKENIZER_FILE,
    Tokenizer,
    from_parts,
    with_builtin_protocol,
)
from rlpt.tasks import get_domain, resolve

# Shapes. "100m": ~102M parameters, Qwen2.5-0.5B made narrower (512) and shallower (8 layers) but keeping its
# 151,936-row vocabulary (so the LM head and logits weigh at the scale of real Qwen2 models: 76% of the parameters);
# "tiny": ~2.2M with a 32,768-row vocabulary, for tests.
SIZES = {
    "100m": ModelConfig(family="qwen2", vocab_size=151936, hidden_size=512, intermediate_size=1536, num_layers=8,
                        num_heads=8, num_kv_heads=2, head_dim=64, qkv_bias=True, tie_embeddings=True,
                        max_position_embeddings=2048, rope_theta=1000000.0),
    "tiny": ModelConfig(family="qwen2", vocab_size=32768, hidden_size=64, intermediate_size=176, num_layers=2,
                        num_heads=4, num_kv_heads=2, head_dim=16, qkv_bias=True, tie_embeddings=True,
                        max_position_embeddings=2048),
}
VARIANTS = ("instruct", "base")
SAVE_DTYPES = ("float32", "bfloat16")

# Tokenizer: BPE_VOCAB learned tokens (the 256 byte symbols included), then the added tokens, as Qwen2 orders them.
BPE_VOCAB = 32000
ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)
# Added but not special (as in Qwen2.5): one token each, kept by decode(skip_special_tokens=True).
TOOL_TOKENS = ("<tool_call>", "</tool_call>")
_ADDED_RE = re.compile("|".join(re.escape(t) for t in SPECIAL_TOKENS + TOOL_TOKENS))
# Qwen2's pre-tokenizer split: contractions, letter runs, single digits, punctuation runs, newlines, spaces.
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+")
# Task text in the corpus: every native domain except docqa (its prompts are ~70 KB documents), every tier,
# CORPUS_SEEDS train seeds each, the first CORPUS_CHAT_SEEDS rendered as chats (~3.5 MB with the docs; BPE
# training takes ~1.5 s on one core).
CORPUS_DOMAINS = ("arith/*", "algebra/*", "list/*", "str/*", "count/*", "date/*", "units/*", "logic/*", "code/*",
                  "shell/*", "extract/*", "tool/*")
CORPUS_SEEDS = 100
CORPUS_CHAT_SEEDS = 10

# Qwen2.5's ChatML template (system/user/assistant/tool turns, tools in the system turn, <tool_call> JSON), with a
# plain default system prompt and {% generation %} around assistant output: from after '<|im_start|>assistant\n'
# to <|im_end|> inclusive, not the newline after it. rlpt's encode_chat and transformers'
# return_assistant_tokens_mask (TRL's assistant_only_loss) then give the same completion-only masks.
CHAT_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>assistant\n' }}
        {%- generation %}
        {%- if message.content %}
            {{- message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls or [] %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {%- if message.content or not loop.first %}
                {{- '\n' }}
            {%- endif %}
            {{- '<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>' }}
        {%- endgeneration %}
        {{- '\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- elif message.role != "system" %}
        {{- raise_exception('unknown role: ' + message.role) }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""  # noqa: E501  (the template's lines are kept as Qwen2.5 writes them)


def repo_root() -> Path:
    """The source checkout this rlpt was imported from (its README.md and docs/ are the tokenizer corpus)."""
    return Path(__file__).resolve().parents[2]


def corpus_files(root: str | Path | None = None) -> list[Path]:
    """README.md and docs/*.md (sorted) under root (default: repo_root()); FileNotFoundError if absent."""
    root = Path(root) if root is not None else repo_root()
    readme, docs = root / "README.md", sorted((root / "docs").glob("*.md"))
    if not readme.is_file() or not docs:
        raise FileNotFoundError(
            f"{root}: the tokenizer corpus needs README.md and docs/*.md from an rlpt source checkout "
            f"(found README.md: {readme.is_file()}, docs/*.md: {len(docs)}); pass root= a checkout")
    return [readme, *docs]


@functools.lru_cache(maxsize=2)
def task_texts(seeds: int = CORPUS_SEEDS, chat_seeds: int = CORPUS_CHAT_SEEDS) -> tuple[str, ...]:
    """Text of train seeds [0, seeds) at every tier of every domain in CORPUS_DOMAINS: the first chat_seeds
    rendered as a chat with CHAT_TEMPLATE (so role names and the default system prompt are common words), the
    rest as 'prompt\nanswer\n'. Memoised: the result is a pure function of the arguments."""
    out = []
    no_tools = {"tools": None, "documents": None}
    for name in resolve(list(CORPUS_DOMAINS)):
        domain = get_domain(name)
        for tier in domain.tiers:
            for seed in range(seeds):
                task = domain.generate(seed, tier)
                answer = str(task.meta["answer"])
                if seed < chat_seeds:
                    msgs = [{"role": "user", "content": task.prompt}, {"role": "assistant", "content": answer}]
                    out.append(chat.render(CHAT_TEMPLATE, msgs, no_tools, False))
                else:
                    out.append(f"{task.prompt}\n{answer}\n")
    return tuple(out)


def corpus_texts(root: str | Path | None = None) -> list[str]:
    """The BPE training text: corpus_files(root), then task_texts(), cut at the added tokens (which the
    tokenizer matches before BPE, so no merge should ever span or spell them)."""
    texts = [p.read_text(encoding="utf-8") for p in corpus_files(root)] + list(task_texts())
    return [piece for text in texts for piece in _ADDED_RE.split(text) if piece]


def train_bpe(texts: list[str], vocab_size: int = BPE_VOCAB, *, exact: bool = True) -> tokenizers.Tokenizer:
    """A byte-level BPE laid out like Qwen2's tokenizer.json (NFC, split regex, ByteLevel), without added tokens.
    exact=False accepts fewer than vocab_size tokens where the texts run out of merges (every word one token).

    Deterministic for the same texts: the byte alphabet is sorted and merge ties break on token ids, which
    follow merge order; a test trains in two processes and compares the bytes.
    """
    tok = tokenizers.Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    if exact and tok.get_vocab_size() != vocab_size:
        raise ValueError(f"BPE training reached {tok.get_vocab_size()} tokens, not vocab_size={vocab_size}: the "
                         "corpus is too small for that many merges")
    return tok


def builtin_bpe(texts: list[str], vocab_size: int) -> Tokenizer:
    """The built-in tokenizer's protocol (its special tokens, `<bos>` prefix and chat template) over a byte-level
    BPE trained on `texts` (chats rendered with that template) instead of single characters: at most vocab_size
    ids in all, fewer where the texts run out of merges. For a small model trained from scratch on one family
    of tasks (`data.tokenizer=bpe`, the agent stage): names and code lines become a few tokens, which it copies
    and conditions on where it does not on characters (docs/agents.md)."""
    specials = re.compile("|".join(re.escape(t) for t in BUILTIN_SPECIALS))
    pieces = [p for text in texts for p in specials.split(text) if p]
    backend = train_bpe(pieces, vocab_size - len(BUILTIN_SPECIALS), exact=False)
    return with_builtin_protocol(backend, f"builtin_bpe({len(texts)} texts, vocab_size={vocab_size})")


# sha256 of the training text -> trained tokenizer.json: a session that builds several checkpoints trains once.
_BPE_CACHE: dict[str, str] = {}


def build_tokenizer(variant: str = "instruct", root: str | Path | None = None) -> Tokenizer:
    """The trained BPE plus ChatML special tokens, chat template and the variant's eos token."""
    if variant not in VARIANTS:
        raise ValueError(f"variant={variant!r}; expected one of {VARIANTS}")
    texts = corpus_texts(root)
    key = _sha256("\0".join(texts).encode("utf-8"))
    if key not in _BPE_CACHE:
        _BPE_CACHE[key] = train_bpe(texts).to_str()
    backend = tokenizers.Tokenizer.from_str(_BPE_CACHE[key])
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    config = {
        "tokenizer_class": "Qwen2Tokenizer",
        "add_bos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "model_max_length": SIZES["100m"].max_position_embeddings,
        "split_special_tokens": False,
        "additional_special_tokens": [IM_START, IM_END],
        "eos_token": IM_END if variant == "instruct" else ENDOFTEXT,
        "pad_token": ENDOFTEXT,
        "chat_template": CHAT_TEMPLATE,
    }
    return from_parts(backend, config, f"rlpt.pipeline.synthetic ({variant})")


def generation_config(tok: Tokenizer, variant: str) -> dict:
    """Stop ids as Qwen2.5 ships them: Instruct stops on <|im_end|> and <|endoftext|>, base on <|endoftext|>."""
    eot = tok.token_id(ENDOFTEXT)
    eos = [tok.token_id(IM_END), eot] if variant == "instruct" else eot
    return {"bos_token_id": eot, "eos_token_id": eos, "pad_token_id": eot, "do_sample": False}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build_checkpoint(folder: str | Path, *, size: str = "100m", variant: str = "instruct", seed: int = 0,
                     dtype: str = "float32", root: str | Path | None = None) -> Path:
    """Writes a Qwen2 HF checkpoint with randomly initialised weights (from `seed`) and the trained tokenizer.

    size: a key of SIZES; variant: "instruct" (eos <|im_end|>, stops <|im_end|> and <|endoftext|>) or "base"
    (eos and stop <|endoftext|>); dtype: tensor dtype on disk ("float32" or "bfloat16"); root: the checkout
    whose README.md and docs/ train the tokenizer (default: the one rlpt runs from). Returns the folder.
    """
    if size not in SIZES:
        raise ValueError(f"size={size!r}; expected one of {sorted(SIZES)}")
    if variant not in VARIANTS:
        raise ValueError(f"variant={variant!r}; expected one of {VARIANTS}")
    if dtype not in SAVE_DTYPES:
        raise ValueError(f"dtype={dtype!r}; expected one of {SAVE_DTYPES}")
    folder, base = Path(folder), Path(root) if root is not None else repo_root()
    cfg = SIZES[size]
    tok = build_tokenizer(variant, base)
    if tok.vocab_size > cfg.vocab_size:
        raise ValueError(f"tokenizer has {tok.vocab_size} tokens but SIZES[{size!r}].vocab_size={cfg.vocab_size}")
    init_model(cfg, seed).save_pretrained(str(folder), dtype=dtype, tokenizer=tok)
    (folder / GENERATION_CONFIG_FILE).write_text(json.dumps(generation_config(tok, variant), indent=2) + "\n")
    info = {
        "builder": "rlpt.pipeline.synthetic.build_checkpoint",
        "size": size, "variant": variant, "seed": seed, "dtype": dtype, "num_params": cfg.num_params(),
        "tokenizer_sha256": _sha256((folder / TOKENIZER_FILE).read_bytes()),
        "corpus": {p.relative_to(base).as_posix(): _sha256(p.read_bytes()) for p in corpus_files(base)},
        "corpus_task_domains": list(CORPUS_DOMAINS), "corpus_task_seeds": CORPUS_SEEDS,
        "corpus_chat_seeds": CORPUS_CHAT_SEEDS,
    }
    (folder / "build_info.json").write_text(json.dumps(info, indent=2) + "\n")
    return folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rlpt.pipeline.synthetic", description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="output folder (created; existing files are overwritten)")
    parser.add_argument("--size", choices=sorted(SIZES), default="100m")
    parser.add_argument("--variant", choices=VARIANTS, default="instruct")
    parser.add_argument("--seed", type=int, default=0, help="weight initialisation seed")
    parser.add_argument("--dtype", choices=SAVE_DTYPES, default="float32", help="tensor dtype on disk")
    parser.add_argument("--root", default=None, help="rlpt checkout whose README.md and docs/ train the tokenizer")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    folder = build_checkpoint(args.folder, size=args.size, variant=args.variant, seed=args.seed, dtype=args.dtype,
                              root=args.root)
    print(f"wrote {folder} ({SIZES[args.size].num_params():,} parameters, {args.variant}, {args.dtype}) "
          f"in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
