"""optax optimizers and learning-rate schedules from config."""
import optax

from rlpt.config.schema import OptimConfig


def make_schedule(cfg: OptimConfig, total_steps: int) -> optax.Schedule:
    warm = max(cfg.warmup_steps, 0)
    decay = max(total_steps - warm, 1)
    if cfg.schedule == "constant":
        main = optax.constant_schedule(cfg.lr)
    elif cfg.schedule == "linear":
        main = optax.linear_schedule(cfg.lr, cfg.lr * cfg.min_lr_ratio, decay)
    elif cfg.schedule == "cosine":
        main = optax.cosine_decay_schedule(cfg.lr, decay, alpha=cfg.min_lr_ratio)
    else:
        raise ValueError(f"optim.schedule={cfg.schedule!r}; expected cosine, linear or constant")
    if warm == 0:
        return main
    return optax.join_schedules([optax.linear_schedule(0.0, cfg.lr, warm), main], [warm])


def make_optimizer(cfg: OptimConfig, total_steps: int) -> optax.GradientTransformation:
    """Clipping (global norm) followed by the named optimizer driven by the schedule."""
    lr = make_schedule(cfg, total_steps)
    if cfg.name == "adamw":
        opt = optax.adamw(lr, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay)
    elif cfg.name == "adafactor":
        opt = optax.adafactor(lr, weight_decay_rate=cfg.weight_decay or None)
    elif cfg.name == "lion":
        opt = optax.lion(lr, b1=cfg.b1, b2=cfg.b2, weight_decay=cfg.weight_decay)
    elif cfg.name == "sgd":
        opt = optax.sgd(lr)
    else:
        raise ValueError(f"optim.name={cfg.name!r}; expected adamw, adafactor, lion or sgd")
    if cfg.clip_norm > 0:
        opt = optax.chain(optax.clip_by_global_norm(cfg.clip_norm), opt)
    return opt
