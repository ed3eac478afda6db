"""rl.rollout.refill=true: RL rollouts decode in a static batch of slots refilled as samples finish, and the run
is the one plain batches give (each sample draws from its own per-row stream)."""
from rlpt.config import compose

TINY = ["model.hidden_size=32", "model.intermediate_size=64", "rl.rollout.prompts_per_step=4",
        "rl.rollout.group_size=4", "domains.include=[arith/add]", "train.ckpt_every=0", "train.progress=false",
        "rl.rollout.max_new_tokens=32", "rl.rollout.max_prompt_len=24", "rl.steps=2", "observe.tensorboard=false",
        "reward=short"]
SAME = ("reward_mean", "response_len", "tokens_generated", "loss")


def test_refill_run_equals_plain_run(tmp_path, monkeypatch):
    from rlpt.models import builtin_tokenizer, init_model
    from rlpt.pipeline.rl import run_rl
    from rlpt.rollout import single_turn

    calls, refill_fn = [], single_turn.generate_refill
    monkeypatch.setattr(single_turn, "generate_refill",
                        lambda *a, **kw: calls.append(kw["slots"]) or refill_fn(*a, **kw))
    hist = {}
    for refill in ("false", "true"):
        cfg = compose(TINY + [f"rl.rollout.refill={refill}", "rl.rollout.refill_slots=6"])
        res = run_rl(cfg, builtin_tokenizer(), init_model=init_model(cfg.model, 0), out_dir=str(tmp_path / refill))
        hist[refill] = [{k: h[k] for k in SAME} for h in res["history"]]
    print(hist)
    assert calls == [6, 6]  # the refill run decoded through generate_refill, with the configured slots
    assert any(h["loss"] != 0 for h in hist["true"])  # `short` pays different lengths differently: real updates
    for a, b in zip(hist["false"], hist["true"]):
        assert a["reward_mean"] == b["reward_mean"] and a["response_len"] == b["response_len"]
        assert a["tokens_generated"] == b["tokens_generated"]
        assert abs(a["loss"] - b["loss"]) < 1e-4
