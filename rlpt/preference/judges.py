"""Judges a run's reward mixture names, built from the config before RL: `judge_rm` is a Bradley-Terry reward
model on cfg.pref pairs (pref.rm_path, else trained in the stage on the policy's backbone)."""
import contextlib
import os

from rlpt.config.schema import Config
from rlpt.rewards.judges import JUDGE_PREFIX, JUDGES, RewardModelJudge, register_judge

BUILDABLE = ("rm",)


def needed_judges(cfg: Config) -> list[str]:
    """Judge names the reward's tables use (components `judge_<name>`), in first-seen order."""
    tables = [cfg.reward.components, *cfg.reward.per_domain.values()]
    names = [n[len(JUDGE_PREFIX):] for t in tables for n in t if n.startswith(JUDGE_PREFIX)]
    return list(dict.fromkeys(names))


@contextlib.contextmanager
def run_judges(cfg: Config, tok, policy, out_dir: str):
    """Register each judge cfg.reward needs that is not registered yet, for the block's duration; yields info
    for the run summary (reward-model pair counts and held-out accuracy). A name rlpt cannot build from config
    raises: register it (rlpt.rewards.register_judge) before the stage runs."""
    info, built = {}, []
    for name in needed_judges(cfg):
        if name in JUDGES:
            continue
        if name not in BUILDABLE:
            raise KeyError(f"reward {cfg.reward.name!r} uses judge_{name}, but no judge {name!r} is registered and "
                           f"only {list(BUILDABLE)} are built from the config; register it before the run")
        from rlpt.preference.reward_model import RewardModel, train_reward_model  # on use (start-up: orbax/tensorboard)

        if cfg.pref.rm_path:
            rm, rm_info = RewardModel.load(cfg.pref.rm_path), {"rm_path": cfg.pref.rm_path}
        else:
            rm, rm_info = train_reward_model(cfg, tok, policy, os.path.join(out_dir, "rm"))
        # Bradley-Terry logits through a sigmoid: P(better than a reference response at logit 0)
        register_judge(name, RewardModelJudge(lambda p, r, rm=rm: rm.score(tok, p, r), squash="sigmoid"))
        built.append(name)
        info[f"judge_{name}"] = rm_info
    try:
        yield info
    finally:
        for name in built:
            del JUDGES[name]
