"""Load the policy to evaluate: an HF folder, or a run folder (its hf/ export, else its latest Orbax params)."""
import os

ORBAX_DIRS = (os.path.join("rl", "checkpoints"), "checkpoints")  # the RL stage's params are the later ones


def _tokenizer(folder: str, run_cfg=None):
    from rlpt.models import load_tokenizer  # on use (start-up: jax)

    if os.path.isfile(os.path.join(folder, "tokenizer.json")):
        return load_tokenizer(folder)
    if run_cfg is not None:
        from rlpt.config.source import run_tokenizer as get_tokenizer  # on use (start-up: jax)

        return get_tokenizer(run_cfg)
    raise FileNotFoundError(f"checkpoint={folder}: no tokenizer.json (save_pretrained(..., tokenizer=tok))")


def run_config(folder: str):
    """The typed Config a run folder was trained with (its config.yaml)."""
    from omegaconf import OmegaConf

    from rlpt.config.schema import Config  # on use (start-up: jax)

    path = os.path.join(folder, "config.yaml")
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config), OmegaConf.load(path)))


def _orbax_params(cfg, directory: str):
    import orbax.checkpoint as ocp

    manager = ocp.CheckpointManager(os.path.abspath(directory))
    step = manager.latest_step()
    if step is None:
        raise FileNotFoundError(f"checkpoint={directory}: no Orbax checkpoint steps")
    state = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))["state"]
    manager.close()
    params = state["params"]
    if "vlm" in state.get("frozen", {}):  # a vision-language model trained in parts (LoRA, a frozen tower)
        from rlpt.models.transformer import merged_params  # on use (start-up: jax)
        from rlpt.train.lora import vlm_join  # on use (start-up: jax)

        params = merged_params(vlm_join(params, state["frozen"]["vlm"], cfg.lora))
    elif cfg.lora.rank > 0:
        from rlpt.train.lora import merge_lora  # on use (start-up: jax)

        params = merge_lora(state["frozen"]["base"], params, cfg.lora)
    return params, step


def load_policy(path: str):
    """(Model, tokenizer, description) for `checkpoint=path`; raises naming what the folder lacks."""
    from rlpt.models import Model, load_pretrained  # on use (start-up: jax)

    if not os.path.isdir(path):
        raise FileNotFoundError(f"checkpoint={path}: not a folder")
    for folder in (path, os.path.join(path, "hf")):
        if os.path.isfile(os.path.join(folder, "config.json")):
            run_cfg = run_config(path) if os.path.isfile(os.path.join(path, "config.yaml")) else None
            return load_pretrained(folder), _tokenizer(folder, run_cfg), f"hf:{os.path.abspath(folder)}"
    if os.path.isfile(os.path.join(path, "config.yaml")):
        cfg = run_config(path)
        for sub in ORBAX_DIRS:
            directory = os.path.join(path, sub)
            if os.path.isdir(directory) and any(d.isdigit() for d in os.listdir(directory)):
                params, step = _orbax_params(cfg, directory)
                from rlpt.config.source import model_config  # on use (start-up: jax)

                model_cfg = model_config(cfg)
                if model_cfg.vision is not None:  # model.vision: the run trained a vision-language model
                    from rlpt.models.vision import VisionLanguageModel, VLMConfig  # on use (start-up: jax)

                    model = VisionLanguageModel(VLMConfig.from_model_config(model_cfg), params)
                else:
                    model = Model(model_cfg, params)
                return model, _tokenizer(path, cfg), f"orbax:{os.path.abspath(directory)}@{step}"
    raise FileNotFoundError(
        f"checkpoint={path}: neither an HF folder (config.json + safetensors), a run folder with an hf/ export "
        f"(train.export_hf=true), nor a run folder with config.yaml and Orbax checkpoints in {list(ORBAX_DIRS)}")
