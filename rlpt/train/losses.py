"""Stage losses on the shared train step. Each returns (loss_sum, weight, metrics)."""
import jax
import jax.numpy as jnp

from rlpt.algos import get_aggregation, get_kl, get_policy_loss, rollout_correction, value_loss
from rlpt.kernels.layouts import layout_permutation, layout_positions
from rlpt.models.transformer import forward, hidden_states, hidden_states_shared_prefix
from rlpt.models.vision import VLMConfig, row_embeddings
from rlpt.train.heads import head_values
from rlpt.train.logprobs import head_logprobs


def decoder_inputs(params, model_cfg, batch):
    """(decoder params, decoder config, input embeddings or None) for a batch: a text model's own; for a
    vision-language model (`rlpt.models.vision.VLMConfig`), its decoder's, with the rows' images
    (batch pixel_values (B, K, C, H, W), num_images (B,)) spliced in at their image tokens."""
    if not isinstance(model_cfg, VLMConfig):
        return params, model_cfg, None
    if "pixel_values" not in batch:
        return params["text"], model_cfg.text, None
    embeds = row_embeddings(params, model_cfg, batch["inputs"], batch["pixel_values"], batch["num_images"],
                            batch["segment_ids"] > 0)
    return params["text"], model_cfg.text, embeds


def token_logprobs(params, model_cfg, batch):
    """log p(target) per position (B, T) f32 for batch inputs/targets/positions/segment_ids (and images, for a
    vision-language model: `decoder_inputs`); the LM head is chunked per model.logits_chunk (`head_logprobs`)."""
    params, model_cfg, embeds = decoder_inputs(params, model_cfg, batch)
    hidden, _ = hidden_states(params, model_cfg, batch["inputs"], batch["positions"], batch["segment_ids"],
                              embeds=embeds)
    return head_logprobs(params, model_cfg, hidden, batch["targets"])[0]


def sft_loss(model_cfg):
    """Token-level cross-entropy on loss_mask tokens: sum and token count (completion-only when the mask is)."""
    def loss_fn(params, frozen, batch, rng):
        del frozen, rng
        logp = token_logprobs(params, model_cfg, batch)
        mask = batch["loss_mask"].astype(jnp.float32)
        nll = -jnp.sum(logp * mask)
        return nll, jnp.sum(mask), {"nll_sum": nll}
    return loss_fn


def per_segment_nll(params, model_cfg, batch, max_segments: int):
    """NLL summed per (row, segment id) -> (B, max_segments), for checking packing invariance."""
    logp = token_logprobs(params, model_cfg, batch)
    onehot = jax.nn.one_hot(batch["segment_ids"], max_segments, dtype=jnp.float32)  # (B, T, S)
    return -jnp.einsum("bt,bts->bs", logp * batch["loss_mask"], onehot)


def in_window(batch, x):
    """x (B, T) at the batch's logit window columns (B, K) when it has one, else x unchanged."""
    return x if "window" not in batch else jnp.take_along_axis(x, batch["window"], axis=1)


def shared_prefix_streams(batch, group: int):
    """(prefix, rows) for `hidden_states_shared_prefix` from RL rows with a logit window: each group's columns
    before its window start (the same in all its rows, `check_shared_prefix`) and each row's window columns."""
    window = batch["window"]
    W, K = batch["inputs"].shape[1], window.shape[1]
    cols = jnp.arange(W - K)[None]  # a window starts at W - K at the latest
    first = slice(None, None, group)  # the first row of each group
    seen = (cols < window[first, :1]).astype(jnp.int32)
    prefix = (batch["inputs"][first, :W - K], batch["positions"][first, :W - K],
              batch["segment_ids"][first, :W - K] * seen)
    rows = tuple(in_window(batch, batch[k]) for k in ("inputs", "positions", "segment_ids"))
    return prefix, rows


def seq_shards() -> int:
    """Size of the "seq" axis of the mesh set by jax.set_mesh (1 without a mesh or without that axis)."""
    mesh = jax.sharding.get_abstract_mesh()
    return 1 if mesh.empty else dict(mesh.shape).get("seq", 1)


def lay_out_stream(stream: tuple, layout: str, n_shards: int) -> tuple:
    """Arrays (B, T) in token order -> (B, Tp) in `layout` over n_shards, Tp the next width the layout can
    split (`layout_permutation`; at least one column per part, so an empty prefix is all padding); the padding
    columns are zeros, which in a segment-id array is padding. Also returns index columns (T,): where each
    token-order column landed."""
    T = stream[0].shape[1]
    parts = 2 * n_shards if layout == "zigzag" else n_shards
    Tp = max(-(-T // parts), 1) * parts
    perm = layout_permutation(layout, Tp, n_shards)
    out = tuple(jnp.pad(a, ((0, 0), (0, Tp - T)))[:, perm] for a in stream)
    return out, layout_positions(layout, Tp, n_shards)[:T]


def token_logprobs_entropy(params, model_cfg, batch, group: int | None = None, layout: str = "contiguous", *,
                           value_head: dict | None = None):
    """(log p(target), entropy of the next-token distribution), both (B, T) f32; with value_head (a scalar head,
    `rlpt.train.heads`) a third output, its values V(s_t) (B, T) f32 read from the detached hidden states (the
    value loss moves the head only).

    With batch["window"] (B, K) column indices (`rlpt.rollout.single_turn.response_window`), the LM head,
    log-softmax and entropy run only at those columns and both outputs are (B, K): the prompt positions of an
    RL row carry no loss, and their logits are most of the head's cost (TRL's `logits_to_keep`).
    group: rows come in groups of this many that share every column before their window (rl.exec.share_prefix):
    the shared columns run once per group (`hidden_states_shared_prefix`); needs a window and rows in token order.
    On a mesh that shards the sequence the prefix and window streams are each padded and put in `layout`
    (data.cp_layout, `lay_out_stream`) and the outputs come back in token order.
    The LM head is chunked per model.logits_chunk (`rlpt.train.logprobs.head_logprobs`).
    """
    if group is not None:
        if isinstance(model_cfg, VLMConfig):
            raise ValueError("rl.exec.share_prefix does not combine with model.vision (the shared prompt columns "
                             "hold each group's images); set rl.exec.share_prefix=false")
        return _shared_prefix_logprobs_entropy(params, model_cfg, batch, group, layout, value_head)
    params, model_cfg, embeds = decoder_inputs(params, model_cfg, batch)
    hidden, _ = hidden_states(params, model_cfg, batch["inputs"], batch["positions"], batch["segment_ids"],
                              embeds=embeds)
    if "window" in batch:
        hidden = jnp.take_along_axis(hidden, batch["window"][..., None], axis=1)
    out = head_logprobs(params, model_cfg, hidden, in_window(batch, batch["targets"]), entropy=True)
    if value_head is None:
        return out
    return *out, head_values(value_head, jax.lax.stop_gradient(hidden))


def _shared_prefix_logprobs_entropy(params, model_cfg, batch, group: int, layout: str, value_head=None):
    """`token_logprobs_entropy` with group: (B, K) outputs at the window columns, in token order."""
    if "window" not in batch:
        raise ValueError("rl.exec.share_prefix needs the logit window (rl.exec.logits_window=true)")
    prefix, rows = shared_prefix_streams(batch, group)
    n = seq_shards()
    layout = layout if n > 1 else "contiguous"  # one device: the streams as they are (an empty prefix padded)
    # each stream split evenly over the seq axis in its own layout; `back` reads token order again
    prefix, _ = lay_out_stream(prefix, layout, n)
    (*rows, targets), back = lay_out_stream((*rows, in_window(batch, batch["targets"])), layout, n)
    hidden = hidden_states_shared_prefix(params, model_cfg, prefix, tuple(rows), group)
    logp, entropy = head_logprobs(params, model_cfg, hidden, targets, entropy=True)
    if value_head is None:
        return logp[:, back], entropy[:, back]
    return logp[:, back], entropy[:, back], head_values(value_head, jax.lax.stop_gradient(hidden))[:, back]


def rl_loss(algo_cfg, group_size: int | None = None, layout: str = "contiguous", critic=None):
    """Policy-gradient loss from registry names; batch carries advantages, old_logp (and rollout_logp).

    critic (rl.critic, with rl.algo.advantage=gae): params are {"lm", "head"} (`rlpt.train.heads`) and the batch
    also carries old_values and returns; each token's loss adds critic.vf_coef x the clipped value loss of the
    head on the detached hidden states (`rlpt.algos.value_loss`, clip critic.value_clip, 0: none), aggregated
    with the policy loss.

    group_size: with rl.exec.share_prefix (`pipeline.rl.shared_prefix_group`), the rows of a group share their
    prompt columns, which then run through the policy (and the KL reference) once per group. The rows then come
    in token order (`Trainer.step` leaves them so) and on a sequence-sharded mesh the loss puts its streams in
    `layout` (data.cp_layout). None: full rows.

    Returns (loss_sum, weight): with scope "step" the train step divides the summed numerator by the
    summed denominator of all micro-batches (whole-step normalisation); with "micro" each micro-batch is
    normalised on its own and the step averages them.
    """

    policy_loss = get_policy_loss(algo_cfg.policy_loss)
    aggregation = get_aggregation(algo_cfg.aggregation)
    kl_fn = get_kl(algo_cfg.kl_estimator) if algo_cfg.kl_coef > 0 and algo_cfg.kl_in == "loss" else None
    if algo_cfg.scope not in ("step", "micro"):
        raise ValueError(f"rl.algo.scope={algo_cfg.scope!r}; expected 'step' or 'micro'")

    def factory(model_cfg):
        def loss_fn(params, frozen, batch, rng):
            del rng
            # Per-token arrays at the logit window's columns (all columns without a window).
            mask = in_window(batch, batch["loss_mask"]).astype(jnp.float32)
            old_logp, rollout_logp = in_window(batch, batch["old_logp"]), in_window(batch, batch["rollout_logp"])
            head = None
            if critic is not None:
                params, head = params["lm"], params["head"]
            logp, entropy, *values = token_logprobs_entropy(params, model_cfg, batch, group_size, layout,
                                                            value_head=head)
            per_token, metrics = policy_loss(logp, old_logp, in_window(batch, batch["advantages"]), mask,
                                             **algo_cfg.policy_loss_kwargs)
            if algo_cfg.correction_level != "none":
                weights, keep, cmetrics = rollout_correction(
                    jax.lax.stop_gradient(old_logp), rollout_logp, mask,
                    level=algo_cfg.correction_level, mode=algo_cfg.correction_mode, cap=algo_cfg.correction_cap)
                per_token = per_token * jax.lax.stop_gradient(weights)
                mask = mask * keep
                metrics = {**metrics, **{f"correction/{k}": v for k, v in cmetrics.items()}}
            if kl_fn is not None:
                ref_logp, _ = token_logprobs_entropy(frozen["ref"], model_cfg, batch, group_size, layout)
                kl = kl_fn(logp, jax.lax.stop_gradient(ref_logp))
                per_token = per_token + algo_cfg.kl_coef * kl
                metrics["kl"] = jnp.sum(kl * mask) / jnp.maximum(jnp.sum(mask), 1.0)
            if algo_cfg.entropy_coef:
                per_token = per_token - algo_cfg.entropy_coef * entropy
            vl = None
            if critic is not None:
                vl, vmetrics = value_loss(values[0], in_window(batch, batch["old_values"]),
                                          in_window(batch, batch["returns"]), mask, clip=critic.value_clip or None)
                per_token = per_token + critic.vf_coef * vl
            num, den = aggregation(per_token, mask, **algo_cfg.aggregation_kwargs)
            n_tok = jnp.maximum(jnp.sum(mask), 1.0)
            # Per-micro-batch metrics are token-weighted sums; the loop divides by the step's token count.
            out = {f"pg/{k}": v * n_tok for k, v in metrics.items() if jnp.ndim(v) == 0}
            if vl is not None:
                out |= {f"critic/{k}": v * n_tok for k, v in vmetrics.items()} | {"critic/vf_loss": jnp.sum(vl)}
            out |= {"entropy_sum": jnp.sum(entropy * mask), "policy_tokens": jnp.sum(mask),
                    "logp_gap_sum": jnp.sum(jnp.abs(logp - rollout_logp) * mask)}
            if algo_cfg.scope == "micro":
                return num / jnp.maximum(den, 1e-9), jnp.ones((), jnp.float32), out
            return num, den, out
        return loss_fn
    return factory


DIVERGENCES = ("forward_kl", "reverse_kl", "jsd")


def _log_probs(logits, temperature: float):
    """log_softmax(logits / temperature) over the vocabulary, in f32 at least (f64 stays f64)."""
    wide = jnp.promote_types(logits.dtype, jnp.float32)
    return jax.nn.log_softmax(logits.astype(wide) / temperature, axis=-1)


def _check_divergence(divergence: str, beta: float) -> None:
    if divergence not in DIVERGENCES:
        raise ValueError(f"distill.divergence={divergence!r}; expected one of {DIVERGENCES}")
    if divergence == "jsd" and not 0.0 < beta < 1.0:
        raise ValueError(f"distill.beta={beta} must lie in (0, 1) for divergence=jsd")


def divergence_of_log_probs(s, t, divergence: str, beta: float = 0.5):
    """`token_divergence` from the student's and teacher's log-probs s, t (..., V) (already at the temperature)."""
    _check_divergence(divergence, beta)

    def kl(log_p, log_q):  # KL(p || q), 0 log 0 = 0
        return jnp.sum(jnp.where(log_p > -jnp.inf, jnp.exp(log_p) * (log_p - log_q), 0.0), axis=-1)

    if divergence == "forward_kl":
        return kl(t, s)
    if divergence == "reverse_kl":
        return kl(s, t)
    m = jnp.logaddexp(s + jnp.log1p(-beta), t + jnp.log(beta))
    return beta * kl(t, m) + (1.0 - beta) * kl(s, m)


def token_divergence(student_logits, teacher_logits, divergence: str, *, beta: float = 0.5,
                     temperature: float = 1.0):
    """Per-position divergence (...,) between the teacher's and the student's next-token distributions over the
    full vocabulary (logits (..., V)), both at `temperature`; TRL's `GKDTrainer.generalized_jsd_loss` term by term.

    forward_kl: KL(teacher || student) = sum_v t (log t - log s) (mass-covering, classic logit distillation).
    reverse_kl: KL(student || teacher) (mode-seeking; on-policy distillation).
    jsd: generalized Jensen-Shannon with m = beta t + (1 - beta) s: beta KL(t || m) + (1 - beta) KL(s || m).
    No T^2 factor (as TRL; scale the learning rate instead). The teacher side carries no gradient."""
    return divergence_of_log_probs(_log_probs(student_logits, temperature),
                                   jax.lax.stop_gradient(_log_probs(teacher_logits, temperature)), divergence, beta)


def distill_loss(model_cfg, teacher_cfg, divergence: str, *, beta: float = 0.5, temperature: float = 1.0):
    """Token-mean `token_divergence` over loss_mask tokens of batch inputs/positions/segment_ids (SFT rows or sampled
    rollouts); the teacher (frozen["teacher"], its own architecture `teacher_cfg`, the same vocabulary) runs on the
    same tokens inside the step. Metrics: the divergence sum, and the student's and teacher's NLL of the targets
    (from the same temperature-1 log-probs when the divergence is at temperature 1)."""
    _check_divergence(divergence, beta)
    if teacher_cfg.vocab_size != model_cfg.vocab_size:
        raise ValueError(f"the teacher's vocabulary ({teacher_cfg.vocab_size} tokens) differs from the student's "
                         f"(model.vocab_size={model_cfg.vocab_size}): distillation needs one tokenizer")

    def loss_fn(params, frozen, batch, rng):
        del rng
        args = (batch["inputs"], batch["positions"], batch["segment_ids"])
        student = forward(params, model_cfg, *args)
        teacher = jax.lax.stop_gradient(forward(frozen["teacher"], teacher_cfg, *args))
        mask = batch["loss_mask"].astype(jnp.float32)
        s1, t1 = _log_probs(student, 1.0), _log_probs(teacher, 1.0)
        s, t = (s1, t1) if temperature == 1.0 else (_log_probs(student, temperature), _log_probs(teacher, temperature))
        div = jnp.sum(divergence_of_log_probs(s, t, divergence, beta) * mask)

        def nll(lp):
            return -jnp.sum(jnp.take_along_axis(lp, batch["targets"][..., None], axis=-1)[..., 0] * mask)

        metrics = {"divergence_sum": div, "student_nll_sum": jax.lax.stop_gradient(nll(s1)),
                   "teacher_nll_sum": nll(t1)}
        return div, jnp.sum(mask), metrics
    return loss_fn
