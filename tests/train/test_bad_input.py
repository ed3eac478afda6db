"""Bad data and incompatible checkpoints fail clearly and lose nothing."""
import json
import os

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
