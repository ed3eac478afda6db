"""Bad data and incompatible checkpoints fail clearly and lose nothing."""
import json
import os
import re
import subprocess
import sys

import pytest

from rlpt.config import compose
from rlpt.models import builtin_tokenizer
from rlpt.train.checkpoint import IncompatibleCheckpoint
from rlpt.train.data import DataError, SFTData, read_jsonl
from rlpt.train.loop import make_trainer
from rlpt.train.losses import sft_loss


def test_malformed_jsonl_names_file_and_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "a", "completion": "b"}\n\n{"prompt": "a", "completion": \n')
    with pytest.raises(DataError, match=rf"{path}:3: invalid JSON"):
        read_jsonl(str(path), builtin_tokenizer())
    path.write_text('{"prompt": "a"}\n')
    with pytest.raises(DataError, match=rf"{path}:1: needs string 'prompt' and 'completion'"):
        read_jsonl(str(path), builtin_tokenizer())


@pytest.mark.parametrize("policy", ["truncate", "drop"])
def test_overlong_examples_are_counted(tmp_path, policy):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"prompt": "hi", "completion": "ok"}) + "\n"
                    + json.dumps({"prompt": "y" * 80, "completion": "x"}) + "\n")
    cfg = compose(["data=jsonl", f"data.sources.main.path={path}", "data.seq_len=32", "data.batch_size=2",
                   f"data.overlong={policy}"])
    data = SFTData(cfg.data, builtin_tokenizer(), 0)
    batch, metrics = data.next_batch()
    assert metrics["data/overlong"] >= 1
    assert batch["inputs"].shape == (2, 32)
    key = "dropped" if policy == "drop" else "truncated"
    assert data.state[key] >= 1


def test_incompatible_checkpoint_refused(tmp_path):
    base = ["model.hidden_size=32", "model.intermediate_size=64", "train.ckpt_every=1",
            f"train.out_dir={tmp_path}"]
    trainer = make_trainer(compose(base), sft_loss)
    trainer.checkpointer.save(1, trainer.state, {"data": {}}, force=True)
    trainer.checkpointer.close()
    before = sorted(os.listdir(tmp_path / "checkpoints"))
    with pytest.raises(IncompatibleCheckpoint, match="different model/optimizer config"):
        make_trainer(compose(base[1:] + ["model.hidden_size=64"]), sft_loss)
    assert sorted(os.listdir(tmp_path / "checkpoints")) == before


def test_checkpoint_of_another_seed_refused(tmp_path):
    """resume=auto in a folder holding another seed's run refuses instead of reporting that run as this one."""
    base = ["model.hidden_size=32", "model.intermediate_size=64", "train.ckpt_every=1", f"train.out_dir={tmp_path}"]
    trainer = make_trainer(compose(base), sft_loss)
    trainer.checkpointer.save(1, trainer.state, {"data": {}}, force=True)
    trainer.checkpointer.close()
    before = sorted(os.listdir(tmp_path / "checkpoints"))
    with pytest.raises(IncompatibleCheckpoint, match=r"train.seed=0, not train.seed=1"):
        make_trainer(compose(base + ["train.seed=1"]), sft_loss)
    assert sorted(os.listdir(tmp_path / "checkpoints")) == before
    make_trainer(compose(base), sft_loss).checkpointer.close()  # the same seed resumes


def test_progressive_length_curriculum(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"q{i}", "completion": f"a{i}"}) + "\n" for i in range(50)))
    cfg = compose(["data=jsonl", f"data.sources.main.path={path}", "data.seq_len=16", "data.batch_size=2",
                   "data.length_stages=[[2,32],[4,64]]"])
    data = SFTData(cfg.data, builtin_tokenizer(), 0)
    widths = [data.next_batch()[0]["inputs"].shape[1] for _ in range(5)]
    assert widths == [16, 16, 32, 32, 64]
    state = data.get_state()
    again = SFTData(cfg.data, builtin_tokenizer(), 0)
    again.set_state(state)
    assert again.next_batch()[0]["inputs"].shape[1] == 64
    bad = compose(["data=jsonl", f"data.sources.main.path={path}", "data.length_stages=[[4,64],[2,32]]"])
    with pytest.raises(ValueError, match="data.length_stages"):
        SFTData(bad.data, builtin_tokenizer(), 0)


# --- issue #37 item 8: bad CLI input is refused before any work, naming the key -------------------------------

REPO = os.path.join(os.path.dirname(__file__), "..", "..")


@pytest.mark.parametrize("override,key", [
    ("optim.lr=-1", "optim.lr=-1.0"), ("optim.lr=nan", "optim.lr=nan"), ("train.steps=0", "train.steps=0"),
    ("train.keep=0", "train.keep=0"), ("train.resume=sometimes", "train.resume='sometimes'"),
    ("data.batch_size=0", "data.batch_size=0"), ("optim.grad_accum=0", "optim.grad_accum=0"),
    ("rl.rollout.group_size=0", "rl.rollout.group_size=0"),
])
def test_bad_values_refused_by_preflight_naming_key(tmp_path, override, key):
    from rlpt.config.validate import ConfigError
    from rlpt.train.preflight import preflight

    with pytest.raises(ConfigError, match=re.escape(key) + " is (out of range|not allowed): expected "):
        preflight(["experiment=sft_tiny", override, f"train.out_dir={tmp_path / 'run'}"])
    assert not (tmp_path / "run").exists()


def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "rlpt.train", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)


def test_cli_refusal_is_one_line_and_writes_nothing(tmp_path):
    proc = _cli("experiment=sft_tiny", "optim.lr=nan", f"train.out_dir={tmp_path / 'run'}")
    assert proc.returncode == 2
    errors = [ln for ln in proc.stderr.splitlines() if "error" in ln.lower() and "TPU" not in ln]
    assert errors == ["rlpt.train: error: optim.lr=nan is out of range: expected (0, inf) (finite)"], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()


def test_seq_len_leaving_no_trainable_example_fails_naming_key_and_counts(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"what is {i}+{i}?", "completion": str(2 * i)}) + "\n"
                            for i in range(96)))
    for policy, why in (("drop", "all 96 are longer than 4 tokens"),
                        ("truncate", "none of the 96 keeps a completion token")):
        cfg = compose(["data=jsonl", f"data.sources.main.path={path}", "data.seq_len=4", f"data.overlong={policy}"])
        with pytest.raises(DataError, match=rf"data.seq_len=4 leaves 0 of 96 examples of data.sources.main .*{why}"):
            SFTData(cfg.data, builtin_tokenizer(), 0)
    cfg = compose(["data.seq_len=4"])  # procedural tasks: probed on their first examples
    with pytest.raises(DataError, match=r"data.seq_len=4 leaves 0 of 64 examples of data.sources.tasks"):
        SFTData(cfg.data, builtin_tokenizer(), 0, domains=(["arith/add"], [1.0], {"arith/add": [1]}))


def test_non_utf8_jsonl_names_file_and_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"prompt": "a", "completion": "b"}\n{"prompt": "\xff\xfe", "completion": "b"}\n')
    with pytest.raises(DataError, match=rf"{path}:2: not UTF-8 \(byte 0xff at column 13\)"):
        read_jsonl(str(path), builtin_tokenizer())


def _saved_run(tmp_path, hidden=32):
    """A run folder as the CLI leaves it: checkpoints of a tiny model plus config.yaml and hydra/ files."""
    base = [f"model.hidden_size={hidden}", "model.intermediate_size=64", "train.ckpt_every=1",
            f"train.out_dir={tmp_path}"]
    trainer = make_trainer(compose(base), sft_loss)
    trainer.checkpointer.save(1, trainer.state, {"data": {}}, force=True)
    trainer.checkpointer.close()
    (tmp_path / "config.yaml").write_text("the refused run must not overwrite this\n")
    (tmp_path / "hydra").mkdir()
    (tmp_path / "hydra" / "config.yaml").write_text("nor this\n")
    return base


def _folder_state(path):
    return {str(p.relative_to(path)): (p.read_bytes() if p.is_file() else None) for p in sorted(path.rglob("*"))}


@pytest.mark.parametrize("experiment", [
    ["experiment=sft_tiny"],  # refused by the preflight, before Hydra writes
    [],  # stage quickstart: refused when the stage builds its trainer; Hydra's files and config.yaml are put back
])
def test_refused_resume_leaves_config_and_hydra_untouched(tmp_path, experiment):
    _saved_run(tmp_path)
    before = _folder_state(tmp_path)
    proc = _cli(*experiment, "model.hidden_size=64", "model.intermediate_size=64", "train.ckpt_every=1",
                f"train.out_dir={tmp_path}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "different model/optimizer config" in proc.stderr and "Traceback" not in proc.stderr
    assert _folder_state(tmp_path) == before


def test_resume_never_on_a_non_empty_folder_refused_before_training(tmp_path):
    from rlpt.train.checkpoint import RunFolderError
    from rlpt.train.preflight import check_run_folder

    base = _saved_run(tmp_path)
    before = _folder_state(tmp_path)
    with pytest.raises(RunFolderError, match=r"not empty \(checkpoints, config.yaml, hydra\) and train.resume=never"):
        check_run_folder(compose(base + ["train.resume=never"]))
    # the library path (multirun, notebooks) refuses when it builds the trainer, before the first step
    with pytest.raises(RunFolderError, match=r"already holds checkpoints \(steps \[1\]\) and train.resume=never"):
        make_trainer(compose(base + ["train.resume=never"]), sft_loss)
    assert _folder_state(tmp_path) == before
    check_run_folder(compose([f"train.out_dir={tmp_path / 'new'}", "train.resume=never"]))  # a new folder is fine


def test_folder_snapshot_puts_back_what_hydra_wrote(tmp_path):
    from rlpt.train.preflight import FolderSnapshot

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("old\n")
    (run / "metrics.jsonl").write_text("{}\n")
    snap = FolderSnapshot(str(run))
    before = _folder_state(run)
    (run / "config.yaml").write_text("new\n")
    (run / "hydra").mkdir()
    (run / "hydra" / "overrides.yaml").write_text("- x\n")
    (run / "__main__.log").write_text("log\n")
    (run / "checkpoints").mkdir()
    snap.restore()
    assert _folder_state(run) == before
    fresh = tmp_path / "fresh"
    snap = FolderSnapshot(str(fresh))
    (fresh / "hydra").mkdir(parents=True)
    (fresh / "config.yaml").write_text("new\n")
    snap.restore()
    assert not fresh.exists()
