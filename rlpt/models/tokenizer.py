"""Tokenizers (HF tokenizer.json folders, a built-in char tokenizer), chat rendering and assistant masks."""

import dataclasses
import json
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

import jinja2
import tokenizers

from rlpt.models import chat

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
GENERATION_CONFIG_FILE = "generation_config.json"
TEMPLATE_FILE = "chat_template.jinja"
TEMPLATE_DIR = "chat_templates"
# The named special tokens `transformers` passes to chat templates (its SPECIAL_TOKENS_ATTRIBUTES).
SPECIAL_TOKEN_NAMES = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)


@dataclasses.dataclass(frozen=True, eq=False)
class Tokenizer:
    """A `tokenizers.Tokenizer` plus what tokenizer_config.json adds: special tokens, stop ids, templates.

    `special_tokens` maps names from SPECIAL_TOKEN_NAMES to token strings; `chat_templates` maps template
    names to jinja sources ("default", and e.g. "tool_use"); `config` is the rest of tokenizer_config.json,
    kept so that `save` writes it back unchanged.
    """

    backend: tokenizers.Tokenizer = dataclasses.field(repr=False)
    special_tokens: Mapping[str, str]
    eos_ids: tuple[int, ...]
    chat_templates: Mapping[str, str] = dataclasses.field(repr=False)
    config: Mapping = dataclasses.field(repr=False)
    source: str = "<memory>"

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def token_id(self, token: str) -> int:
        """Id of one token string; KeyError naming it if the vocabulary lacks it."""
        idx = self.backend.token_to_id(token)
        if idx is None:
            raise KeyError(f"token {token!r} is not in the vocabulary of {self.source}")
        return idx

    def _special_id(self, name: str) -> int | None:
        token = self.special_tokens.get(name)
        return None if token is None else self.token_id(token)

    @property
    def bos_id(self) -> int | None:
        return self._special_id("bos_token")

    @property
    def eos_id(self) -> int | None:
        return self._special_id("eos_token")

    @property
    def pad_id(self) -> int | None:
        """The pad token's id, or None when there is none (Llama 3): callers choose, we do not guess."""
        return self._special_id("pad_token")

    @property
    def unk_id(self) -> int | None:
        return self._special_id("unk_token")

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text`; `add_special_tokens` runs the post-processor (e.g. prepends BOS for Llama)."""
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = False) -> list[list[int]]:
        return [e.ids for e in self.backend.encode_batch(list(texts), add_special_tokens=add_special_tokens)]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def chat_template(self, tools: Sequence[Mapping] | None = None) -> str:
        """The template used for a chat: "tool_use" when tools are given and it exists, else "default"."""
        if tools is not None and "tool_use" in self.chat_templates:
            return self.chat_templates["tool_use"]
        if "default" not in self.chat_templates:
            names = sorted(self.chat_templates)
            raise ValueError(f"{self.source} has no default chat template (found: {names or 'none'})")
        return self.chat_templates["default"]

    def _variables(self, tools, template_kwargs) -> dict:
        return {
            "tools": chat.normalize_tools(tools),
            "documents": None,
            **self.special_tokens,
            **template_kwargs,
        }

    def apply_chat_template(
        self,
        messages: Sequence[Mapping],
        *,
        tools=None,
        add_generation_prompt: bool = False,
        **template_kwargs,
    ) -> str:
        """The chat as text, exactly as `transformers`' apply_chat_template(tokenize=False) renders it.

        `template_kwargs` are extra template variables (e.g. `enable_thinking`, `date_string`).
        """
        template = self.chat_template(tools)
        return chat.render(
            template,
            chat.normalize_messages(messages),
            self._variables(tools, template_kwargs),
            add_generation_prompt,
        )

    def encode_chat(
        self,
        messages: Sequence[Mapping],
        *,
        tools=None,
        add_generation_prompt: bool = False,
        **template_kwargs,
    ) -> tuple[list[int], list[int]]:
        """Renders and tokenizes a chat; returns (ids, assistant_mask), both of length T.

        ids are the tokens of the whole rendered text (as `transformers` tokenizes it, no extra special
        tokens). assistant_mask[t] is 1 when token t overlaps text the assistant produced: with a template
        that has `{% generation %}` blocks, exactly those blocks (transformers' return_assistant_tokens_mask,
        which TRL's assistant_only_loss uses); otherwise, for each assistant message, everything after the
        generation prompt up to and including its end-of-turn special token (<|im_end|>, <|eot_id|>), but
        not whitespace the template writes after that token.
        """
        template = self.chat_template(tools)
        msgs = chat.normalize_messages(messages)
        variables = self._variables(tools, template_kwargs)
        if chat.has_generation_blocks(template):
            text, spans = chat.render_with_generation_spans(template, msgs, variables, add_generation_prompt)
        else:
            text = chat.render(template, msgs, variables, add_generation_prompt)
            end_tokens = [t.content for t in self.backend.get_added_tokens_decoder().values() if t.special]
            spans = chat.assistant_spans_by_prefix(
                lambda m, gen: chat.render(template, m, variables, gen), msgs, text, end_tokens
            )
        encoding = self.backend.encode(text, add_special_tokens=False)
        return encoding.ids, chat.spans_to_token_mask(encoding.offsets, spans)

    def save(self, folder: str | Path) -> None:
        """Writes tokenizer.json and tokenizer_config.json (chat templates inside it), loadable by
        `load_tokenizer` and by transformers' AutoTokenizer. Stop ids beyond eos_token belong in the model's
        generation_config.json (eos_token_id), which the model export writes."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(folder / TOKENIZER_FILE))
        config = {
            k: v for k, v in self.config.items() if k not in SPECIAL_TOKEN_NAMES and k != "chat_template"
        }
        config.update(self.special_tokens)
        if set(self.chat_templates) == {"default"}:
            config["chat_template"] = self.chat_templates["default"]
        elif self.chat_templates:
            config["chat_template"] = [{"name": k, "template": v} for k, v in self.chat_templates.items()]
        (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: malformed JSON: {e}") from e
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def _token_string(value, where: str) -> str | None:
    # tokenizer_config writes special tokens either as strings or as serialized AddedToken dicts.
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return value["content"]
    raise ValueError(f"{where}: special token must be a string or {{'content': ...}}, got {value!r}")


def _parse_templates(raw, where: str) -> dict[str, str]:
    if raw is None:
        return {}
    if isinstance(raw, str):
        return {"default": raw}
    if isinstance(raw, list) and all(isinstance(t, Mapping) and {"name", "template"} <= set(t) for t in raw):
        return {t["name"]: t["template"] for t in raw}
    raise ValueError(f"{where}: chat_template must be a string or a list of {{name, template}} objects")


def _chat_templates(folder: Path, config: dict) -> dict[str, str]:
    """Templates by name, with transformers' precedence: chat_template.jinja, chat_templates/*.jinja win."""
    templates = _parse_templates(config.get("chat_template"), str(folder / CONFIG_FILE))
    if (folder / TEMPLATE_FILE).is_file():
        templates["default"] = (folder / TEMPLATE_FILE).read_text(encoding="utf-8")
    if (folder / TEMPLATE_DIR).is_dir():
        for path in sorted((folder / TEMPLATE_DIR).glob("*.jinja")):
            templates[path.stem] = path.read_text(encoding="utf-8")
    return templates


def _generation_eos_ids(path: Path) -> list[int]:
    if not path.is_file():
        return []
    value = _read_json(path).get("eos_token_id")
    ids = [] if value is None else [value] if isinstance(value, int) else value
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        raise ValueError(f"{path}: eos_token_id must be an int or a list of ints, got {value!r}")
    return ids


def from_parts(backend: tokenizers.Tokenizer, config: Mapping, source: str, extra_eos_ids=(), templates=None):
    """Builds a Tokenizer, checking that every special token and stop id exists in the vocabulary."""
    special = {}
    for name in SPECIAL_TOKEN_NAMES:
        token = _token_string(config.get(name), f"{source}: {name}")
        if token is not None:
            if backend.token_to_id(token) is None:
                raise ValueError(f"{source}: {name} {token!r} is not in the vocabulary of {TOKENIZER_FILE}")
            special[name] = token
    eos = [backend.token_to_id(special["eos_token"])] if "eos_token" in special else []
    vocab_size = backend.get_vocab_size(with_added_tokens=True)
    for i in extra_eos_ids:
        if not 0 <= i < vocab_size:
            raise ValueError(f"{source}: stop id {i} is outside the vocabulary (size {vocab_size})")
        eos.append(i)
    if templates is None:
        templates = _parse_templates(config.get("chat_template"), source)
    for name, template in templates.items():
        try:
            chat.compile_template(template)
        except jinja2.exceptions.TemplateSyntaxError as e:
            raise ValueError(f"{source}: chat template {name!r} does not compile: {e}") from e
    rest = {k: v for k, v in config.items() if k not in SPECIAL_TOKEN_NAMES and k != "chat_template"}
    return Tokenizer(backend, special, tuple(dict.fromkeys(eos)), templates, rest, source)


def load_tokenizer(folder: str | Path) -> Tokenizer:
    """Loads tokenizer.json (required) with tokenizer_config.json, special_tokens_map.json,
    generation_config.json (its eos_token_id joins `eos_ids`) and chat_template.jinja when present."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"tokenizer folder {folder} does not exist")
    path = folder / TOKENIZER_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: rlpt reads tokenizers in the HF `tokenizers` format (tokenizer.json); "
            "a sentencepiece tokenizer.model must be converted first"
        )
    try:
        backend = tokenizers.Tokenizer.from_file(str(path))
    except Exception as e:  # the Rust side raises a bare Exception for any parse error
        raise ValueError(f"{path}: not a valid tokenizer.json: {e}") from e
    config = _read_json(folder / CONFIG_FILE) if (folder / CONFIG_FILE).is_file() else {}
    if (folder / SPECIAL_TOKENS_FILE).is_file():
        for name, value in _read_json(folder / SPECIAL_TOKENS_FILE).items():
            if name in SPECIAL_TOKEN_NAMES and config.get(name) is None:
                config[name] = value
    return from_parts(
        backend,
        config,
        str(folder),
        _generation_eos_ids(folder / GENERATION_CONFIG_FILE),
        _chat_templates(folder, config),
    )


# Built-in tokenizer: one token per printable ASCII character, tab and newline, plus these specials.
BUILTIN_SPECIALS = (
    "<pad>",
    "<bos>",
    "<|end|>",
    "<unk>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|tool|>",
)
BUILTIN_CHARS = ("\t", "\n", *(chr(c) for c in range(32, 127)))
# Turns are `<|role|>content<|end|>`; a content list (transformers' multimodal format) renders its
# {"type": "image"} parts as the <image> placeholder and its text parts as text; tools go into the system turn
# as JSON lines; assistant tool calls are `<tool_call>{"name": ..., "arguments": ...}</tool_call>` in plain
# characters. Assistant output sits in a {% generation %} block so transformers' return_assistant_tokens_mask
# (and TRL) work on an exported model.
BUILTIN_CHAT_TEMPLATE = """{{- bos_token -}}
{%- if messages and messages[0].role == 'system' -%}
    {%- set system = messages[0].content -%}
    {%- set rest = messages[1:] -%}
{%- else -%}
    {%- set system = '' -%}
    {%- set rest = messages -%}
{%- endif -%}
{%- if system or tools -%}
    {{- '<|system|>' + system -}}
    {%- if tools -%}
        {{- ('\\n\\n' if system else '') + '# Tools (call one as ' -}}
        {{- '<tool_call>{"name": ..., "arguments": ...}</tool_call>)' -}}
        {%- for tool in tools -%}{{- '\\n' + tool | tojson -}}{%- endfor -%}
    {%- endif -%}
    {{- '<|end|>' -}}
{%- endif -%}
{%- for message in rest -%}
    {%- if message.role not in ('system', 'user', 'assistant', 'tool') -%}
        {{- raise_exception('built-in chat template has no role ' + message.role) -}}
    {%- endif -%}
    {{- '<|' + message.role + '|>' -}}
    {%- if message.role == 'assistant' -%}
        {%- generation -%}
        {%- if message.content is string -%}{{- message.content -}}{%- endif -%}
        {%- for call in message.tool_calls or [] -%}
            {%- set call = call.function if call.function is defined else call -%}
            {{- '<tool_call>' + {'name': call.name, 'arguments': call.arguments} | tojson + '</tool_call>' -}}
        {%- endfor -%}
        {{- '<|end|>' -}}
        {%- endgeneration -%}
    {%- elif message.content is string -%}
        {{- message.content -}}{{- '<|end|>' -}}
    {%- else -%}
        {%- for part in message.content -%}
            {%- if part.type == 'image' -%}{{- '<image>' -}}{%- else -%}{{- part.text -}}{%- endif -%}
        {%- endfor -%}
        {{- '<|end|>' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|assistant|>' -}}{%- endif -%}"""


def builtin_tokenizer() -> Tokenizer:
    """Character-level tokenizer for procedural tasks, needing no files (vocab 105).

    Ids: <pad>=0, <bos>=1, <|end|>=2 (eos and end of turn), <unk>=3, role markers 4-7, then tab, newline
    and printable ASCII. Any other character encodes as <unk>. `encode(add_special_tokens=True)` prepends
    <bos>. Built with the `tokenizers` library, so `save` writes a real tokenizer.json.
    """
    vocab = {token: i for i, token in enumerate(BUILTIN_SPECIALS + BUILTIN_CHARS)}
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = tokenizers.decoders.Fuse()
    return with_builtin_protocol(backend, "builtin_tokenizer()")


def with_builtin_protocol(backend: tokenizers.Tokenizer, source: str) -> Tokenizer:
    """`backend` as a Tokenizer speaking the built-in protocol: BUILTIN_SPECIALS as special tokens (ids from the
    backend's vocabulary where it has them, appended otherwise), `<bos>` prefixed by encode(add_special_tokens=True),
    and the built-in chat template. `builtin_tokenizer` and `rlpt.pipeline.synthetic.builtin_bpe` share it."""
    backend.add_special_tokens([tokenizers.AddedToken(t, special=True, normalized=False) for t in BUILTIN_SPECIALS])
    backend.post_processor = tokenizers.processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", backend.token_to_id("<bos>"))]
    )
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<bos>",
        "eos_token": "<|end|>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "clean_up_tokenization_spaces": False,
        "chat_template": BUILTIN_CHAT_TEMPLATE,
    }
    return from_parts(backend, config, source)


# Character-level tokenizers encode each character on its own, so a rendered user turn is exactly
# prefix + encode(text) + suffix; caching that split skips a jinja render per prompt (SFT data hot path).
_SPLITS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
SPLIT_PROBE = "probe 12+7="  # a user text whose rendered turn shows where the text goes


def render_user_turn(tok, messages) -> list[int]:
    """Token ids of chat `messages` rendered with the generation prompt (the assistant's turn opened)."""
    ids, _ = tok.encode_chat(messages, add_generation_prompt=True)
    return ids


def user_turn_split(tok):
    """(ids before, ids after) a user turn's text for a character-level tokenizer (cached), or None."""
    if tok not in _SPLITS:
        split = None
        if tok.source == "builtin_tokenizer()":
            full, body = render_user_turn(tok, [{"role": "user", "content": SPLIT_PROBE}]), tok.encode(SPLIT_PROBE)
            at = next((i for i in range(len(full)) if full[i:i + len(body)] == body), None)
            if at is not None:
                split = (full[:at], full[at + len(body):])
        _SPLITS[tok] = split
    return _SPLITS[tok]


def user_turn_ids(tok, prompt) -> list[int]:
    """Token ids of a text prompt (or chat messages) rendered as a user turn awaiting the assistant."""
    if isinstance(prompt, str):
        split = user_turn_split(tok)
        if split is not None:
            return split[0] + tok.encode(prompt) + split[1]
        return render_user_turn(tok, [{"role": "user", "content": prompt}])
    return render_user_turn(tok, list(prompt))


def response_text(tok, ids) -> str:
    """Decode generated ids up to (not including) the first stop id."""
    out = []
    stops = set(tok.eos_ids)
    for i in ids:
        if int(i) in stops:
            break
        out.append(int(i))
    return tok.decode(out, skip_special_tokens=True)
