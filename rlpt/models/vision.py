"""A vision-language model: a SigLIP-style vision tower and a projector beside rlpt's decoder (LLaVA layout).

The tower cuts an image (C, H, W) into P x P patches (a dense layer over each flattened patch: the conv with
stride P written without a conv), adds learned position embeddings and runs pre-norm encoder blocks (LayerNorm,
bidirectional multi-head attention, GELU-tanh MLP). The projector (Linear, GELU, Linear) maps the chosen layer's
patch features into the decoder's embedding space, and they replace the decoder's input embeddings at the
image-placeholder tokens, image after image in reading order (each image takes `tokens_per_image` tokens). Then the
decoder runs unchanged (`rlpt.models.transformer.forward(..., embeds=)`).

Parameters: {"text": the decoder's tree, "vision": the tower's, "projector": the projector's}; every leaf has
logical axis names (`vlm_param_axes`), reusing the decoder's names so the same sharding rules place them.
`load_llava` / `save_llava` read and write transformers' LlavaForConditionalGeneration checkpoints with a
SigLIP vision tower and a Llama / Qwen2 / Qwen3 text model (rlpt.models.hf).
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from rlpt.models.config import DTYPES, SELECT_STRATEGIES, ModelConfig, VisionConfig  # noqa: F401  (re-exported)
from rlpt.models.ops.lora import LoraWeight
from rlpt.models.ops.reference import dense
from rlpt.models.transformer import forward as text_forward
from rlpt.models.transformer import init_params as text_init_params
from rlpt.models.transformer import param_axes as text_param_axes
from rlpt.parallel.distributed import place
from rlpt.parallel.rules import named_sharding


@dataclasses.dataclass(unsafe_hash=True)
class VLMConfig:
    text: ModelConfig
    vision: VisionConfig

    def __post_init__(self):
        if self.text.vision is not None:  # the decoder's own config is text-only (model.vision lives here)
            self.text = dataclasses.replace(self.text, vision=None)
        if not 0 <= self.vision.image_token_id < self.text.vocab_size:
            raise ValueError(f"model.vision.image_token_id={self.vision.image_token_id} is not a token id of the "
                             f"text model's vocabulary ({self.text.vocab_size})")

    @classmethod
    def from_model_config(cls, cfg: ModelConfig) -> "VLMConfig":
        """The VLM of a `model` config section with model.vision set."""
        return cls(dataclasses.replace(cfg, vision=None), cfg.vision)

    def __getattr__(self, name):
        """The decoder's settings read through (vocab_size, compute_dtype, num_params, ...): code that sizes,
        names or fingerprints a model's text side reads a VLM's the same way."""
        if name.startswith("__") or name in ("text", "vision"):
            raise AttributeError(name)
        return getattr(self.text, name)

    def num_params(self) -> int:
        tower = sum(int(np.prod(s)) for s in jax.tree.leaves(vlm_param_shapes(self),
                                                             is_leaf=lambda x: isinstance(x, tuple)))
        return self.text.num_params() + tower

    def model_config(self) -> ModelConfig:
        """This VLM as one `model` config section (the decoder's with model.vision set)."""
        return dataclasses.replace(self.text, vision=self.vision)


def vision_param_axes(vc: VisionConfig) -> dict:
    layers = {
        "ln1_w": ("layers", "norm"), "ln1_b": ("layers", "norm"),
        "wq": ("layers", "embed", "heads", "head_dim"), "bq": ("layers", "heads", "head_dim"),
        "wk": ("layers", "embed", "heads", "head_dim"), "bk": ("layers", "heads", "head_dim"),
        "wv": ("layers", "embed", "heads", "head_dim"), "bv": ("layers", "heads", "head_dim"),
        "wo": ("layers", "heads", "head_dim", "embed"), "bo": ("layers", "norm"),
        "ln2_w": ("layers", "norm"), "ln2_b": ("layers", "norm"),
        "fc1": ("layers", "embed", "mlp"), "b1": ("layers", "mlp"),
        "fc2": ("layers", "mlp", "embed"), "b2": ("layers", "norm"),
    }
    return {"patch": ("patch", "embed"), "patch_b": ("norm",), "pos": ("patches", "embed"), "layers": layers,
            "post_ln_w": ("norm",), "post_ln_b": ("norm",)}


def projector_param_axes(vc: VisionConfig) -> dict:
    axes = {"w1": ("vision_embed", "embed"), "w2": ("mlp", "embed")}
    if vc.projector_bias:
        axes |= {"b1": ("norm",), "b2": ("norm",)}
    return axes


def vlm_param_axes(cfg: VLMConfig) -> dict:
    return {"text": text_param_axes(cfg.text), "vision": vision_param_axes(cfg.vision),
            "projector": projector_param_axes(cfg.vision)}


def vlm_param_shapes(cfg: VLMConfig) -> dict:
    vc, D = cfg.vision, cfg.text.hidden_size
    vision_dims = {"layers": vc.num_layers, "embed": vc.hidden_size, "heads": vc.num_heads, "head_dim": vc.head_dim,
                   "mlp": vc.intermediate_size, "norm": vc.hidden_size, "patches": vc.num_patches,
                   "patch": vc.num_channels * vc.patch_size ** 2}
    proj = {"w1": (vc.hidden_size, D), "w2": (D, D), "b1": (D,), "b2": (D,)}

    def shapes(axes, dims):
        return jax.tree.map(lambda names: tuple(dims[n] for n in names), axes, is_leaf=lambda x: isinstance(x, tuple))

    return {"vision": shapes(vision_param_axes(vc), vision_dims),
            "projector": {k: proj[k] for k in projector_param_axes(vc)}}


def init_vlm_params(cfg: VLMConfig, rng) -> dict:
    """Decoder as `init_params`; tower and projector weights ~ N(0, initializer_range), LayerNorm 1 / 0, biases 0."""
    text_rng, rng = jax.random.split(rng)
    out = {"text": text_init_params(cfg.text, text_rng)}
    dtype, std = cfg.text.pdtype, cfg.text.initializer_range
    extra = vlm_param_shapes(cfg)
    flat, treedef = jax.tree.flatten_with_path(extra, is_leaf=lambda x: isinstance(x, tuple))
    leaves = []
    for (path, shape), key in zip(flat, jax.random.split(rng, len(flat))):
        name = path[-1].key
        if name.endswith("_w"):
            leaves.append(jnp.ones(shape, dtype))
        elif name.endswith("_b") or name.startswith("b"):
            leaves.append(jnp.zeros(shape, dtype))
        else:
            leaves.append((std * jax.random.normal(key, shape, jnp.float32)).astype(dtype))
    return out | jax.tree.unflatten(treedef, leaves)


def layer_norm(x, w, b, eps):
    x32 = x.astype(jnp.float32)
    mean = x32.mean(-1, keepdims=True)
    var = ((x32 - mean) ** 2).mean(-1, keepdims=True)
    return ((x32 - mean) * jax.lax.rsqrt(var + eps) * w + b).astype(x.dtype)


def patchify(pixel_values, patch: int):
    """(N, C, H, W) -> (N, H/P * W/P, C * P * P): row-major patches, each flattened channel-first (the order of
    a (D, C, P, P) conv kernel)."""
    N, C, H, W = pixel_values.shape
    x = pixel_values.reshape(N, C, H // patch, patch, W // patch, patch)
    return x.transpose(0, 2, 4, 1, 3, 5).reshape(N, (H // patch) * (W // patch), C * patch * patch)


def _proj(eq, x, w, dtype):
    """A tower projection: einsum in the compute dtype; a LoRA target (lora.vision_targets, a `LoraWeight`) goes
    through `ops.reference.dense`, which applies its adapters (the tower is plain jnp on every backend)."""
    if isinstance(w, LoraWeight):
        return dense(eq, x, w, dtype)
    return jnp.einsum(eq, x, w.astype(dtype))


def _encoder_block(vc: VisionConfig, x, lp, dtype):
    """One pre-norm encoder block."""
    h = layer_norm(x, lp["ln1_w"], lp["ln1_b"], vc.layer_norm_eps)
    q = _proj("npd,dhk->nphk", h, lp["wq"], dtype) + lp["bq"].astype(dtype)
    k = _proj("npd,dhk->nphk", h, lp["wk"], dtype) + lp["bk"].astype(dtype)
    v = _proj("npd,dhk->nphk", h, lp["wv"], dtype) + lp["bv"].astype(dtype)
    scores = jnp.einsum("nqhk,nshk->nhqs", q, k).astype(jnp.float32) * vc.head_dim ** -0.5
    probs = jax.nn.softmax(scores, axis=-1).astype(dtype)
    attn = jnp.einsum("nhqs,nshk->nqhk", probs, v)
    x = x + _proj("nqhk,hkd->nqd", attn, lp["wo"], dtype) + lp["bo"].astype(dtype)
    h = layer_norm(x, lp["ln2_w"], lp["ln2_b"], vc.layer_norm_eps)
    h = jax.nn.gelu(_proj("npd,df->npf", h, lp["fc1"], dtype) + lp["b1"].astype(dtype), approximate=True)
    return x + _proj("npf,fd->npd", h, lp["fc2"], dtype) + lp["b2"].astype(dtype)


def vision_hidden_states(vparams, vc: VisionConfig, pixel_values, dtype=jnp.float32) -> list:
    """The tower's hidden states for pixel_values (N, C, H, W): [patch embeddings, layer 1 output, ...]."""
    if pixel_values.shape[1:] != (vc.num_channels, vc.image_size, vc.image_size):
        raise ValueError(f"pixel_values of shape {tuple(pixel_values.shape)}; the vision tower takes "
                         f"(N, {vc.num_channels}, {vc.image_size}, {vc.image_size})")
    patches = patchify(pixel_values.astype(dtype), vc.patch_size)
    x = patches @ vparams["patch"].astype(dtype) + vparams["patch_b"].astype(dtype) + vparams["pos"].astype(dtype)
    states = [x]
    for i in range(vc.num_layers):
        x = _encoder_block(vc, x, jax.tree.map(lambda a, i=i: a[i], vparams["layers"]), dtype)
        states.append(x)
    return states


def image_features(params, cfg: VLMConfig, pixel_values):
    """(N, tokens_per_image, D_text): each image's projected features, in the decoder's embedding space."""
    vc, dtype = cfg.vision, DTYPES[cfg.text.compute_dtype]
    vparams = params["vision"] if vc.train else jax.lax.stop_gradient(params["vision"])
    feats = vision_hidden_states(vparams, vc, pixel_values, dtype)[vc.feature_layer]
    if vc.select_strategy == "default":
        feats = feats[:, 1:]
    p = params["projector"]
    h = feats @ p["w1"].astype(dtype) + (p["b1"].astype(dtype) if vc.projector_bias else 0)
    h = jax.nn.gelu(h, approximate=False)
    return h @ p["w2"].astype(dtype) + (p["b2"].astype(dtype) if vc.projector_bias else 0)


def merge_embeddings(params, cfg: VLMConfig, tokens, features, valid=None):
    """The decoder's input embeddings (B, T, D) for tokens (B, T), the image tokens' rows replaced by the image
    features (N, tokens_per_image, D) in order (row-major over the batch); valid (B, T): where tokens are real
    (padding never takes an image). The caller guarantees the counts match (`check_image_tokens`)."""
    embeds = jnp.take(params["text"]["embed"], tokens, axis=0).astype(features.dtype)
    is_image = tokens == cfg.vision.image_token_id
    is_image = (is_image if valid is None else is_image & valid).reshape(-1)
    flat = features.reshape(-1, features.shape[-1])
    index = jnp.clip(jnp.cumsum(is_image) - 1, 0, max(flat.shape[0] - 1, 0))
    merged = jnp.where(is_image[:, None], flat[index], embeds.reshape(-1, embeds.shape[-1]))
    return merged.reshape(embeds.shape)


def row_embeddings(params, cfg: VLMConfig, tokens, pixel_values, num_images, valid=None):
    """The decoder's input embeddings (B, T, D) for training rows (B, T) that carry their own images:
    pixel_values (B, K, C, H, W) holds row b's images in reading order in its first num_images[b] slots (the
    rest is padding, never read). Row b's first num_images[b] x tokens_per_image image tokens (where `valid`,
    e.g. segment_ids > 0) take those images' features in order; a later image-token id (a sampled token in a
    response) stays a text token, as the sampler embedded it."""
    B, K = pixel_values.shape[:2]
    per = cfg.vision.tokens_per_image
    feats = image_features(params, cfg, pixel_values.reshape(B * K, *pixel_values.shape[2:]))
    feats = feats.reshape(B, K * per, feats.shape[-1])
    embeds = jnp.take(params["text"]["embed"], tokens, axis=0).astype(feats.dtype)
    is_image = tokens == cfg.vision.image_token_id
    if valid is not None:
        is_image = is_image & valid
    index = jnp.cumsum(is_image, axis=1) - 1
    is_image = is_image & (index < (num_images * per)[:, None])
    picked = jnp.take_along_axis(feats, jnp.clip(index, 0, K * per - 1)[..., None], axis=1)
    return jnp.where(is_image[..., None], picked, embeds)


def check_image_tokens(cfg: VLMConfig, tokens, num_images: int, sample_ids=None) -> None:
    """Raise naming the row unless the batch's image tokens (rows: a (B, T) array or ragged lists) are exactly
    num_images x tokens_per_image."""
    per_row = np.array([int((np.asarray(row) == cfg.vision.image_token_id).sum()) for row in tokens], np.int64)
    if int(per_row.sum()) != num_images * cfg.vision.tokens_per_image:
        bad = [r for r, n in enumerate(per_row) if n % cfg.vision.tokens_per_image]
        where = f"row {bad[0]}" + (f" (sample {sample_ids[bad[0]]})" if sample_ids is not None else "") if bad else \
            "the batch"
        raise ValueError(f"{where}: {int(per_row.sum())} image tokens for {num_images} images x "
                         f"{cfg.vision.tokens_per_image} tokens per image")


def vlm_forward(params, cfg: VLMConfig, tokens, pixel_values=None, positions=None, segment_ids=None, *, cache=None):
    """Logits (B, T, V) for tokens (B, T) with the images pixel_values (N, C, H, W) (None: text only); with a
    cache, (logits, new_cache)."""
    embeds = None
    if pixel_values is not None and pixel_values.shape[0]:
        embeds = merge_embeddings(params, cfg, tokens, image_features(params, cfg, pixel_values))
    return text_forward(params["text"], cfg.text, tokens, positions, segment_ids, cache=cache, embeds=embeds)


@dataclasses.dataclass
class VisionLanguageModel:
    """A VLM: `VLMConfig` plus {"text", "vision", "projector"} parameters; `model(tokens, pixel_values)` is jitted."""

    config: VLMConfig
    params: dict
    _text: object = dataclasses.field(default=None, init=False, repr=False, compare=False)  # text_model()'s Model

    def __call__(self, tokens, pixel_values=None, positions=None, segment_ids=None):
        """Logits (B, T, V). pixel_values (N, C, H, W) as `rlpt.models.image_processing.preprocess` makes them;
        the batch must hold exactly N x tokens_per_image image tokens."""
        n = 0 if pixel_values is None else pixel_values.shape[0]
        check_image_tokens(self.config, tokens, n)
        return _jit_vlm_forward(self.config, self.params, tokens, pixel_values, positions, segment_ids)

    @property
    def param_axes(self) -> dict:
        return vlm_param_axes(self.config)

    def with_params(self, params) -> "VisionLanguageModel":
        return dataclasses.replace(self, params=params)

    def check_image_tokens(self, tokens, num_images: int, sample_ids=None) -> None:
        check_image_tokens(self.config, tokens, num_images, sample_ids)

    def text_model(self):
        """The decoder as an rlpt Model sharing these text parameters (kept per weight version, so the sampler's
        derived values, e.g. its CPU decode layout, are built once)."""
        from rlpt.models.model import Model  # on use: cycle with rlpt.models.model

        if self._text is None or self._text.params is not self.params["text"]:
            self._text = Model(self.config.text, self.params["text"])
        return self._text

    def prompt_embeds(self, tokens, lengths, images):
        """Input embeddings (B, T, D) of right-padded prompts (B, T) with their images spliced in."""
        valid = np.arange(tokens.shape[1])[None, :] < np.asarray(lengths)[:, None]
        return _jit_embeds(self.config, self.params, tokens, valid, images)

    def feed_embeds(self, feed, lengths, images):
        """Input embeddings (B, Ta, D) of a continuation's right-padded feed (B, Ta), whose column 0 is each row's
        last sampled token (text, whatever its id), with `images` spliced in at the appended image tokens."""
        cols = np.arange(feed.shape[1])[None, :]
        return _jit_embeds(self.config, self.params, feed, (cols >= 1) & (cols < np.asarray(lengths)[:, None]),
                           images)

    def placed(self, mesh) -> "VisionLanguageModel":
        """This model with its params on `mesh` by the logical-axis rules (call under rlpt.parallel.axis_rules)."""

        shardings = jax.tree.map(lambda names, x: named_sharding(mesh, names, x.shape), self.param_axes,
                                 self.params, is_leaf=lambda x: isinstance(x, tuple))
        return dataclasses.replace(self, params=place(self.params, shardings))

    def save_pretrained(self, folder: str, *, dtype: str | None = None) -> None:
        """A LLaVA checkpoint folder transformers' LlavaForConditionalGeneration loads (rlpt.models.llava)."""
        from rlpt.models.llava import save_llava  # on use: cycle with rlpt.models.llava

        save_llava(self, folder, dtype=dtype)


def init_vlm(cfg: VLMConfig, seed: int = 0) -> VisionLanguageModel:
    return VisionLanguageModel(cfg, init_vlm_params(cfg, jax.random.key(seed)))


@functools.partial(jax.jit, static_argnums=0)
def _jit_vlm_forward(cfg, params, tokens, pixel_values, positions, segment_ids):
    return vlm_forward(params, cfg, tokens, pixel_values, positions, segment_ids)


@functools.partial(jax.jit, static_argnums=0)
def _jit_embeds(cfg, params, tokens, valid, images):
    return merge_embeddings(params, cfg, tokens, image_features(params, cfg, images), valid)
