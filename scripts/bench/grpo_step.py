"""GRPO step time: rlpt (generate, reward, group advantages, one update) vs TRL's GRPOTrainer on CPU.

Model: experiments/conf/model/qwen_10m.yaml (Qwen2-style, vocab 8192, width 256, 8 layers, 8 query / 2 KV
heads, MLP 704, QKV bias, tied embeddings). The same initial weights go to TRL through `Model.save_pretrained`
and `transformers.AutoModelForCausalLM.from_pretrained`. One step = 8 prompts (32 random tokens each) x 8
samples x 64 new tokens at temperature 1, a reward on the completion text, group-normalised advantages
(std-scaled per group), PPO-clip loss with TRL's default loss_type="dapo" aggregation (token mean over the
batch), beta = 0 (no reference model), num_iterations = 1, AdamW lr 1e-4 constant, grad-norm clip 1.0, f32.
TRL: GRPOConfig(use_cpu=True, bf16=False, per_device_train_batch_size=64, num_generations=8,
max_completion_length=64, steps_per_generation=1), HF generate with its KV cache, no vLLM.
rlpt: rlpt.sampling.generate (n=8 share one prefill, KV cache), rlpt.pipeline.rl.make_batch (the registry's
grpo advantage), the jitted train step of make_trainer(rl_loss) with each group's prompt run once
(rl.exec.share_prefix, as run_rl does; TRL runs it once per sample). Tokenizer: a word-level one over the 8192
ids ("t0" ... ), so text and ids map one to one on both sides; both stop at the same eos id.

Each side runs --warmup steps (compilation, allocator warm-up) and then --steps timed steps; the median
seconds per step is reported. ratio = TRL s/step / rlpt s/step (> 1: rlpt faster). Run on a quiet machine:
with the cores oversubscribed, PyTorch's spinning threads slow the peer far more than XLA.
rlpt runs twice, steps interleaved: rollouts at f32 (the peer's precision) and at bf16 from the same f32
trainer (rl.rollout.compute_dtype=bfloat16, a bf16 sampler as in verl; the PPO ratio is taken against the bf16
rollout log-probs); ratio uses the faster, and both are printed.
Usage: python scripts/bench/grpo_step.py [--steps 5] [--warmup 1] [--rollout-dtypes float32,bfloat16]
       [--torch-threads N]
The last stdout line is one JSON object.
"""
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from rlpt.runtime import tune_malloc  # noqa: E402

# Re-exec once with glibc malloc settings (rlpt/runtime.py): both sides of the comparison run under them.
# RLPT_MALLOC_TUNING=0 measures with glibc defaults.
tune_malloc()

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, ROOT)
from rlpt.config.schema import compose  # noqa: E402
from rlpt.models import init_model  # noqa: E402
from rlpt.pipeline.producer import rollout_model  # noqa: E402
from rlpt.pipeline.rl import make_batch, rl_config, shared_prefix_group  # noqa: E402
from rlpt.rollout.single_turn import Trajectories  # noqa: E402
from rlpt.train.loop import make_trainer, to_float  # noqa: E402
from rlpt.train.losses import rl_loss  # noqa: E402

PROMPTS, GROUP, NEW, PROMPT_LEN, LR = 8, 8, 64, 32, 1e-4
PAD, EOS = 0, 1


def word_tokenizer(vocab_size: int):
    """A `tokenizers` word-level tokenizer: id i <-> 't<i>' (0 <pad>, 1 <eos>), whitespace separated."""
    import tokenizers

    vocab = {"<pad>": PAD, "<eos>": EOS} | {f"t{i}": i for i in range(2, vocab_size)}
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="t2"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tk.add_special_tokens([tokenizers.AddedToken("<pad>", special=True), tokenizers.AddedToken("<eos>", special=True)])
    return tk


def reward_text(text: str) -> float:
    """Share of completion words whose token number is divisible by 3 (the same function on both sides)."""
    words = [w for w in text.split() if w.startswith("t") and w[1:].isdigit()]
    return sum(int(w[1:]) % 3 == 0 for w in words) / max(len(words), 1)


def trl_reward(completions, **kw):
    return [reward_text(c) for c in completions]


class RlptGRPO:
    """One rlpt GRPO step: generate G samples per prompt (shared prefill), reward, make_batch, update."""

    def __init__(self, model, prompts, tk, rollout_dtype="float32"):
        self.cfg = compose(["model=qwen_10m", f"rl.rollout.compute_dtype={rollout_dtype}", "mesh=single",
                            f"rl.lr={LR}", "optim.schedule=constant",
                            "optim.warmup_steps=0", "optim.clip_norm=1.0", "optim.weight_decay=0.0",
                            "rl.algo.advantage=grpo", "rl.algo.policy_loss=ppo", "rl.algo.aggregation=token-mean",
                            "rl.algo.kl_coef=0.0", f"rl.rollout.group_size={GROUP}",
                            f"rl.rollout.max_new_tokens={NEW}", f"rl.rollout.max_prompt_len={PROMPT_LEN}",
                            "train.ckpt_every=0", "train.progress=false", "train.steps=1000"])
        self.cfg.rl.algo.policy_loss_kwargs = {"clip_low": 0.2, "clip_high": 0.2}  # TRL: epsilon 0.2 both sides
        # As run_rl builds it: each group's prompt runs through the update once (rl.exec.share_prefix).
        self.trainer = make_trainer(rl_config(self.cfg), rl_loss(self.cfg.rl.algo, shared_prefix_group(self.cfg)),
                                    init=model)
        self.prompts, self.tk, self.n = prompts, tk, 0

    def __call__(self) -> dict:
        from rlpt.sampling import generate

        t0 = time.perf_counter()
        self.n += 1
        policy = rollout_model(self.trainer.model(), self.cfg.rl.rollout)  # what run_rl's producer samples with
        out = generate(policy, self.prompts, NEW, n=GROUP, temperature=1.0, stop_ids=(EOS,),
                       seed=self.n, keep_state=False)
        tokens, lengths = np.asarray(out.tokens), np.asarray(out.lengths)
        texts = self.tk.decode_batch([row[:n].tolist() for row, n in zip(tokens, lengths)])
        rewards = np.asarray([reward_text(t) for t in texts], np.float32)
        t1 = time.perf_counter()
        traj = Trajectories(tasks=[None] * PROMPTS, prompts=[p for p in self.prompts for _ in range(GROUP)],
                            response=tokens, lengths=lengths, rollout_logp=np.asarray(out.logprobs, np.float32),
                            rewards=rewards, passed=rewards > 0.5, group_ids=np.repeat(np.arange(PROMPTS), GROUP),
                            truncated=np.array([f != "stop" for f in out.finish_reason]), version=self.n,
                            gen_s=t1 - t0, verify_s=0.0, texts=texts)
        batch, _ = make_batch(traj, self.cfg, PROMPT_LEN + NEW)
        metrics = to_float(self.trainer.step(batch))
        return {"s": time.perf_counter() - t0, "generate_s": t1 - t0, "update_s": time.perf_counter() - t1,
                "reward": float(rewards.mean()), "loss": metrics["loss"]}


def run_trl(folder, prompt_texts, tk, steps: int, warmup: int):
    import datasets
    import torch
    import transformers
    from trl import GRPOConfig, GRPOTrainer

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    proc = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>")
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = EOS, PAD
    total = steps + warmup
    data = datasets.Dataset.from_dict({"prompt": prompt_texts * total})
    times, rewards = [], []

    class Timer(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter() - self.t)

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "reward" in logs:
                rewards.append(logs["reward"])

    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(output_dir=out, use_cpu=True, bf16=False, per_device_train_batch_size=PROMPTS * GROUP,
                          gradient_accumulation_steps=1, steps_per_generation=1, num_generations=GROUP,
                          max_completion_length=NEW, temperature=1.0, top_k=0, top_p=1.0, beta=0.0,
                          num_iterations=1, epsilon=0.2, loss_type="dapo", scale_rewards="group",
                          learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=1.0,
                          weight_decay=0.0, max_steps=total, logging_steps=1, report_to="none",
                          save_strategy="no", shuffle_dataset=False, seed=0, disable_dropout=True,
                          gradient_checkpointing=False)
        trainer = GRPOTrainer(model=model, reward_funcs=trl_reward, args=args, train_dataset=data,
                              processing_class=proc, callbacks=[Timer()])
        trainer.train()
    return times[warmup:], rewards


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5, help="timed steps per side (median reported)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed first steps per side (compilation)")
    ap.add_argument("--rollout-dtypes", default="float32,bfloat16",
                    help="rlpt rollout compute dtypes (rl.rollout.compute_dtype), each a variant; the trainer is f32")
    ap.add_argument("--torch-threads", type=int, default=0, help="torch.set_num_threads (0: its default)")
    args = ap.parse_args()
    import torch
    import transformers
    import trl

    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    cfg = compose(["model=qwen_10m"]).model
    model = init_model(cfg, seed=0)
    tk = word_tokenizer(cfg.vocab_size)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(2, cfg.vocab_size, PROMPT_LEN).tolist() for _ in range(PROMPTS)]
    prompt_texts = [" ".join(f"t{i}" for i in p) for p in prompts]
    assert [tk.encode(t).ids for t in prompt_texts] == prompts
    n_params = int(sum(np.size(x) for x in jax.tree.leaves(model.params)))
    print(f"model: {n_params / 1e6:.2f}M params; step: {PROMPTS} prompts x {GROUP} samples x {NEW} new tokens; "
          f"jax {jax.__version__}, torch {torch.__version__} ({torch.get_num_threads()} threads), "
          f"transformers {transformers.__version__}, trl {trl.__version__}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        # f32 rollouts (the peer's precision) and bf16 rollouts from the same f32 trainer
        # (rl.rollout.compute_dtype=bfloat16), their steps interleaved
        variants = {dt: RlptGRPO(model, prompts, tk, dt) for dt in args.rollout_dtypes.split(",")}
        t0 = time.perf_counter()
        for _ in range(args.warmup):
            for ours in variants.values():
                ours()
        print(f"rlpt warm-up (compile) {time.perf_counter() - t0:.1f} s", flush=True)
        rows = {dt: [] for dt in variants}
        for _ in range(args.steps):
            for dt, ours in variants.items():
                r = ours()
                rows[dt].append(r)
                print(f"rlpt ({dt} rollouts) step {r['s']:.3f} s (generate {r['generate_s']:.3f}, update "
                      f"{r['update_s']:.3f}), reward {r['reward']:.3f}", flush=True)
        trl_times, trl_rewards = run_trl(folder, prompt_texts, tk, args.steps, args.warmup)
    for t in trl_times:
        print(f"trl  step {t:.3f} s", flush=True)
    peer_s = float(np.median(trl_times))
    med = {dt: {k: float(np.median([r[k] for r in rs])) for k in ("s", "generate_s", "update_s")}
           for dt, rs in rows.items()}
    for dt, m in med.items():
        print(f"rlpt ({dt} rollouts) {m['s']:.3f} s/step (generate {m['generate_s']:.3f}, update "
              f"{m['update_s']:.3f}); TRL GRPOTrainer {peer_s:.3f} s/step; ratio {peer_s / m['s']:.2f}x", flush=True)
    best = min(med, key=lambda dt: med[dt]["s"])
    ours_s = med[best]["s"]
    print(json.dumps({"benchmark": "grpo_step", "ours": round(ours_s, 4), "peer": round(peer_s, 4),
                      "unit": "s/step", "ratio": round(peer_s / ours_s, 3), "goal": 5,
                      "ours_name": f"rlpt, f32 trainer, {best} rollouts", "peer_name": "TRL GRPOTrainer (f32)",
                      "per_rollout_dtype": {dt: {"s": round(m["s"], 4), "ratio": round(peer_s / m["s"], 3)}
                                            for dt, m in med.items()},
                      "steps": args.steps,
                      "reward_ours": float(np.mean([r["reward"] for rs in rows.values() for r in rs])),
                      "reward_peer": float(np.mean(trl_rewards)) if trl_rewards else None,
                      "torch_threads": torch.get_num_threads(), "n_params": n_params}))


if __name__ == "__main__":
    main()
