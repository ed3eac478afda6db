"""Chat templates: jinja2 rendering as `transformers` does it, and the text spans the assistant produced."""

import json
import re
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from datetime import datetime
from functools import lru_cache

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment

_GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")
# Message keys under which reasoning arrives; templates read `reasoning_content` (gpt-oss reads `thinking`).
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")

Span = tuple[int, int]  # [start, end) character offsets in the rendered chat


def has_generation_blocks(template: str) -> bool:
    """True if the template marks assistant output with `{% generation %}...{% endgeneration %}`."""
    return _GENERATION_TAG.search(template) is not None


class _GenerationTracker(jinja2.ext.Extension):
    """`{% generation %}` blocks render their body unchanged and, while tracking, record its span."""

    tags = {"generation"}

    def __init__(self, environment):
        super().__init__(environment)
        self.tracking: ContextVar = ContextVar("rlpt_generation_tracking", default=None)

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_record", []), [], [], body).set_lineno(lineno)

    def _record(self, caller):
        text = caller()
        tracking = self.tracking.get()
        if tracking is not None:
            # The block's text comes right after everything yielded so far (generate() yields in order).
            chunks, spans = tracking
            start = sum(len(c) for c in chunks)
            spans.append((start, start + len(text)))
        return text


class _TemplateDict:
    """`dict(...)` for templates without exposing the `dict` type itself to the sandbox."""

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    """`namespace(...)` that refuses underscore attributes, so templates cannot reach Python internals."""

    def __init__(*args, **kwargs):
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _TemplateNamespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        _TemplateNamespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"chat template may not set namespace attribute {name!r}")


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # jinja's own tojson escapes HTML characters (<, >, &); chat templates expect plain json.dumps.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt):
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=32)
def compile_template(source: str) -> jinja2.Template:
    """Compiles a chat template in the sandboxed environment `transformers` uses (same globals, filters)."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTracker, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals.update(
        raise_exception=_raise_exception,
        strftime_now=_strftime_now,
        dict=_TemplateDict(),
        namespace=_TemplateNamespace,
    )
    return env.from_string(source)


def _plain(value, where: str):
    """Deep copy into plain JSON-like types, so the template sees data, not objects with methods."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    # Subclasses (enums, ...) are cut back to their base type so no extra methods reach the sandbox.
    for base in (str, bool, int, float):
        if isinstance(value, base):
            return base(value) if base is bool else getattr(base, f"__{base.__name__}__")(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise TypeError(
        f"chat input {where} has type {type(value).__name__}; only JSON-like data can be rendered"
    )


def normalize_messages(messages: Sequence[Mapping]) -> list[dict]:
    """Plain copies of the messages, None-valued keys dropped, reasoning aliased (as `transformers` does)."""
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or "role" not in message:
            raise TypeError(f"messages[{i}] must be a mapping with a 'role' key, got {message!r}")
        m = {k: _plain(v, f"messages[{i}][{k!r}]") for k, v in message.items() if v is not None}
        reasoning = next((m[k] for k in _REASONING_FIELDS if m.get(k) is not None), None)
        if reasoning is not None:
            m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
        out.append(m)
    return out


def normalize_tools(tools: Sequence[Mapping] | None) -> list[dict] | None:
    """Tools as plain JSON schemas (dicts); anything else is an error naming its index."""
    if tools is None:
        return None
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise TypeError(f"tools[{i}] must be a JSON-schema dict, got {type(tool).__name__}")
    return [_plain(t, f"tools[{i}]") for i, t in enumerate(tools)]


def render(template: str, messages: list[dict], variables: Mapping, add_generation_prompt: bool) -> str:
    """Renders normalized messages; `variables` holds tools, special-token strings and template kwargs."""
    return compile_template(template).render(
        messages=messages, add_generation_prompt=add_generation_prompt, **variables
    )


def render_with_generation_spans(
    template: str, messages: list[dict], variables: Mapping, add_generation_prompt: bool
) -> tuple[str, list[Span]]:
    """Renders and returns the character spans of every `{% generation %}` block, in order."""
    compiled = compile_template(template)
    tracker = next(e for e in compiled.environment.extensions.values() if isinstance(e, _GenerationTracker))
    chunks: list[str] = []
    spans: list[Span] = []
    token = tracker.tracking.set((chunks, spans))
    try:
        for chunk in compiled.generate(
            messages=messages, add_generation_prompt=add_generation_prompt, **variables
        ):
            chunks.append(chunk)
    finally:
        tracker.tracking.reset(token)
    return "".join(chunks), spans


def assistant_spans_by_prefix(
    render_fn: Callable[[list[dict], bool], str], messages: list[dict], full: str, end_tokens: Sequence[str]
) -> list[Span]:
    """Assistant spans of an append-only template, found from prefix renders.

    Assistant message i spans from the end of render(messages[:i], generation prompt) to the end of
    render(messages[:i+1]), cut after the last of `end_tokens` when only whitespace follows it (the newline
    ChatML writes after <|im_end|> is the template's, not the model's). Raises if a prefix render is not a
    prefix of the full chat: such templates rewrite history and need `{% generation %}` blocks.
    """
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        try:
            prompt = render_fn(messages[:i], True)
        except jinja2.exceptions.TemplateError as e:
            raise ValueError(f"cannot render the prompt of assistant message {i} on its own: {e}") from e
        upto = render_fn(messages[: i + 1], False)
        if not upto.startswith(prompt) or not full.startswith(upto):
            raise ValueError(
                f"chat template is not append-only at assistant message {i} (a prefix of the conversation "
                "renders differently from the full conversation), so its assistant tokens cannot be found "
                "from prefix renders; use a template with {% generation %}...{% endgeneration %} around "
                "assistant output"
            )
        spans.append((len(prompt), _cut_after_end_token(upto, len(prompt), end_tokens)))
    return spans


def _cut_after_end_token(text: str, start: int, end_tokens: Sequence[str]) -> int:
    stripped = len(text[start:].rstrip())
    if stripped == len(text) - start:
        return len(text)
    for token in end_tokens:
        if token and text[start : start + stripped].endswith(token):
            return start + stripped
    return len(text)


def spans_to_token_mask(offsets: Sequence[Span], spans: Sequence[Span]) -> list[int]:
    """1 for every token whose character offsets overlap a span (the rule `transformers` uses), else 0."""
    mask = [0] * len(offsets)
    span_idx = 0
    for t, (start, end) in enumerate(offsets):
        while span_idx < len(spans) and start >= spans[span_idx][1]:
            span_idx += 1
        if span_idx == len(spans):
            break
        if end > spans[span_idx][0]:
            mask[t] = 1
    return mask
