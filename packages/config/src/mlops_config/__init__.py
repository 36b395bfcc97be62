"""The platform's one config layer: typed sections and the layered loader."""

from mlops_config._spark import SPARK_DEFAULTS, spark_conf
from mlops_config.data import DataConfig
from mlops_config.delivery import DeliveryConfig, LMSequentialConfig, SequentialCanaryConfig
from mlops_config.errors import ConfigError, PlatformError
from mlops_config.evaluation import EvaluationConfig
from mlops_config.features import FeaturesConfig
from mlops_config.loader import LoadedConfig, config_schema, find_config_dir, load_config
from mlops_config.monitoring import MonitoringConfig
from mlops_config.platform import PlatformConfig
from mlops_config.project import ProjectConfig
from mlops_config.provenance import ProvenanceConfig
from mlops_config.serving import LLMServingConfig, ServingConfig, ShadowConfig
from mlops_config.tracking import TrackingConfig
from mlops_config.training import (
    CausalLMConfig,
    CheckpointConfig,
    FSDPConfig,
    LoRAConfig,
    MixedPrecisionConfig,
    TrainingConfig,
    WrapPolicyConfig,
)

__all__ = [
    "SPARK_DEFAULTS",
    "CausalLMConfig",
    "CheckpointConfig",
    "ConfigError",
    "DataConfig",
    "DeliveryConfig",
    "EvaluationConfig",
    "FSDPConfig",
    "FeaturesConfig",
    "LLMServingConfig",
    "LMSequentialConfig",
    "LoRAConfig",
    "LoadedConfig",
    "MixedPrecisionConfig",
    "MonitoringConfig",
    "PlatformConfig",
    "PlatformError",
    "ProjectConfig",
    "ProvenanceConfig",
    "SequentialCanaryConfig",
    "ServingConfig",
    "ShadowConfig",
    "TrackingConfig",
    "TrainingConfig",
    "WrapPolicyConfig",
    "config_schema",
    "find_config_dir",
    "load_config",
    "spark_conf",
]
