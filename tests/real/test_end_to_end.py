"""A real small model end to end: SFT -> GRPO (LoRA) -> DPO -> HF export on a Qwen2-shaped checkpoint with a real
BPE tokenizer (built here: tests/real/conftest.py), each stage starting from the previous stage's HF export.

Every stage must run on the checkpoint's own tokenizer and vocabulary, and the final export must load in
transformers with the same logits as rlpt (<= 1e-4, f32).
"""
import json

import numpy as np
import pytest

from rlpt.config import compose
from rlpt.models import load_pretrained, load_tokenizer
from rlpt.train.stages import run_stage

COMMON = ["train.progress=false", "train.ckpt_every=0", "train.export_hf=true", "observe.tensorboard=false",
          "domains.include=[arith/add]", "domains.tiers=[1]"]
SFT = ["stage=sft", "experiment=sft_tiny", "train.steps=2", "train.eval_every=0", "data.batch_size=4",
       "data.seq_len=128"]
RL = ["stage=rl", "lora.rank=8", "rl.steps=2", "rl.rollout.prompts_per_step=2", "rl.rollout.group_size=2",
      "rl.rollout.max_new_tokens=4", "rl.rollout.max_prompt_len=128", "rl.eval_per_domain=2",
      "rl.algo.entropy_coef=0.01"]
DPO = ["stage=dpo", "pref.source=synthetic", "pref.steps=2", "pref.batch_size=2", "pref.train_tasks=8",
       "pref.heldout_tasks=4", "pref.max_len=128", "pref.eval_per_domain=2", "rl.rollout.max_new_tokens=4"]


def last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def chain(ckpt: str, tmp_path, capsys) -> str:
    """SFT -> RL -> DPO, each from the previous export; returns the final HF folder."""
    tok_json = open(f"{ckpt}/tokenizer.json").read()
    folder = ckpt
    for name, stage in (("sft", SFT), ("rl", RL), ("dpo", DPO)):
        out = tmp_path / name
        run_stage(compose([*COMMON, *stage, f"train.init_from={folder}", f"train.out_dir={out}"]))
        summary = last_json(capsys)
        assert summary["tokenizer"] == folder, name
        assert summary["vocab_size"] == load_pretrained(ckpt).config.vocab_size, name
        folder = str(out / "hf")
        # the run's tokenizer and stop ids travel with every export, byte for byte
        assert open(f"{folder}/tokenizer.json").read() == tok_json, name
        assert load_tokenizer(folder).eos_ids == load_tokenizer(ckpt).eos_ids, name
    return folder


def check_transformers_parity(folder: str):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    ours = load_pretrained(folder)
    tok = load_tokenizer(folder)
    ids, _ = tok.encode_chat([{"role": "user", "content": "What is 12+7?"}], add_generation_prompt=True)
    tokens = np.asarray([ids], np.int32)
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        ref = hf(torch.from_numpy(tokens.astype(np.int64))).logits.numpy()
    np.testing.assert_allclose(np.asarray(ours(tokens)), ref, atol=1e-4, rtol=0)
    hf_tok = transformers.AutoTokenizer.from_pretrained(folder)
    assert hf_tok.apply_chat_template([{"role": "user", "content": "What is 12+7?"}], add_generation_prompt=True,
                                      tokenize=True, return_dict=True)["input_ids"] == ids


def test_tiny_real_checkpoint_sft_rl_dpo_export(real_ckpt_tiny, tmp_path, capsys):
    check_transformers_parity(chain(real_ckpt_tiny, tmp_path, capsys))


@pytest.mark.slow
def test_100m_real_checkpoint_sft_rl_dpo_export(real_ckpt_100m, tmp_path, capsys):
    check_transformers_parity(chain(real_ckpt_100m, tmp_path, capsys))
