"""Tokenizer tests: chat rendering and assistant masks against transformers, bad input, built-in tokenizer."""

import importlib.util
import json
import random
import shutil
from pathlib import Path

import jinja2
import pytest
from transformers import AutoTokenizer

from rlpt.models.tokenizer import builtin_tokenizer, load_tokenizer

# Loaded by path: with --import-mode=importlib the test folder is not on sys.path.
_spec = importlib.util.spec_from_file_location(
    "tokenizer_fixtures", Path(__file__).with_name("tokenizer_fixtures.py")
)
F = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(F)

LLAMA_KW = {"date_string": "26 Jul 2024"}
FAMILIES = {
    "qwen": (F.qwen_folder, F.QWEN_TEMPLATE, F.QWEN_GENERATION_TEMPLATE, F.QWEN_CHATS, {}),
    "llama": (F.llama_folder, F.LLAMA_TEMPLATE, F.LLAMA_GENERATION_TEMPLATE, F.LLAMA_CHATS, LLAMA_KW),
}
CASES = [(family, name) for family, spec in FAMILIES.items() for name in spec[3]]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """{family: plain-template folder, family + "_gen": {% generation %}-template folder}."""
    root = tmp_path_factory.mktemp("tokenizers")
    out = {}
    for family, (make, template, gen_template, _, _) in FAMILIES.items():
        out[family] = make(root / family, template)
        out[family + "_gen"] = make(root / (family + "_gen"), gen_template)
    return out


@pytest.fixture(scope="module")
def hf(folders):
    return {name: AutoTokenizer.from_pretrained(str(path)) for name, path in folders.items()}


def _variants():
    return [(tools, gen) for tools in (None, F.TOOLS) for gen in (False, True)]


def _runs(ids, mask, tok):
    """Decoded text of each maximal run of mask == 1."""
    runs, cur = [], []
    for i, m in zip(ids, mask):
        if m:
            cur.append(i)
        elif cur:
            runs.append(tok.decode(cur))
            cur = []
    return runs + ([tok.decode(cur)] if cur else [])


@pytest.mark.parametrize("family,chat_name", CASES)
def test_rendering_and_ids_match_transformers(folders, hf, family, chat_name):
    tok = load_tokenizer(folders[family])
    msgs, kw = FAMILIES[family][3][chat_name], FAMILIES[family][4]
    for tools, gen in _variants():
        text = tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=gen, **kw)
        ref_text = hf[family].apply_chat_template(
            msgs, tools=tools, add_generation_prompt=gen, tokenize=False, **kw
        )
        assert text == ref_text
        ref_ids = hf[family].apply_chat_template(
            msgs, tools=tools, add_generation_prompt=gen, return_dict=False, **kw
        )
        ids, _ = tok.encode_chat(msgs, tools=tools, add_generation_prompt=gen, **kw)
        assert ids == ref_ids == tok.encode(text)
        assert tok.decode(ids) == text
        if tools is not None and family == "qwen":
            assert (
                '"description": "Adds two numbers <exactly> & fast."' in text
            )  # tojson without HTML escaping


@pytest.mark.parametrize("family,chat_name", CASES)
def test_assistant_mask_matches_transformers_generation_blocks(folders, hf, family, chat_name):
    plain, marked = load_tokenizer(folders[family]), load_tokenizer(folders[family + "_gen"])
    msgs, kw = FAMILIES[family][3][chat_name], FAMILIES[family][4]
    n_assistant = sum(m["role"] == "assistant" for m in msgs)
    for tools, gen in _variants():
        ref = hf[family + "_gen"].apply_chat_template(
            msgs,
            tools=tools,
            add_generation_prompt=gen,
            return_assistant_tokens_mask=True,
            return_dict=True,
            **kw,
        )
        ids, mask = plain.encode_chat(msgs, tools=tools, add_generation_prompt=gen, **kw)  # prefix renders
        ids_m, mask_m = marked.encode_chat(
            msgs, tools=tools, add_generation_prompt=gen, **kw
        )  # generation blocks
        assert ids == ids_m == ref["input_ids"]
        assert mask == mask_m == ref["assistant_masks"]
        assert len(_runs(ids, mask, plain)) == n_assistant


def test_qwen_assistant_mask_hand_built(folders):
    tok = load_tokenizer(folders["qwen"])
    ids, mask = tok.encode_chat(F.QWEN_CHATS["tools_multi_turn"], tools=F.TOOLS)
    assert _runs(ids, mask, tok) == [
        "Let me check both.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Zürich", "unit": "C"}}\n'
        '</tool_call>\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call><|im_end|>',
        "Zürich: 21 °C and sunny. 2 + 3 = 5.<|im_end|>",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "São Paulo"}}\n</tool_call><|im_end|>',
        "28 °C in São Paulo.<|im_end|>",
    ]
    im_end, newline = tok.token_id("<|im_end|>"), tok.encode("\n")
    assert newline == [ids[i + 1] for i in range(len(ids) - 1) if mask[i] and not mask[i + 1]][:1]
    # Every masked run ends in the stop token; tool responses and user turns are never masked.
    assert all(
        ids[i] == im_end for i in range(len(ids)) if mask[i] and (i + 1 == len(ids) or not mask[i + 1])
    )
    assert "tool_response" not in tok.decode([i for i, m in zip(ids, mask) if m])


def test_llama_assistant_mask_hand_built_and_builtin_tools(folders, hf):
    tok = load_tokenizer(folders["llama"])
    ids, mask = tok.encode_chat(F.LLAMA_CHATS["tools_multi_turn"], tools=F.TOOLS, **LLAMA_KW)
    assert _runs(ids, mask, tok) == [
        '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>',
        "It is 23 degrees and sunny in Paris.<|eot_id|>",
        '{"name": "add", "parameters": {"a": 100, "b": 23}}<|eot_id|>',
        "100 + 23 = 123.<|eot_id|>",
    ]
    msgs = [
        {"role": "user", "content": "Search the weather in Paris."},
        {"role": "assistant", "tool_calls": [F._call("brave_search", {"query": "Paris weather"})]},
        {"role": "ipython", "content": "sunny"},
        {"role": "assistant", "content": "Sunny."},
    ]
    kw = dict(LLAMA_KW, builtin_tools=["brave_search", "code_interpreter"])
    ids, mask = tok.encode_chat(msgs, **kw)
    assert _runs(ids, mask, tok) == [
        '<|python_tag|>brave_search.call(query="Paris weather")<|eom_id|>',
        "Sunny.<|eot_id|>",
    ]
    ref = hf["llama_gen"].apply_chat_template(msgs, return_assistant_tokens_mask=True, return_dict=True, **kw)
    assert (ids, mask) == (ref["input_ids"], ref["assistant_masks"])
    assert "Tools: brave_search\n" in tok.apply_chat_template(msgs, **kw)


def test_strftime_now_and_raise_exception(folders, hf):
    tok = load_tokenizer(folders["llama"])
    msgs = F.LLAMA_CHATS["plain"]
    assert tok.apply_chat_template(msgs) == hf["llama"].apply_chat_template(msgs, tokenize=False)
    two_calls = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [F._call("add", {}), F._call("add", {})]},
    ]
    with pytest.raises(jinja2.exceptions.TemplateError, match="single tool-calls"):
        tok.apply_chat_template(two_calls, **LLAMA_KW)


def test_special_tokens_and_stop_ids(folders, hf):
    qwen, llama = load_tokenizer(folders["qwen"]), load_tokenizer(folders["llama"])
    assert qwen.bos_id is None and qwen.eos_id == qwen.token_id("<|im_end|>")
    assert qwen.eos_ids == (qwen.token_id("<|im_end|>"), qwen.token_id("<|endoftext|>"))
    assert qwen.pad_id == qwen.token_id("<|endoftext|>") == hf["qwen"].pad_token_id
    assert qwen.vocab_size == len(hf["qwen"]) == 402
    assert llama.bos_id == llama.token_id("<|begin_of_text|>") == hf["llama"].bos_token_id
    assert llama.eos_ids == tuple(llama.token_id(t) for t in ("<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"))
    assert llama.pad_id is None
    text = "\n".join(F.CORPUS) + " <|eot_id|> tail"
    assert llama.encode(text, add_special_tokens=True) == hf["llama"].encode(text)
    assert llama.encode(text, add_special_tokens=True)[0] == llama.bos_id
    assert llama.encode(text) == hf["llama"].encode(text, add_special_tokens=False)
    assert llama.decode(llama.encode(text)) == text
    ids = llama.encode(text)
    assert llama.decode(ids, skip_special_tokens=True) == hf["llama"].decode(ids, skip_special_tokens=True)
    assert "<|eot_id|>" not in llama.decode(ids, skip_special_tokens=True)


# Drops the reasoning of earlier assistant turns (as Qwen3's template does), so prefixes render differently.
HISTORY_REWRITING_TEMPLATE = r"""{%- for m in messages %}
{{- '<|im_start|>' + m.role + '\n' }}
{%- if m.role == 'assistant' and not loop.last %}{{- m.content.split('</think>')[-1] }}
{%- else %}{{- m.content }}{%- endif %}
{{- '<|im_end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"""
HISTORY_REWRITING_MARKED = r"""{%- for m in messages %}
{{- '<|im_start|>' + m.role + '\n' }}
{%- if m.role == 'assistant' %}
{%- generation %}
{%- if not loop.last %}{{- m.content.split('</think>')[-1] }}{%- else %}{{- m.content }}{%- endif %}
{{- '<|im_end|>' }}
{%- endgeneration %}
{{- '\n' }}
{%- else %}
{{- m.content + '<|im_end|>\n' }}
{%- endif %}
{%- endfor %}"""


def test_history_rewriting_template_needs_generation_blocks(folders, tmp_path):
    config = json.loads((folders["qwen"] / "tokenizer_config.json").read_text())
    folder = tmp_path / "rewriting"
    shutil.copytree(folders["qwen"], folder)
    config["chat_template"] = HISTORY_REWRITING_TEMPLATE
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    msgs = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "<think>x</think>b"},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "<think>y</think>d"},
    ]
    with pytest.raises(ValueError, match="not append-only at assistant message 1"):
        load_tokenizer(folder).encode_chat(msgs)
    (folder / "chat_template.jinja").write_text(
        HISTORY_REWRITING_MARKED
    )  # chat_template.jinja overrides tokenizer_config.json
    tok = load_tokenizer(folder)
    ids, mask = tok.encode_chat(msgs)
    assert tok.decode(ids) == (
        "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nb<|im_end|>\n"
        "<|im_start|>user\nc<|im_end|>\n<|im_start|>assistant\n<think>y</think>d<|im_end|>\n"
    )
    assert _runs(ids, mask, tok) == ["b<|im_end|>", "<think>y</think>d<|im_end|>"]


def test_named_templates_pick_tool_use(folders, tmp_path):
    folder = tmp_path / "named"
    shutil.copytree(folders["qwen"], folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = [
        {"name": "default", "template": "D{{ messages | length }}"},
        {"name": "tool_use", "template": "T{{ tools | length }}"},
    ]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    tok = load_tokenizer(folder)
    msgs = [{"role": "user", "content": "x"}]
    assert tok.apply_chat_template(msgs) == "D1"
    assert tok.apply_chat_template(msgs, tools=F.TOOLS) == "T2"
    tok.save(tmp_path / "named_saved")
    assert load_tokenizer(tmp_path / "named_saved").chat_templates == tok.chat_templates


def test_bad_messages_and_tools(folders):
    tok = load_tokenizer(folders["qwen"])
    with pytest.raises(TypeError, match=r"messages\[1\]"):
        tok.apply_chat_template([{"role": "user", "content": "x"}, {"content": "no role"}])
    with pytest.raises(TypeError, match=r"tools\[0\]"):
        tok.apply_chat_template([{"role": "user", "content": "x"}], tools=[print])
    with pytest.raises(TypeError, match=r"messages\[0\]\['content'\]"):
        tok.apply_chat_template([{"role": "user", "content": object()}])


def test_missing_tokenizer_file(folders, tmp_path):
    folder = tmp_path / "no_tokenizer_json"
    shutil.copytree(folders["qwen"], folder)
    (folder / "tokenizer.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"no_tokenizer_json/tokenizer\.json is missing"):
        load_tokenizer(folder)
    with pytest.raises(FileNotFoundError, match="does_not_exist"):
        load_tokenizer(tmp_path / "does_not_exist")


@pytest.mark.parametrize(
    "file,content,message",
    [
        ("tokenizer.json", '{"version": "1.0", "model": ', r"tokenizer\.json: not a valid tokenizer\.json"),
        ("tokenizer.json", '{"version": "1.0"}', r"tokenizer\.json: not a valid tokenizer\.json"),
        ("tokenizer_config.json", '{"eos_token": "<|im_end|>",', r"tokenizer_config\.json: malformed JSON"),
        (
            "tokenizer_config.json",
            '["not", "an", "object"]',
            r"tokenizer_config\.json: expected a JSON object",
        ),
        (
            "tokenizer_config.json",
            '{"eos_token": "<|nope|>"}',
            r"eos_token '<\|nope\|>' is not in the vocabulary",
        ),
        (
            "tokenizer_config.json",
            '{"chat_template": "{% for %}"}',
            "chat template 'default' does not compile",
        ),
        (
            "generation_config.json",
            '{"eos_token_id": [1, "x"]}',
            r"generation_config\.json: eos_token_id must be",
        ),
        ("generation_config.json", '{"eos_token_id": 100000}', "stop id 100000 is outside the vocabulary"),
    ],
)
def test_malformed_files_name_the_file(folders, tmp_path, file, content, message):
    folder = tmp_path / "bad"
    shutil.copytree(folders["qwen"], folder)
    (folder / file).write_text(content)
    with pytest.raises(ValueError, match=message):
        load_tokenizer(folder)


def test_no_chat_template(folders, tmp_path):
    folder = tmp_path / "no_template"
    shutil.copytree(folders["qwen"], folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    del config["chat_template"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="has no default chat template"):
        load_tokenizer(folder).encode_chat([{"role": "user", "content": "x"}])


def test_loaded_tokenizer_save_round_trip(folders, tmp_path):
    tok = load_tokenizer(folders["llama"])
    tok.save(tmp_path / "saved")
    again = load_tokenizer(tmp_path / "saved")
    msgs = F.LLAMA_CHATS["tools_multi_turn"]
    assert again.encode_chat(msgs, tools=F.TOOLS, **LLAMA_KW) == tok.encode_chat(
        msgs, tools=F.TOOLS, **LLAMA_KW
    )
    assert (again.bos_id, again.eos_id, again.pad_id) == (tok.bos_id, tok.eos_id, tok.pad_id)
    assert again.config == tok.config  # model_max_length, clean_up_tokenization_spaces, ... kept


# --- built-in character tokenizer ---


def test_builtin_vocab_and_ascii_round_trip():
    tok = builtin_tokenizer()
    assert tok.vocab_size == 105
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    assert tok.eos_ids == (2,)
    printable = "".join(chr(c) for c in range(32, 127)) + "\n\t"
    assert tok.decode(tok.encode(printable)) == printable
    assert tok.encode(printable) == list(range(10, 105)) + [9, 8]
    rng = random.Random(0)
    for _ in range(50):
        s = "".join(rng.choice(printable) for _ in range(rng.randrange(0, 40)))
        assert tok.decode(tok.encode(s)) == s and len(tok.encode(s)) == len(s)
    assert tok.encode("a\u00e9\U0001f600\r") == [tok.token_id("a"), 3, 3, 3]  # unknown characters -> <unk>
    assert tok.encode("hi", add_special_tokens=True) == [1, tok.token_id("h"), tok.token_id("i")]
    assert tok.encode("<|user|>x<|end|>") == [5, tok.token_id("x"), 2]


def test_builtin_chat_mask_hand_built():
    tok = builtin_tokenizer()
    c = tok.token_id
    ids, mask = tok.encode_chat(
        [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "2+2"},
            {"role": "assistant", "content": "4"},
        ]
    )
    assert ids == [1, 4, c("S"), 2, 5, c("2"), c("+"), c("2"), 2, 6, c("4"), 2]
    assert mask == [0] * 10 + [1, 1]
    ids, mask = tok.encode_chat([{"role": "user", "content": "q"}], add_generation_prompt=True)
    assert ids == [1, 5, c("q"), 2, 6] and mask == [0] * 5


def test_builtin_save_load_and_transformers(tmp_path):
    tok = builtin_tokenizer()
    tok.save(tmp_path / "builtin")
    again = load_tokenizer(tmp_path / "builtin")
    msgs = F.QWEN_CHATS["tools_multi_turn"]  # non-ASCII content exercises <unk> inside chats
    assert again.encode_chat(msgs, tools=F.TOOLS) == tok.encode_chat(msgs, tools=F.TOOLS)
    assert again.backend.to_str() == tok.backend.to_str()
    assert (again.special_tokens, again.eos_ids, again.chat_templates) == (
        tok.special_tokens,
        tok.eos_ids,
        tok.chat_templates,
    )
    hf_tok = AutoTokenizer.from_pretrained(str(tmp_path / "builtin"))
    ref = hf_tok.apply_chat_template(msgs, tools=F.TOOLS, return_assistant_tokens_mask=True, return_dict=True)
    assert tok.encode_chat(msgs, tools=F.TOOLS) == (ref["input_ids"], ref["assistant_masks"])
    assert hf_tok.apply_chat_template(msgs, tools=F.TOOLS, tokenize=False) == tok.apply_chat_template(
        msgs, tools=F.TOOLS
    )
    assert (hf_tok.pad_token_id, hf_tok.bos_token_id, hf_tok.eos_token_id) == (0, 1, 2)
    ids, mask = tok.encode_chat(msgs, tools=F.TOOLS)
    assert _runs(ids, mask, tok)[-1] == "28 <unk>C in S<unk>o Paulo.<|end|>"
