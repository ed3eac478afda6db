"""`python -m rlpt.eval`: overrides composed by Hydra, the final JSON line, a checkpoint through the sampler,
comparisons. The conventions shared with the other CLIs are in tests/test_cli_convention.py."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from rlpt.eval.__main__ import main
from rlpt.eval.config import parse_args

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_parse_args_types_and_errors():
    cfg = parse_args(["suite=arc", "policy=oracle", "k=[1,4]", "samples=4", "temperature=0.7", "depths=0,0.5"])
    assert cfg.k == [1, 4] and cfg.samples == 4 and cfg.temperature == 0.7 and cfg.depths == [0.0, 0.5]
    assert parse_args(["policy=oracle", "compare=a.json,b.json"]).compare == "a.json,b.json"  # one string
    assert parse_args(["policy=oracle", "suite=domains:arith/*,list/sort"]).suite == "domains:arith/*,list/sort"
    with pytest.raises(ValueError, match="Could not override 'sample'"):
        parse_args(["policy=oracle", "sample=3"])
    with pytest.raises(ValueError, match="(?s)samples=x.*converted to Integer.*full_key: samples"):
        parse_args(["policy=oracle", "samples=x"])
    with pytest.raises(ValueError, match="override 'humaneval'"):
        parse_args(["humaneval"])
    with pytest.raises(ValueError, match="needs checkpoint"):
        parse_args(["suite=arc"])
    with pytest.raises(ValueError, match="policy='gold'"):
        parse_args(["policy=gold"])


def _cli(*args, cwd=ROOT):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "rlpt.eval", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def test_cli_oracle_last_line_and_files(tmp_path):
    proc = _cli("suite=humaneval", "policy=oracle", "limit=5", "samples=3", "k=1,2,3", f"out={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert last["suite"] == "humaneval" and last["policy"] == "oracle" and last["n"] == 5
    assert last["pass1"] == 1.0 and last["pass@3"] == 1.0
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["per_domain"]["humaneval"]["pass1"] == 1.0 and len(res["records"]) == 5
    assert "| humaneval | 5 | 1.000" in (tmp_path / "results.md").read_text()


def test_cli_unknown_key_and_bad_value_name_the_key():
    proc = _cli("suite=arc", "polcy=oracle")  # Hydra rejects it at compose time (exit 1, as rlpt.train)
    assert proc.returncode == 1 and "Could not override 'polcy'" in proc.stderr
    proc = _cli("suite=arc", "policy=gold")  # a value the schema's type allows but the CLI does not
    assert proc.returncode == 2 and "policy='gold'" in proc.stderr


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory):
    from rlpt.config import compose
    from rlpt.models import builtin_tokenizer, init_model

    folder = tmp_path_factory.mktemp("tiny_hf")
    cfg = compose(["model=tiny", "model.hidden_size=32", "model.intermediate_size=64"])
    init_model(cfg.model, 0).save_pretrained(str(folder), tokenizer=builtin_tokenizer())
    return str(folder)


def test_checkpoint_eval_with_samples_and_regression_flag(tiny_hf, tmp_path):
    from rlpt.eval.checkpoint import load_policy
    from rlpt.eval.heldout import evaluate
    from rlpt.eval.suites import LoadArgs, get_suite

    out = main([f"checkpoint={tiny_hf}", "suite=quickstart", "per_domain=6", "samples=3", "k=1,2,3",
                f"out={tmp_path / 'model'}"])
    res = json.loads((tmp_path / "model" / "results.json").read_text())
    assert out["n"] == 6 and all(r["n"] == 3 for r in res["records"]) and "pass@3" in out
    assert out["pass@1"] == pytest.approx(np.mean([r["c"] / 3 for r in res["records"]]))
    model, tok, _ = load_policy(tiny_hf)  # the quickstart's own evaluator agrees on greedy pass@1
    tasks = get_suite("quickstart").load(LoadArgs(per_domain=6))
    assert evaluate(model, tok, tasks, max_new_tokens=res["max_new_tokens"])["pass1"] == out["pass1"]
    main(["suite=quickstart", "policy=oracle", "per_domain=6", f"out={tmp_path / 'oracle'}"])
    cmp = main([f"compare={tmp_path / 'oracle'},{tmp_path / 'model'}", f"out={tmp_path / 'cmp'}", "k=1,2"])
    if out["pass1"] < 1.0:  # a random tiny model: clearly worse than the oracle
        assert "all" in cmp["pass1"]["regressions"] and cmp["pass1"]["high"] < 0
    assert (tmp_path / "cmp" / "compare_pass1" / "compare.md").exists()


def test_compare_without_difference_flags_nothing(tmp_path):
    args = ["suite=group:quickstart", "per_domain=8"]
    main(args + ["policy=oracle", f"out={tmp_path / 'a'}"])
    main(args + ["policy=oracle", f"out={tmp_path / 'b'}"])
    cmp = main([f"compare={tmp_path / 'a'},{tmp_path / 'b'}", f"out={tmp_path / 'c'}"])
    assert cmp["pass1"]["regressions"] == [] and cmp["pass1"]["delta"] == 0.0
    main(args + ["policy=empty", f"out={tmp_path / 'e'}", f"baseline={tmp_path / 'a'}"])
    text = (tmp_path / "e" / "compare_pass1" / "compare.md").read_text()
    assert "REGRESSION" in text and "| list/sort | 8 |" in text


@pytest.mark.slow
def test_run_folder_orbax_params_match_the_hf_export(tmp_path):
    """A run folder loads from its hf/ export, and without one from its latest Orbax checkpoint: same params."""
    import shutil

    from omegaconf import OmegaConf

    from rlpt.config import compose
    from rlpt.eval.checkpoint import load_policy
    from rlpt.train.sft import run

    cfg = compose(["experiment=sft_tiny", "train.steps=2", "train.eval_every=0", "train.ckpt_every=2",
                   "data.batch_size=8", "model.hidden_size=32", "model.intermediate_size=64", "train.progress=false",
                   f"train.out_dir={tmp_path}", "train.export_hf=true"])
    run(cfg, print_result=False)
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
    hf_model, _, desc = load_policy(str(tmp_path))
    assert desc.startswith("hf:")
    shutil.rmtree(tmp_path / "hf")
    ob_model, tok, desc = load_policy(str(tmp_path))
    assert desc.startswith("orbax:") and desc.endswith("@2")
    import jax

    for x, y in zip(jax.tree.leaves(hf_model.params), jax.tree.leaves(ob_model.params)):
        np.testing.assert_allclose(np.asarray(x, np.float32), np.asarray(y, np.float32), rtol=1e-6, atol=1e-6)
    with pytest.raises(FileNotFoundError, match="checkpoint="):
        load_policy(str(tmp_path / "checkpoints" / "nothing"))
