"""Has a pulse: `experiment=sft_tiny` trains, evaluates held-out tasks before/after, and ends with JSON."""
import json

from rlpt.config import compose
from rlpt.train.sft import run


def test_sft_tiny_pulse(tmp_path, capsys):
    cfg = compose(["experiment=sft_tiny", "train.steps=4", "train.eval_every=2", "train.eval_samples=10",
                   "train.ckpt_every=2", "data.batch_size=8", "model.hidden_size=32", "model.intermediate_size=64",
                   "train.progress=false", f"train.out_dir={tmp_path}", "train.export_hf=true"])
    out = run(cfg)
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["steps"] == 4 and last["pass1_before"] is not None and last["pass1_after"] is not None
    assert set(out["eval"]) == {"before", "step2", "after"}
    assert (tmp_path / "hf" / "config.json").exists() and (tmp_path / "hf" / "tokenizer.json").exists()
    lines = (tmp_path / "metrics.jsonl").read_text().strip().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2, 3, 4]
