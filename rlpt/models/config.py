"""Model configuration for the Llama 2/3 and Qwen2/2.5/3 decoder family."""
import dataclasses

import jax.numpy as jnp

from rlpt import kernels

ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3")
FAMILIES = ("llama", "qwen2", "qwen3")
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
REMAT_POLICIES = ("auto", "none", "full", "dots_saveable", "dots_with_no_batch_dims_saveable")
OPS_BACKENDS = ("auto", "reference", "xla_cpu")  # model.ops (rlpt.models.ops)
# model.attention_impl / model.remat = "auto" (`resolved_attention_impl`, `resolved_remat`): the fastest settings
# ("dense", "none") below this many parameters, the memory-safe ones ("blockwise", "full") from it up. Below: the
# CPU-scale models (tiny presets, qwen_10m, qwen2_100m), kept as fast as before on CPU. Above: every real
# checkpoint preset (Qwen2.5-0.5B and up; docs/scaling.md: its SFT needs remat on a 16 GiB v5e chip). Long rows
# on a mid-size model need them too: qwen2_100m's RL update at 8 x 2048 takes 31.8 GiB dense / no remat, 2.8 GiB
# blockwise / full (scripts/bench/logprob_memory.py): set them explicitly there.
MEMORY_SAFE_PARAMS = 250_000_000
# model.logits_chunk = -1 (`logits_chunk_tokens`): the LM head runs chunk by chunk once one loss call's f32
# logits (tokens x vocab x 4 bytes on a device) would exceed LOGITS_AUTO_BYTES; each chunk then holds at most
# LOGITS_CHUNK_BYTES of f32 logits. Chunks cost one more LM-head matmul (the backward recomputes their logits),
# so small heads stay whole: the tiny and qwen_10m benchmark shapes (<= 128 MiB), the planner's test shapes.
LOGITS_AUTO_BYTES = 512 * 2**20
LOGITS_CHUNK_BYTES = 128 * 2**20


@dataclasses.dataclass(unsafe_hash=True)
class RopeScaling:
    """RoPE frequency scaling; field names follow HF `rope_parameters`."""

    rope_type: str = "default"
    factor: float = 1.0
    original_max_position_embeddings: int | None = None
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3
    beta_fast: float = 32.0  # yarn
    beta_slow: float = 1.0  # yarn
    mscale: float | None = None  # yarn
    mscale_all_dim: float | None = None  # yarn
    attention_factor: float | None = None  # yarn
    truncate: bool = True  # yarn

    def __post_init__(self):
        if self.rope_type not in ROPE_TYPES:
            raise ValueError(f"model.rope_scaling.rope_type={self.rope_type!r}; expected one of {ROPE_TYPES}")


SELECT_STRATEGIES = ("full", "default")  # LLaVA's vision_feature_select_strategy: default drops the first token


@dataclasses.dataclass(unsafe_hash=True)
class VisionConfig:
    """The vision tower (SigLIP vision config names) and how its features enter the decoder (LLaVA names)."""

    image_size: int = 32
    patch_size: int = 8
    num_channels: int = 3
    hidden_size: int = 64
    intermediate_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    layer_norm_eps: float = 1e-6
    # which encoder output feeds the projector: -1 the last layer's (LLaVA's vision_feature_layer; hidden state
    # k is the output of layer k, 0 the patch embeddings; the post-layernorm is not applied, as in LLaVA)
    feature_layer: int = -1
    select_strategy: str = "full"
    image_token_id: int = 0
    projector_bias: bool = True
    train: bool = True  # model.vision.train: False freezes the tower (the projector still trains)
    # variable resolution: an image of another size becomes a thumbnail and up to max_tiles image_size tiles
    # (rlpt.models.image_processing.tile), each its own tokens_per_image tokens; 1: every image resized to one tile
    max_tiles: int = 1

    def __post_init__(self):
        if self.image_size % self.patch_size:
            raise ValueError(f"model.vision.image_size={self.image_size} is not a multiple of "
                             f"model.vision.patch_size={self.patch_size}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"model.vision.hidden_size={self.hidden_size} is not a multiple of "
                             f"model.vision.num_heads={self.num_heads}")
        if self.select_strategy not in SELECT_STRATEGIES:
            raise ValueError(f"model.vision.select_strategy={self.select_strategy!r}; expected one of "
                             f"{SELECT_STRATEGIES}")
        if not -self.num_layers - 1 <= self.feature_layer <= self.num_layers:
            raise ValueError(f"model.vision.feature_layer={self.feature_layer} outside the tower's "
                             f"{self.num_layers + 1} hidden states")

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def tokens_per_image(self) -> int:
        """Decoder tokens one image takes (its placeholder expands to this many image tokens)."""
        return self.num_patches - (self.select_strategy == "default")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


@dataclasses.dataclass(unsafe_hash=True)
class ModelConfig:
    """Architecture and numerics of one decoder-only transformer.

    `family` picks the HF `model_type` for export; the flags describe the differences between families:
    Qwen2 has QKV bias and (small sizes) tied embeddings, Qwen3 has QK-norm, Llama neither.
    """

    family: str = "qwen2"
    vocab_size: int = 128
    hidden_size: int = 64
    intermediate_size: int = 176
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int | None = None
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling = dataclasses.field(default_factory=RopeScaling)
    rms_norm_eps: float = 1e-6
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    tie_embeddings: bool = False
    sliding_window: int | None = None
    initializer_range: float = 0.02
    param_dtype: str = "float32"
    compute_dtype: str = "float32"
    logits_dtype: str = "float32"
    # "dense": the fused XLA path in rlpt.models.transformer (fastest on CPU for short rows); or any name in
    # kernels.ATTENTION_IMPLS ("reference", "blockwise", "flash", "ring", "allgather"); "auto": dense below
    # MEMORY_SAFE_PARAMS parameters, blockwise from there up (`resolved_attention_impl`).
    attention_impl: str = "auto"
    # The ops backend the model is computed with (rlpt.models.ops): "auto" (xla_cpu when compiling for CPU,
    # reference elsewhere), "reference" (plain jnp + autodiff) or "xla_cpu" (XLA:CPU's measured rewrites).
    ops: str = "auto"
    # Per-layer rematerialisation policy (REMAT_POLICIES); "auto": none below MEMORY_SAFE_PARAMS, full above.
    remat: str = "auto"
    # LM-head chunking for the losses' token log-probs (rlpt.train.logprobs): -1 auto (chunk when the f32 logits
    # would pass LOGITS_AUTO_BYTES, in chunks of <= LOGITS_CHUNK_BYTES), 0 off, N > 0 about N tokens per chunk
    # (per device). Range declared in rlpt.config.validate._external.
    logits_chunk: int = -1
    scan_layers: bool = True
    # model.vision: a vision tower and projector beside this decoder (a LLaVA-style VLM, rlpt.models.vision);
    # None: a text-only model
    vision: VisionConfig | None = None

    def __post_init__(self):
        if isinstance(self.rope_scaling, dict):
            self.rope_scaling = RopeScaling(**self.rope_scaling)
        if isinstance(self.vision, dict):
            self.vision = VisionConfig(**self.vision)
        if self.family not in FAMILIES:
            raise ValueError(f"model.family={self.family!r}; expected one of {FAMILIES}")
        for key in ("param_dtype", "compute_dtype", "logits_dtype"):
            if getattr(self, key) not in DTYPES:
                raise ValueError(f"model.{key}={getattr(self, key)!r}; expected one of {sorted(DTYPES)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"model.num_heads={self.num_heads} must be a multiple of "
                             f"model.num_kv_heads={self.num_kv_heads}")

        if self.attention_impl not in ("auto", "dense") and self.attention_impl not in kernels.ATTENTION_IMPLS:
            raise ValueError(f"model.attention_impl={self.attention_impl!r}; expected 'auto', 'dense' or one of "
                             f"{sorted(kernels.ATTENTION_IMPLS)}")
        if self.ops not in OPS_BACKENDS:
            raise ValueError(f"model.ops={self.ops!r}; expected one of {OPS_BACKENDS}")
        if self.remat not in REMAT_POLICIES:
            raise ValueError(f"model.remat={self.remat!r}; expected one of {REMAT_POLICIES}")
        if isinstance(self.logits_chunk, bool) or not isinstance(self.logits_chunk, int) or self.logits_chunk < -1:
            raise ValueError(f"model.logits_chunk={self.logits_chunk!r}; expected -1 (auto), 0 (off) or a token "
                             "count >= 1")
        if self.head_dim is None:
            if self.hidden_size % self.num_heads:
                raise ValueError("model.hidden_size must be divisible by model.num_heads when head_dim is unset")
            self.head_dim = self.hidden_size // self.num_heads

    @property
    def dtype(self):
        return DTYPES[self.compute_dtype]

    @property
    def pdtype(self):
        return DTYPES[self.param_dtype]

    def num_params(self) -> int:
        D, F, H, KV, Dh, V, L = (self.hidden_size, self.intermediate_size, self.num_heads, self.num_kv_heads,
                                 self.head_dim, self.vocab_size, self.num_layers)
        per_layer = D * Dh * (H + 2 * KV) + H * Dh * D + 3 * D * F + 2 * D
        per_layer += (H + 2 * KV) * Dh * self.qkv_bias + D * self.o_bias + 2 * Dh * self.qk_norm
        return V * D * (1 if self.tie_embeddings else 2) + L * per_layer + D

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token (forward + backward = 3x forward), attention included."""
        n = self.num_params() - self.vocab_size * self.hidden_size * (0 if self.tie_embeddings else 1)
        attn = 2 * self.num_layers * seq_len * self.num_heads * self.head_dim  # QK^T and PV, causal ~1/2 of 2x
        return 3 * (2 * n + attn)


def resolved_attention_impl(cfg: ModelConfig) -> str:
    """cfg.attention_impl with "auto" resolved: "dense" below MEMORY_SAFE_PARAMS parameters, else "blockwise"."""
    if cfg.attention_impl != "auto":
        return cfg.attention_impl
    return "dense" if cfg.num_params() < MEMORY_SAFE_PARAMS else "blockwise"


def resolved_remat(cfg: ModelConfig) -> str:
    """cfg.remat with "auto" resolved: "none" below MEMORY_SAFE_PARAMS parameters, else "full"."""
    if cfg.remat != "auto":
        return cfg.remat
    return "none" if cfg.num_params() < MEMORY_SAFE_PARAMS else "full"


def logits_chunk_tokens(cfg: ModelConfig, tokens: int) -> int:
    """Tokens per LM-head chunk for a loss call over `tokens` tokens per device; 0: run the head unchunked.

    cfg.logits_chunk -1 (auto): unchunked while tokens x vocab f32 logits fit LOGITS_AUTO_BYTES, else the most
    tokens whose f32 logits fit LOGITS_CHUNK_BYTES (at least one); 0: unchunked; N > 0: N tokens.
    """
    if cfg.logits_chunk >= 0:
        return cfg.logits_chunk
    row_bytes = 4 * cfg.vocab_size
    if tokens * row_bytes <= LOGITS_AUTO_BYTES:
        return 0
    return max(1, LOGITS_CHUNK_BYTES // row_bytes)
