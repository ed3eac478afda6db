"""train.init_from is the source of truth: architecture, tokenizer and stop ids come from the HF folder; a
setting that contradicts it is a named error; stage=rl trains from it and exports a folder transformers loads."""
import json
import os
import shutil

import numpy as np
import pytest

from rlpt.config import compose
from rlpt.models import ModelConfig, init_model, load_pretrained, load_tokenizer
from rlpt.train.source import CheckpointConflict, check_checkpoint_source, model_config, run_tokenizer
from tests.models.tokenizer_fixtures import llama_folder, qwen_folder

# Qwen2-shaped, vocab 512 (the BPE fixture has ~405 ids): nothing like the model=tiny preset (vocab 128, D=128).
CKPT = ModelConfig(family="qwen2", vocab_size=512, hidden_size=48, intermediate_size=96, num_layers=2, num_heads=4,
                   num_kv_heads=2, qkv_bias=True, tie_embeddings=True, max_position_embeddings=256)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    folder = qwen_folder(tmp_path_factory.mktemp("qwen_ckpt"))
    init_model(CKPT, seed=3).save_pretrained(str(folder))
    return str(folder)


def small(folder, *extra):
    return [f"train.init_from={folder}", "train.progress=false", "train.ckpt_every=0", *extra]


def test_model_tokenizer_and_stop_ids_come_from_the_checkpoint(ckpt):
    cfg = compose(small(ckpt, "model.compute_dtype=bfloat16"))  # a runtime setting is not a conflict
    mc = model_config(cfg)
    assert (mc.vocab_size, mc.hidden_size, mc.num_layers, mc.compute_dtype) == (512, 48, 2, "bfloat16")
    tok = run_tokenizer(cfg)
    own = load_tokenizer(ckpt)
    assert tok.backend.to_str() == own.backend.to_str() and tok.vocab_size == own.vocab_size > 128
    # Qwen2.5-Instruct: <|im_end|> ends a turn, generation_config.json adds <|endoftext|>
    assert tok.eos_ids == (own.token_id("<|im_end|>"), own.token_id("<|endoftext|>"))


@pytest.mark.parametrize("override, key", [
    ("model.vocab_size=128", "model.vocab_size"),
    ("model.hidden_size=64", "model.hidden_size"),
    ("model=qwen3_tiny", "model."),
    ("model.rope_theta=500000.0", "model.rope_theta"),
])
def test_contradicting_model_override_is_named(ckpt, override, key):
    with pytest.raises(CheckpointConflict, match=key) as e:
        compose(small(ckpt, override))
    assert "train.init_from" in str(e.value)


def test_contradicting_tokenizer_is_named(ckpt, tmp_path):
    with pytest.raises(CheckpointConflict, match="data.tokenizer=builtin"):
        compose(small(ckpt, "data.tokenizer=builtin"))
    other = llama_folder(tmp_path / "llama_tok")
    with pytest.raises(CheckpointConflict, match="data.tokenizer=.*is not the tokenizer"):
        compose(small(ckpt, f"data.tokenizer={other}"))
    copy = tmp_path / "same_tok"
    copy.mkdir()
    shutil.copy(f"{ckpt}/tokenizer.json", copy / "tokenizer.json")
    compose(small(ckpt, f"data.tokenizer={copy}"))  # the same tokenizer.json elsewhere is fine


def test_config_built_in_code_is_checked_too(ckpt):
    import dataclasses

    cfg = compose(small(ckpt))
    check_checkpoint_source(cfg)  # the untouched tiny preset is not "set by the user"
    bad = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, num_layers=5))
    with pytest.raises(CheckpointConflict, match="model.num_layers=5"):
        check_checkpoint_source(bad)


def test_checkpoint_without_tokenizer_needs_one(ckpt, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in ("config.json", "model.safetensors"):
        shutil.copy(f"{ckpt}/{f}", bare / f)
    with pytest.raises(CheckpointConflict, match="has no tokenizer.json"):
        run_tokenizer(compose(small(bare)))
    assert run_tokenizer(compose(small(bare, f"data.tokenizer={ckpt}"))).vocab_size == load_tokenizer(ckpt).vocab_size


def test_sft_run_trains_the_checkpoint_with_its_tokenizer(ckpt, tmp_path, capsys):
    from rlpt.train.stages import run_stage

    cfg = compose(small(ckpt, "stage=sft", "experiment=sft_tiny", "train.steps=2", "train.eval_every=0",
                        "data.batch_size=4", "data.seq_len=128", f"train.out_dir={tmp_path}", "train.export_hf=true"))
    out = run_stage(cfg)
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["tokenizer"] == ckpt and summary["vocab_size"] == CKPT.vocab_size
    assert out["model"].config.vocab_size == CKPT.vocab_size and out["model"].config.hidden_size == CKPT.hidden_size
    exported = tmp_path / "hf"
    assert (exported / "tokenizer.json").read_text() == (open(f"{ckpt}/tokenizer.json").read())
    assert load_tokenizer(exported).eos_ids == load_tokenizer(ckpt).eos_ids


def test_rl_stage_from_checkpoint_exports_what_transformers_loads(ckpt, tmp_path, capsys):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from rlpt.train.stages import run_stage

    cfg = compose(small(ckpt, "stage=rl", "lora.rank=4", "rl.steps=2", "rl.rollout.prompts_per_step=4",
                        "rl.rollout.group_size=2", "rl.rollout.max_new_tokens=4", "rl.rollout.max_prompt_len=96",
                        "rl.eval_per_domain=4", "domains.include=[arith/add]", "observe.tensorboard=false",
                        "rl.algo.entropy_coef=0.01",  # zero-reward groups: the entropy term still moves LoRA's B
                        f"train.out_dir={tmp_path}", "train.export_hf=true"))
    out = run_stage(cfg)
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["stage"] == "rl" and summary["rl_steps"] == 2 and summary["tokenizer"] == ckpt
    assert summary["pass1_before"] is not None and summary["pass1_after"] is not None
    exported = str(tmp_path / "hf")
    ours = load_pretrained(exported)
    # the exported weights are the trained policy (LoRA merged), not the starting checkpoint
    trained = out["model"].params["layers"]["wq"]
    np.testing.assert_allclose(np.asarray(ours.params["layers"]["wq"]), np.asarray(trained), rtol=0, atol=0)
    assert not np.array_equal(np.asarray(trained), np.asarray(load_pretrained(ckpt).params["layers"]["wq"]))
    hf = transformers.AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32).eval()
    tokens = np.asarray([load_tokenizer(exported).encode("12+7=19 and some text")], np.int32)
    with torch.no_grad():
        ref = hf(torch.from_numpy(tokens.astype(np.int64))).logits.numpy()
    np.testing.assert_allclose(np.asarray(ours(tokens)), ref, atol=1e-4, rtol=0)
    assert transformers.AutoTokenizer.from_pretrained(exported)("12+7=19")["input_ids"] == \
        load_tokenizer(exported).encode("12+7=19")
    umask = os.umask(0)
    os.umask(umask)  # the weights get the mode open() gives (safetensors alone makes them owner-only)
    assert os.stat(tmp_path / "hf" / "model.safetensors").st_mode & 0o777 == 0o666 & ~umask
    gen = json.loads((tmp_path / "hf" / "generation_config.json").read_text())
    assert gen["eos_token_id"] == list(load_tokenizer(ckpt).eos_ids)


def test_reward_model_and_ppo_rlhf_stages_start_from_the_checkpoint(ckpt, tmp_path, capsys):
    """stage=rm trains its reward model on the checkpoint's backbone and tokenizer; stage=ppo_rlhf then trains the
    checkpoint as the policy with that reward model, and exports it with the checkpoint's tokenizer."""
    from rlpt.train.stages import run_stage

    common = small(ckpt, "domains.include=[arith/add]", "pref.source=synthetic", "pref.train_tasks=16",
                   "pref.heldout_tasks=8", "pref.max_len=128", "rl.rollout.max_prompt_len=96",
                   "rl.rollout.max_new_tokens=4")
    run_stage(compose([*common, "stage=rm", "pref.rm_steps=2", "pref.rm_batch_size=4", f"train.out_dir={tmp_path}/rm"]))
    rm = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rm["stage"] == "rm" and rm["tokenizer"] == ckpt and rm["vocab_size"] == CKPT.vocab_size
    out = run_stage(compose([*common, "stage=ppo_rlhf", f"pref.rm_path={tmp_path}/rm/reward_model", "rl.steps=2",
                             "rl.rollout.prompts_per_step=2", "rl.rollout.group_size=2", "pref.eval_per_domain=2",
                             "observe.tensorboard=false", "train.export_hf=true", f"train.out_dir={tmp_path}/ppo"]))
    ppo = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert ppo["stage"] == "ppo_rlhf" and ppo["tokenizer"] == ckpt and ppo["vocab_size"] == CKPT.vocab_size
    assert [h["step"] for h in out["history"]] == [1, 2]
    assert load_tokenizer(f"{tmp_path}/ppo/hf").eos_ids == load_tokenizer(ckpt).eos_ids
    assert load_pretrained(f"{tmp_path}/ppo/hf").config.vocab_size == CKPT.vocab_size
