"""The real small checkpoint (rlpt.pipeline.synthetic): its BPE tokenizer, chat masks and stop ids agree with
transformers, its logits equal transformers' on the same folder, and the tokenizer trains to the same bytes."""
import dataclasses
import json
import random
import re
import subprocess
import sys
import unicodedata

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from safetensors import safe_open
from tokenizers import pre_tokenizers

import rlpt.pipeline.synthetic as S
from rlpt.models import config_from_hf, init_model, load_pretrained, load_tokenizer
from rlpt.tasks import get_domain
from tests.models.hf_fixtures import hf_logits

TOL = 1e-4
EOT, IM_START, IM_END, TOOL_CALL, TOOL_CALL_END = range(32000, 32005)
SHAPE_FIELDS = ("family", "vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
                "head_dim", "max_position_embeddings", "rope_theta", "rms_norm_eps", "qkv_bias", "o_bias",
                "qk_norm", "tie_embeddings")

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Zürich, São Paulo, 東京, Ελλάδα, emoji 🤗🚀 and a combining e\u0301 (NFC makes it é).",
    "12345678901234567890 3.14159e-10 -42 1,000,000 0x1F 0b1011",
    "(17*23)-4=387; 2^10 = 1024; 7/8 = 0.875; 15% of 80 = 12",
    "def add(a, b):\n\treturn a + b  # tab, spaces\r\n\n\n    print(add(2, 3))\n",
    "   leading and trailing spaces   \n\n\t\t",
    "literal <|im_start|>user\nhi<|im_end|>\n<|endoftext|> markers",
    '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>',
    "don't I'LL we've they'd it's",
    "",
]

TOOLS = [{"type": "function", "function": {
    "name": "add", "description": "Adds two numbers <exactly> & fast.",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                   "required": ["a", "b"]}}}]


def _call(name, arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


CHATS = {
    "plain": [{"role": "user", "content": "8+3="}, {"role": "assistant", "content": "11"},
              {"role": "user", "content": "Sort 3 1 2"}, {"role": "assistant", "content": "1 2 3"}],
    "system_unicode": [{"role": "system", "content": "Réponds en français."},
                       {"role": "user", "content": "Wie heißt 東京 auf Deutsch?"},
                       {"role": "assistant", "content": "Tokio. 🗼"}],
    "tools": [{"role": "system", "content": "You are careful."},
              {"role": "user", "content": "What is 2 + 3, and 40 + 2?"},
              {"role": "assistant", "content": "Let me add.", "tool_calls": [_call("add", {"a": 2, "b": 3}),
                                                                          _call("add", {"a": 40, "b": 2})]},
              {"role": "tool", "content": "5"}, {"role": "tool", "content": "42"},
              {"role": "assistant", "content": "2 + 3 = 5 and 40 + 2 = 42."},
              {"role": "user", "content": "And 1 + 1?"},
              {"role": "assistant", "tool_calls": [_call("add", {"a": 1, "b": 1})]},
              {"role": "tool", "content": "2"},
              {"role": "assistant", "content": "2"}],
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """{variant: tiny checkpoint folder}, float32, seed 0."""
    root = tmp_path_factory.mktemp("synthetic")
    return {v: S.build_checkpoint(root / v, size="tiny", variant=v) for v in S.VARIANTS}


@pytest.fixture(scope="module")
def toks(folders):
    """{variant: (rlpt tokenizer, transformers tokenizer)}."""
    return {v: (load_tokenizer(f), transformers.AutoTokenizer.from_pretrained(str(f))) for v, f in folders.items()}


def jax_leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def _texts():
    rng = random.Random(0)
    alphabet = [chr(c) for c in (*range(32, 127), *range(0xA0, 0x250), *range(0x3040, 0x30A0), 0x1F600, 0x4E2D)]
    randoms = ["".join(rng.choice(alphabet + ["\n", "\t", "  "]) for _ in range(rng.randrange(1, 60)))
               for _ in range(40)]
    tasks = [get_domain(d).generate(7, 3).prompt for d in ("arith/add", "list/sort", "str/reverse", "count/char",
                                                            "date/weekday", "tool/calculator")]
    return TEXTS + randoms + tasks


def test_encode_and_decode_match_transformers(toks):
    for variant, (tok, hf) in toks.items():
        assert tok.vocab_size == len(hf) == S.BPE_VOCAB + 5, variant
        for text in _texts():
            ids = tok.encode(text)
            assert ids == hf.encode(text, add_special_tokens=False) == hf.encode(text), (variant, text)
            assert tok.decode(ids) == hf.decode(ids) == unicodedata.normalize("NFC", text), (variant, text)
            assert tok.decode(ids, skip_special_tokens=True) == hf.decode(ids, skip_special_tokens=True)
    tok = toks["instruct"][0]
    assert tok.encode("1234567890") == [tok.token_id(d) for d in "1234567890"]  # Qwen2 splits digits one by one
    assert [tok.token_id(t) for t in (*S.SPECIAL_TOKENS, *S.TOOL_TOKENS)] == [EOT, IM_START, IM_END, TOOL_CALL,
                                                                              TOOL_CALL_END]
    assert tok.encode(TEXTS[6]).count(IM_END) == 1 and tok.encode(TEXTS[7])[0] == TOOL_CALL
    assert tok.decode(tok.encode(TEXTS[6]), skip_special_tokens=True) == "literal user\nhi\n markers"


def test_bpe_is_full_and_byte_level(folders):
    spec = json.loads((folders["instruct"] / "tokenizer.json").read_text())
    vocab, merges = spec["model"]["vocab"], spec["model"]["merges"]
    assert len(vocab) == S.BPE_VOCAB and len(merges) == S.BPE_VOCAB - 256
    assert sorted(vocab.values()) == list(range(S.BPE_VOCAB))
    assert {vocab[c] for c in pre_tokenizers.ByteLevel.alphabet()} == set(range(256))  # every byte is a token
    assert [t["id"] for t in spec["added_tokens"]] == list(range(S.BPE_VOCAB, S.BPE_VOCAB + 5))
    assert [t["special"] for t in spec["added_tokens"]] == [True, True, True, False, False]
    assert spec["normalizer"]["type"] == "NFC" and spec["decoder"]["type"] == "ByteLevel"


def _plain_template(tok):
    """The same tokenizer with the {% generation %} tags removed: rlpt then finds masks from prefix renders."""
    plain = re.sub(r"\s*\{%-? (end)?generation -?%\}", "", S.CHAT_TEMPLATE)
    assert not S.chat.has_generation_blocks(plain) and plain.count("endfor") == S.CHAT_TEMPLATE.count("endfor")
    return dataclasses.replace(tok, chat_templates={"default": plain})


@pytest.mark.parametrize("name", sorted(CHATS))
def test_chat_ids_and_assistant_masks_match_transformers(toks, name):
    tok, hf = toks["instruct"]
    plain = _plain_template(tok)
    msgs = CHATS[name]
    n_assistant = sum(m["role"] == "assistant" for m in msgs)
    for tools in (None, TOOLS):
        for gen in (False, True):
            text = tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=gen)
            assert text == hf.apply_chat_template(msgs, tools=tools, add_generation_prompt=gen, tokenize=False)
            assert text.startswith("<|im_start|>system\n")
            ref = hf.apply_chat_template(msgs, tools=tools, add_generation_prompt=gen,
                                         return_assistant_tokens_mask=True, return_dict=True)
            ids, mask = tok.encode_chat(msgs, tools=tools, add_generation_prompt=gen)
            assert (ids, mask) == (ref["input_ids"], ref["assistant_masks"]) == plain.encode_chat(
                msgs, tools=tools, add_generation_prompt=gen)
            ends = [i for i in range(len(ids)) if mask[i] and (i + 1 == len(ids) or not mask[i + 1])]
            assert len(ends) == n_assistant and all(ids[i] == IM_END and ids[i + 1] != IM_END for i in ends)
            newline = tok.encode("\n")
            assert ids[-3:] == [IM_START, tok.token_id("assistant"), *newline] if gen else ids[-2:] == [IM_END,
                                                                                                       *newline]
    # base shares the template and renders the same chat tokens
    assert toks["base"][0].encode_chat(msgs, tools=TOOLS) == tok.encode_chat(msgs, tools=TOOLS)


def test_chat_words_are_single_tokens(toks):
    """Task chats are in the corpus, so the template's fixed text tokenizes compactly."""
    tok = toks["instruct"][0]
    ids, mask = tok.encode_chat([{"role": "user", "content": "8+3="}, {"role": "assistant", "content": "11"}])
    pieces = [tok.decode([i]) for i in ids]
    assert pieces == ["<|im_start|>", "system", "\n", "You", " are", " a", " helpful", " assistant", ".",
                      "<|im_end|>", "\n", "<|im_start|>", "user", "\n", "8", "+", "3", "=", "<|im_end|>", "\n",
                      "<|im_start|>", "assistant", "\n", "1", "1", "<|im_end|>", "\n"]
    assert [p for p, m in zip(pieces, mask) if m] == ["1", "1", "<|im_end|>"]


def test_stop_ids_base_and_instruct(folders, toks):
    expected = {"instruct": ([IM_END, EOT], IM_END, "<|im_end|>"), "base": (EOT, EOT, "<|endoftext|>")}
    for variant, (gen_eos, eos_id, eos_token) in expected.items():
        gen = json.loads((folders[variant] / "generation_config.json").read_text())
        assert gen["eos_token_id"] == gen_eos and gen["pad_token_id"] == gen["bos_token_id"] == EOT
        assert transformers.GenerationConfig.from_pretrained(str(folders[variant])).eos_token_id == gen_eos
        tok, hf = toks[variant]
        assert tok.eos_id == hf.eos_token_id == eos_id and hf.eos_token == eos_token
        assert tok.eos_ids == ((IM_END, EOT) if variant == "instruct" else (EOT,))
        assert tok.pad_id == hf.pad_token_id == EOT and tok.bos_id is None and hf.bos_token is None


def test_logits_match_transformers(folders, toks):
    folder, tok = folders["instruct"], toks["instruct"][0]
    ours = load_pretrained(str(folder))
    assert ours.config == S.SIZES["tiny"]
    init = init_model(S.SIZES["tiny"], 0).params
    for a, b in zip(*(jax_leaves(t) for t in (ours.params, init))):  # the folder holds the seed-0 init exactly
        np.testing.assert_array_equal(a, b)
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(folder), attn_implementation="eager").eval()
    assert sum(p.numel() for p in hf.parameters()) == S.SIZES["tiny"].num_params()
    chat_ids, _ = tok.encode_chat(CHATS["tools"], tools=TOOLS)
    rng = np.random.default_rng(0)
    tokens = np.stack([chat_ids[:96], rng.integers(0, S.SIZES["tiny"].vocab_size, 96)])  # padded rows included
    ref = hf_logits(hf, tokens)
    assert ref.shape == (2, 96, S.SIZES["tiny"].vocab_size) and ref.std() > 0.05
    np.testing.assert_allclose(np.asarray(ours(tokens)), ref, atol=TOL, rtol=0)


def test_tokenizer_trains_to_the_same_bytes(folders, tmp_path):
    texts = S.corpus_texts()
    first = S.train_bpe(texts).to_str()
    assert S.train_bpe(texts).to_str() == first  # uncached, in this process
    # and in a fresh process (new hash seeds), through the whole build, against the folder built here
    script = "import sys; from rlpt.pipeline.synthetic import build_tokenizer; build_tokenizer().save(sys.argv[1])"
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "tokenizer.json").read_bytes() == (folders["instruct"] / "tokenizer.json").read_bytes()
    info = json.loads((folders["instruct"] / "build_info.json").read_text())
    assert set(info["corpus"]) >= {"README.md", "docs/tokenizer.md"}
    assert info["tokenizer_sha256"] == S._sha256((tmp_path / "tokenizer.json").read_bytes())


def test_cli_bf16_base_other_seed(tmp_path, capsys):
    folder = tmp_path / "cli"
    S.main([str(folder), "--size", "tiny", "--variant", "base", "--seed", "1", "--dtype", "bfloat16"])
    assert f"wrote {folder} (2,189,888 parameters, base, bfloat16)" in capsys.readouterr().out
    with safe_open(str(folder / "model.safetensors"), framework="numpy") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}
    assert json.loads((folder / "config.json").read_text())["dtype"] == "bfloat16"
    assert load_tokenizer(folder).eos_ids == (EOT,)
    loaded = load_pretrained(str(folder))
    seed1 = [np.asarray(jnp.asarray(x, jnp.bfloat16).astype(jnp.float32)) for x in
             jax_leaves(init_model(S.SIZES["tiny"], 1).params)]
    for a, b in zip(jax_leaves(loaded.params), seed1):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(SystemExit):
        S.main([str(folder), "--size", "1b"])


def test_bad_arguments_name_the_key(tmp_path):
    for kwargs, match in (({"size": "1b"}, "size='1b'"), ({"variant": "chat"}, "variant='chat'"),
                          ({"dtype": "float16"}, "dtype='float16'")):
        with pytest.raises(ValueError, match=match):
            S.build_checkpoint(tmp_path / "x", **kwargs)
    with pytest.raises(ValueError, match="variant='chat'"):
        S.build_tokenizer("chat")
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path)) + ".*README.md"):
        S.corpus_files(tmp_path)
    assert not (tmp_path / "x").exists()


def test_100m_checkpoint_and_preset(tmp_path):
    from rlpt.config import compose

    cfg = S.SIZES["100m"]
    assert 95e6 < cfg.num_params() < 105e6 and cfg.vocab_size == 151936  # Qwen2's vocabulary rows
    preset = compose(["model=qwen2_100m"]).model
    assert {k: getattr(preset, k) for k in SHAPE_FIELDS} == {k: getattr(cfg, k) for k in SHAPE_FIELDS}
    folder = S.build_checkpoint(tmp_path / "m100", size="100m", dtype="bfloat16")  # half the bytes to write
    loaded_cfg = config_from_hf(str(folder))
    assert {k: getattr(loaded_cfg, k) for k in SHAPE_FIELDS} == {k: getattr(cfg, k) for k in SHAPE_FIELDS}
    with safe_open(str(folder / "model.safetensors"), framework="numpy") as f:
        assert sum(int(np.prod(f.get_slice(k).get_shape())) for k in f.keys()) == cfg.num_params()
    tok = load_tokenizer(folder)
    ids, _ = tok.encode_chat([{"role": "user", "content": "What is 12+7?"}], add_generation_prompt=True)
    tokens = np.asarray([ids])
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    np.testing.assert_allclose(np.asarray(load_pretrained(str(folder))(tokens)), hf_logits(hf, tokens), atol=TOL,
                               rtol=0)


def test_builtin_bpe_keeps_the_builtin_protocol(tmp_path):
    """builtin_bpe: the built-in tokenizer's specials, <bos> prefix, chat template and assistant mask over word-sized
    BPE tokens; at most vocab_size ids (fewer where the texts run out of merges); lossless; the same bytes twice."""
    from rlpt.models import builtin_tokenizer

    chars = builtin_tokenizer()
    chats = [[{"role": "user", "content": f"Fix pkg/mod{i}.py: test_avg_{i} fails."},
              {"role": "assistant", "content": f'<tool_call>{{"name":"apply_patch","arguments":{{"old":"x - {i}"}}}}'
                                               "</tool_call>"},
              {"role": "tool", "content": f"patched pkg/mod{i}.py"}] for i in range(40)]
    texts = [chars.apply_chat_template(c) for c in chats]
    tok = S.builtin_bpe(texts, 400)
    assert tok.vocab_size <= 400 and S.builtin_bpe(texts, 400).backend.to_str() == tok.backend.to_str()
    assert [tok.token_id(t) for t in ("<bos>", "<|end|>", "<|assistant|>")] == [tok.bos_id, tok.eos_id,
                                                                              tok.token_id("<|assistant|>")]
    assert tok.apply_chat_template(chats[3]) == texts[3]  # the same template
    ids, mask = tok.encode_chat(chats[3])
    assert ids[0] == tok.bos_id and len(ids) < len(chars.encode_chat(chats[3])[0]) / 3  # word-sized tokens
    assert tok.decode([i for i, m in zip(ids, mask) if m]) == chats[3][1]["content"] + "<|end|>"
    text = "def f(xs):\n\treturn [x * 7 for x in xs]  # ~unseen words~"
    assert tok.decode(tok.encode(text)) == text and tok.encode(text, add_special_tokens=True)[0] == tok.bos_id
    tok.save(tmp_path)
    assert load_tokenizer(str(tmp_path)).encode_chat(chats[3]) == (ids, mask)
    with pytest.raises(ValueError, match="vocab_size"):
        S.train_bpe(texts, 5000)  # exact (the default) refuses a corpus that runs out of merges
