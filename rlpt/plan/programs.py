"""The programs a run compiles, built abstractly: sharded `jax.ShapeDtypeStruct`s for the train state and batches
(nothing allocated), and the real jitted train step (SFT / DPO / RL update) and sampler prefill and decode loop."""
import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from rlpt.algos import REFERENCE_FREE
from rlpt.models.config import ModelConfig, resolved_remat
from rlpt.models.transformer import init_params, param_axes
from rlpt.parallel.rules import logical_spec, named_sharding
from rlpt.rollout.format import fit_width
from rlpt.sampling import engine
from rlpt.sampling.generate import plan_cache, prefill_copies
from rlpt.sampling.methods import make_methods
from rlpt.sampling.sharding import CACHE_AXES
from rlpt.train.lora import init_lora, lora_axes, lora_params
from rlpt.train.losses import rl_loss, sft_loss
from rlpt.train.optim import make_optimizer
from rlpt.train.state import create_state
from rlpt.train.step import build_train_step

STAGES = ("sft", "dpo", "rl")
PLANNED_AS = {"quickstart": "rl", "agent": "rl"}  # train stages that run the RL update


@dataclasses.dataclass
class Program:
    """One jitted function and abstract arguments to lower it with; `flops` is the analytic count (all devices)."""

    name: str
    fn: Callable
    args: tuple
    kwargs: dict
    flops: float
    flops_formula: str
    resident: dict = dataclasses.field(default_factory=dict)  # abstract buffers alive beside it, not its inputs


def sds(shape, dtype, sharding) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype), sharding=sharding)


def with_shardings(shapes, shardings):
    return jax.tree.map(lambda a, s: sds(a.shape, a.dtype, s), shapes, shardings)


def abstract_params(model_cfg: ModelConfig, mesh) -> dict:
    """The parameter pytree as sharded ShapeDtypeStructs: shapes from `jax.eval_shape` over the real init,
    shardings from the active logical-axis rules (as `init_model(mesh=...)` places them)."""
    shapes = jax.eval_shape(lambda: init_params(model_cfg, jax.random.key(0)))
    return jax.tree.map(lambda names, s: sds(s.shape, s.dtype, named_sharding(mesh, names, s.shape)),
                        param_axes(model_cfg), shapes, is_leaf=lambda x: isinstance(x, tuple))


def abstract_batch(arrays: dict, mesh, num_micro: int) -> dict:
    """{key: ((B, ...), dtype)} -> (A, B/A, ...) ShapeDtypeStructs sharded as `rlpt.train.loop.shard_batch`
    places a host batch (micro-batch axis whole, rows over the batch axes, columns over seq)."""
    out = {}
    for k, (shape, dtype) in arrays.items():
        if shape[0] % num_micro:
            raise ValueError(f"batch {k}: {shape[0]} rows are not divisible by optim.grad_accum={num_micro}")
        full = (num_micro, shape[0] // num_micro, *shape[1:])
        names = (None, "batch", "act_seq")[:len(full)]
        out[k] = sds(full, dtype, NamedSharding(mesh, logical_spec(names, full, mesh)))
    return out


def _rows(B: int, T: int, floats=("loss_mask",), prefix: str = "") -> dict:
    out = {prefix + k: ((B, T), jnp.int32) for k in ("inputs", "targets", "positions", "segment_ids")}
    return out | {prefix + k: ((B, T), jnp.float32) for k in floats}


def body_params(m: ModelConfig) -> int:
    """Parameters multiplied per token in the layers (the embedding lookup and the LM head excluded)."""
    D, F, H, KV, Dh, L = m.hidden_size, m.intermediate_size, m.num_heads, m.num_kv_heads, m.head_dim, m.num_layers
    return L * (D * Dh * (H + 2 * KV) + H * Dh * D + 3 * D * F)


def attention_flops(m: ModelConfig, queries: float, keys: float) -> float:
    """Forward FLOPs of QK^T and PV for `queries` tokens each over `keys` keys (on average)."""
    return 4.0 * m.num_layers * m.num_heads * m.head_dim * queries * keys


def train_flops(m: ModelConfig, body_tokens: float, head_tokens: float, attn_fwd: float, forwards_only: float = 0.0):
    """6 N T for the trained forward+backward (body, head and attention x3), + one forward per extra pass
    (a KL reference), + the recomputed forward under remat."""
    fwd = 2 * body_params(m) * body_tokens + 2 * m.vocab_size * m.hidden_size * head_tokens + attn_fwd
    recompute = 2 * body_params(m) * body_tokens + attn_fwd if resolved_remat(m) == "full" else 0.0
    return 3 * fwd + recompute + forwards_only * fwd


def train_program(cfg, model_cfg: ModelConfig, mesh) -> Program:
    """The stage's train step as the stage builds it (`rlpt.train.step.build_train_step`), with abstract state."""
    from rlpt.train.loop import state_shardings  # on use (start-up: orbax/tensorboard)

    stage, A = PLANNED_AS.get(cfg.stage, cfg.stage), cfg.optim.grad_accum
    params = abstract_params(model_cfg, mesh)
    frozen_ref, steps = False, cfg.train.steps
    if stage == "sft":
        B, T = cfg.data.batch_size, cfg.data.seq_len
        arrays, loss = _rows(B, T), sft_loss
        flops = train_flops(model_cfg, B * T, B * T, attention_flops(model_cfg, B * T, T / 2))
        formula, name = f"6·N·T, T = {B} x {T} tokens (+ causal attention)", "train_step"
    elif stage == "dpo":
        from rlpt.preference.dpo import preference_loss, row_groups  # on use (start-up: orbax/tensorboard)

        p = cfg.pref
        groups = row_groups(p.loss)
        needs_ref = p.loss not in REFERENCE_FREE
        frozen_ref, steps = needs_ref and p.ref == "online", p.steps
        B, T = p.batch_size, p.max_len
        arrays = {}
        for g in groups:
            arrays |= _rows(B, T, floats=("mask",), prefix=g)
            if needs_ref and p.ref == "precompute":
                arrays["ref_" + g] = ((B,), jnp.float32)
        loss = preference_loss(p)
        n = B * T * len(groups)
        flops = train_flops(model_cfg, n, n, attention_flops(model_cfg, n, T / 2), forwards_only=float(frozen_ref))
        formula, name = f"6·N·T, T = {len(groups)} x {B} x {T} tokens (+ online reference forward)", "dpo_step"
    elif stage == "rl":
        from rlpt.pipeline.rl import shared_prefix_group  # on use (start-up: orbax/tensorboard)

        r, algo = cfg.rl.rollout, cfg.rl.algo
        B, T = r.prompts_per_step * r.group_size, r.max_prompt_len + r.max_new_tokens
        arrays = _rows(B, T, floats=("loss_mask", "rollout_logp", "advantages", "old_logp"))
        group = shared_prefix_group(cfg)
        body, head = B * T, B * T
        if cfg.rl.exec.logits_window:
            K = fit_width(r.max_new_tokens, T)
            arrays["window"] = ((B, K), jnp.int32)
            head = B * K
            if group is not None:
                body = r.prompts_per_step * (T - K) + B * K
        frozen_ref, steps = algo.kl_coef > 0, cfg.rl.steps  # kl_in loss or reward
        loss = rl_loss(algo, group, cfg.data.cp_layout)  # as run_rl builds it (streams laid out for mesh.seq)
        flops = train_flops(model_cfg, body, head, attention_flops(model_cfg, B * T, T / 2),
                            forwards_only=float(frozen_ref))
        window_only = cfg.rl.exec.logits_window
        formula, name = (f"6·N·T over the update's tokens ({B} rows x {T}; prompt once per group: "
                         f"{group is not None}; head on the response window only: {window_only})"), "rl_update"
    else:
        raise ValueError(f"stage={stage!r}; the rehearsal plans one of {STAGES}")
    optimizer = make_optimizer(cfg.optim, steps)
    frozen, params_fn, trainable = ({"ref": params} if frozen_ref else {}), None, params
    if cfg.lora.rank > 0:
        frozen["base"] = params
        shapes = jax.eval_shape(lambda p: init_lora(p, cfg.lora, jax.random.key(0)), params)
        trainable = jax.tree.map(lambda names, s: sds(s.shape, s.dtype, named_sharding(mesh, names, s.shape)),
                                 lora_axes(cfg.lora), shapes, is_leaf=lambda x: isinstance(x, tuple))

        def params_fn(adapters, fr):  # as make_trainer: the adapters applied in the forward pass, not merged
            return lora_params(fr["base"], adapters, cfg.lora)
    shardings = state_shardings(optimizer, trainable, frozen, mesh)
    state = with_shardings(jax.eval_shape(lambda p, f: create_state(p, optimizer, cfg.train.seed, f),
                                          trainable, frozen), shardings)
    step = build_train_step(loss(model_cfg), optimizer, state_shardings=shardings, params_fn=params_fn,
                            compute_dtype=model_cfg.compute_dtype)
    return Program(name, step, (state, abstract_batch(arrays, mesh, A)), {}, flops, formula)


def sampler_programs(cfg, model_cfg: ModelConfig, mesh, resident: dict) -> list[Program]:
    """The sampler's prefill and decode loop (`rlpt.sampling.engine`) for one rollout batch: prompts_per_step
    prompts of max_prompt_len tokens, group_size samples each, max_new_tokens new tokens (the cache `generate`
    allocates). The decode loop's FLOPs are one decode step (XLA counts a while loop's body once)."""

    r = cfg.rl.rollout
    scfg = dataclasses.replace(model_cfg, compute_dtype=r.compute_dtype or model_cfg.compute_dtype)
    params = abstract_params(scfg, mesh)
    Pn, G, W = r.prompts_per_step, r.group_size, r.max_new_tokens
    Tp, cache_len = plan_cache([range(r.max_prompt_len)], W, None)  # as `generate` sizes them
    methods = make_methods(r.temperature, r.top_k, r.top_p, None)
    static = {"cfg": scfg, "methods": methods, "stop_ids": (scfg.vocab_size - 1,)}

    def rows(shape, dtype):
        return sds(shape, dtype, NamedSharding(mesh, logical_spec(("batch",) + (None,) * (len(shape) - 1), shape,
                                                                  mesh)))

    replicated = NamedSharding(mesh, P())
    copies = prefill_copies(Pn, G, mesh)  # as `generate`: one copy per sample when the prompts do not divide
    Pr = Pn * copies
    pre_args = (params, rows((Pr, Tp), jnp.int32), rows((Pr,), jnp.int32), rows((Pn * G,), jnp.int32),
                sds((2,), jnp.uint32, replicated), rows((Pn * G,), jnp.uint32))
    pre_kwargs = static | {"n": G // copies, "cache_len": cache_len, "width": W}
    pre_flops = (2 * body_params(scfg) * Pr * Tp + 2 * scfg.vocab_size * scfg.hidden_size * Pr
                 + attention_flops(scfg, Pr * Tp, Tp / 2))
    what = f"{Pn} prompts" if copies == 1 else f"{Pn} prompts x {copies} copies (they do not divide the chips)"
    prefill = Program("sampler_prefill", engine.prefill, pre_args, pre_kwargs, pre_flops,
                      f"2·N·T, T = {what} x {Tp} columns (+ causal attention; head on the last column)", resident)
    R = Pn * G
    step_flops = 2 * (body_params(scfg) + scfg.vocab_size * scfg.hidden_size) * R + attention_flops(scfg, R, cache_len)
    decode = Program("sampler_decode", engine.decode, None, static, step_flops,
                     f"2·N·T per decode step, T = {R} rows (+ attention over {cache_len} cache slots)", resident)
    return [prefill, decode]


def decode_state(prefill: Program, mesh):
    """The decode loop's input state without compiling prefill: its shapes (`jax.eval_shape`) placed by the rules
    (the cache by `rlpt.sampling.sharding.CACHE_AXES`, per-row buffers over the batch axes, the rest replicated)."""

    shapes = jax.eval_shape(lambda *a: prefill.fn(*a, **prefill.kwargs), *prefill.args)

    def place(names, x):
        return sds(x.shape, x.dtype, NamedSharding(mesh, logical_spec(names, x.shape, mesh)))

    cache = {k: jax.tree.map(lambda x, k=k: place(CACHE_AXES[k], x), v) for k, v in shapes.cache.items()}
    rows = shapes.tokens.shape[0]
    fields = {f.name: getattr(shapes, f.name) for f in dataclasses.fields(shapes) if f.name != "cache"}
    placed = {k: place(("batch",) + (None,) * (x.ndim - 1) if x.ndim and x.shape[0] == rows and k != "rng"
                       else (None,) * x.ndim, x) for k, x in fields.items()}
    return shapes.replace(cache=cache, **placed)
