"""Effective context: generated haystacks, the lengths x depths grid, effective context and the heatmap PNG."""
import json
import re

import numpy as np
import pytest

from rlpt.eval.__main__ import main
from rlpt.eval.needle import check, effective_context, make_task
from rlpt.models import builtin_tokenizer
from rlpt.rollout.format import prompt_ids

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("hops", [1, 2])
def test_documents_hit_the_length_and_depth(hops):
    tok = builtin_tokenizer()
    for length in (1024, 4096):
        for depth in (0.0, 0.5, 1.0):
            t = make_task(tok, length, depth, 0, hops, seed=0)
            n = len(prompt_ids(tok, t.prompt))
            assert t.meta["prompt_tokens"] == n and 0.95 * length <= n <= length, (length, n)
            doc = t.prompt.split("Document:\n", 1)[1].split("\n\nQuestion:")[0]
            key = "The secret number of" if hops == 1 else " holds the key to the vault"
            first = re.search(re.escape(key) + r".*?\.", doc) if hops == 2 else None
            name = t.prompt.split("Question: ")[1].split("?")[0].split()[-1] if hops == 1 else None
            hit = re.search(f"The secret number of {name} is \\d+\\.", doc) if hops == 1 else first
            frac = hit.start() / (len(doc) - len(hit.group()))  # 0: first sentence, 1: last sentence
            assert abs(frac - depth) < 0.03, (length, depth, frac)
    assert make_task(tok, 2048, 0.5, 1, hops, 0).prompt == make_task(tok, 2048, 0.5, 1, hops, 0).prompt  # seeded


def test_too_short_length_is_refused():
    with pytest.raises(ValueError, match="lengths: 128 tokens cannot hold"):
        make_task(builtin_tokenizer(), 128, 0.5, 0, 2, seed=0)


def test_check_rejects_shotgun_and_wrong_values():
    t = make_task(builtin_tokenizer(), 1024, 0.5, 0, 1, seed=0)
    gold = t.meta["answer"]
    assert check(t, gold).passed and check(t, f"The secret number is {gold}.").passed
    assert not check(t, "").passed and not check(t, f"{gold} 123456").passed
    assert not check(t, str(int(gold) + 1)).passed


def test_effective_context_is_the_last_length_of_the_passing_prefix():
    lengths = [1024, 2048, 4096, 8192]
    grid = np.array([[1, 1, 0.5, 1], [1, 0.8, 0.9, 1]])  # depth-mean 1, 0.9, 0.7, 1
    assert effective_context(grid, lengths, 0.8) == 2048
    assert effective_context(grid, lengths, 0.95) == 1024
    assert effective_context(np.zeros((2, 4)), lengths, 0.5) == 0


@pytest.mark.parametrize("suite", ["needle", "multihop"])
def test_oracle_and_empty_grid_with_plot(tmp_path, suite):
    args = [f"suite={suite}", "lengths=512,1024,2048", "depths=0,0.5,1", "trials=2"]
    good = main(args + ["policy=oracle", f"out={tmp_path / 'o'}"])
    assert good["pass1"] == 1.0 and good["effective_context"] == 2048
    assert np.all(np.array(good["accuracy"]) == 1.0)
    png = (tmp_path / "o" / "needle.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 5000
    bad = main(args + ["policy=empty", f"out={tmp_path / 'e'}"])
    assert bad["pass1"] == 0.0 and bad["effective_context"] == 0
    assert json.loads((tmp_path / "e" / "needle.json").read_text())["accuracy"] == [[0.0] * 3] * 3


def test_model_grid_with_plot(tmp_path):
    """A tiny model runs the grid through the sampler and gets a heatmap and its nominal context."""
    from rlpt.config import compose
    from rlpt.models import init_model

    folder = tmp_path / "hf"
    cfg = compose(["model=tiny", "model.hidden_size=32", "model.intermediate_size=64"])
    init_model(cfg.model, 0).save_pretrained(str(folder), tokenizer=builtin_tokenizer())
    out = main([f"checkpoint={folder}", "suite=needle", "lengths=320,480", "depths=0,1", "trials=1",
                f"out={tmp_path / 'm'}"])
    assert out["nominal_context"] == cfg.model.max_position_embeddings
    assert set(out["prompt_tokens"]) == {"320", "480"} and out["prompt_tokens"]["480"] <= 480
    assert (tmp_path / "m" / "needle.png").read_bytes().startswith(PNG_MAGIC)


@pytest.mark.slow
def test_oracle_grid_up_to_128k(tmp_path):
    lengths = [1024, 4096, 16384, 65536, 131072]
    out = main(["suite=multihop", "policy=oracle", "lengths=" + ",".join(map(str, lengths)), "depths=0,0.5,1",
                "trials=1", f"out={tmp_path}"])
    assert out["effective_context"] == 131072
    assert 0.95 * 131072 <= out["prompt_tokens"]["131072"] <= 131072
    assert (tmp_path / "needle.png").read_bytes().startswith(PNG_MAGIC)
