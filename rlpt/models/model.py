"""`Model`: a config plus a parameter pytree, callable like a function; the public face of rlpt.models."""
import dataclasses
import functools

import jax

from rlpt.models import hf
from rlpt.models.config import ModelConfig
from rlpt.models.transformer import forward, init_params, merged_params, param_axes
from rlpt.models.vision import VisionLanguageModel, VLMConfig, init_vlm_params, vlm_param_axes
from rlpt.parallel.distributed import place
from rlpt.parallel.rules import named_sharding


@functools.partial(jax.jit, static_argnums=0)
def _jit_forward(cfg, params, tokens, positions, segment_ids):
    return forward(params, cfg, tokens, positions, segment_ids)


@dataclasses.dataclass
class Model:
    """A decoder-only LM. `model(tokens)` is a jitted pure function of `model.params`.

    Inside your own jitted code call `rlpt.models.forward(model.params, model.config, ...)` directly.
    """

    config: ModelConfig
    params: dict
    # Values derived from the weights (e.g. the sampler's CPU decode layout), see `derived`.
    _derived: dict = dataclasses.field(default_factory=dict, init=False, repr=False, compare=False)

    def derived(self, name: str, build):
        """build(params, config), computed once per weight version and kept on this model.

        A weight version is the exact set of leaf arrays of `params` (JAX arrays are immutable): reassigning
        `model.params` or any leaf in it rebuilds the value at the next call, as does another config; the
        value lives as long as this Model (`with_params` and every newly published Model start empty)."""
        leaves = tuple(jax.tree.leaves(self.params))
        hit = self._derived.get(name)
        if hit is not None and hit[0] == self.config and len(hit[1]) == len(leaves) and all(
                a is b for a, b in zip(hit[1], leaves)):
            return hit[2]
        self._derived.pop(name, None)  # drop the stale value before building the new one
        value = build(self.params, self.config)
        self._derived[name] = (self.config, leaves, value)
        return value

    def __call__(self, tokens, positions=None, segment_ids=None):
        """Logits (B, T, vocab) for int tokens (B, T); positions default to arange, segment 0 is padding."""
        return _jit_forward(self.config, self.params, tokens, positions, segment_ids)

    def save_pretrained(self, folder: str, *, dtype: str | None = None, max_shard_bytes: int = 2 << 30,
                        tokenizer=None) -> None:
        """Write an HF checkpoint folder (config.json + safetensors) that `transformers` loads (LoRA-wrapped
        weights, `LoraWeight`, are written merged). Several processes: every one calls it (the weights are
        gathered), process 0 writes."""
        hf.save_params(merged_params(self.params), self.config, folder, dtype=dtype, max_shard_bytes=max_shard_bytes)
        if tokenizer is not None and jax.process_index() == 0:
            tokenizer.save(folder)

    def with_params(self, params) -> "Model":
        return dataclasses.replace(self, params=params)

    def placed(self, mesh) -> "Model":
        """This model with its params on `mesh`, each on its logical-axis rule sharding (call under
        `rlpt.parallel.axis_rules`); also across meshes in a run of several processes (`rlpt.parallel.place`)."""
        shardings = jax.tree.map(lambda names, x: named_sharding(mesh, names, x.shape), param_axes(self.config),
                                 self.params, is_leaf=lambda x: isinstance(x, tuple))
        return self.with_params(place(self.params, shardings))

    @property
    def param_axes(self) -> dict:
        return param_axes(self.config)


def load_pretrained(folder: str, *, mesh=None, **config_overrides) -> Model:
    """Load an HF Llama / Qwen2 / Qwen3 checkpoint folder; with a mesh, tensors land on their shardings.

    config_overrides set rlpt-only options (param_dtype, compute_dtype, attention_impl, remat, ...).
    """
    cfg = hf.config_from_hf(folder, **config_overrides)
    return Model(cfg, hf.load_params(folder, cfg, mesh=mesh))


def model_from(config, params):
    """The model object for a config and its parameters: a `Model`, or a `VisionLanguageModel` for a VLMConfig."""
    return VisionLanguageModel(config, params) if isinstance(config, VLMConfig) else Model(config, params)


def init_model(cfg: ModelConfig, seed: int = 0, *, mesh=None) -> Model:
    """A randomly initialised model; with a mesh, parameters are created already sharded. With model.vision set,
    a `rlpt.models.vision.VisionLanguageModel` (decoder, vision tower and projector)."""
    rng = jax.random.key(seed)
    if cfg.vision is not None:
        vcfg = VLMConfig.from_model_config(cfg)
        if mesh is None:
            return VisionLanguageModel(vcfg, init_vlm_params(vcfg, rng))
        shardings = jax.tree.map(lambda names, s: named_sharding(mesh, names, s.shape), vlm_param_axes(vcfg),
                                 jax.eval_shape(lambda: init_vlm_params(vcfg, rng)),
                                 is_leaf=lambda x: isinstance(x, tuple))
        return VisionLanguageModel(vcfg, jax.jit(init_vlm_params, static_argnums=0, out_shardings=shardings)(vcfg,
                                                                                                              rng))
    if mesh is None:
        return Model(cfg, init_params(cfg, rng))
    shardings = jax.tree.map(lambda names, s: named_sharding(mesh, names, s.shape), param_axes(cfg),
                             jax.eval_shape(lambda: init_params(cfg, rng)),
                             is_leaf=lambda x: isinstance(x, tuple))
    return Model(cfg, jax.jit(init_params, static_argnums=0, out_shardings=shardings)(cfg, rng))
