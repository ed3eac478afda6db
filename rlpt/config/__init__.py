"""Typed configuration: dataclass schemas composed by Hydra from experiments/conf."""
from rlpt.config.schema import (
    Config,
    DataConfig,
    LoraConfig,
    MeshConfig,
    OptimConfig,
    SourceConfig,
    TrainConfig,
    compose,
    register_configs,
)

__all__ = ["Config", "DataConfig", "LoraConfig", "MeshConfig", "OptimConfig", "SourceConfig", "TrainConfig",
           "compose", "register_configs"]
