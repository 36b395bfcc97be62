"""The platform's one config layer: typed sections and the layered loader."""

from mlops_config._spark import SPARK_DEFAULTS, spark_conf
from mlops_config.contract import (
    TIMESTAMP_COLUMNS,
    ContractConfig,
    DerivedColumnSpec,
    ExpectationsSpec,
    RangeSpec,
)
from mlops_config.data import DataConfig
from mlops_config.delivery import (
    DATA_VERSION,
    DeliveryConfig,
    LMDeliveryConfig,
    LMSequentialConfig,
    RetrainConfig,
    SequentialCanaryConfig,
    TabularDeliveryConfig,
    TabularSequentialConfig,
    data_pin_path,
    parse_data_pin,
    read_data_pin,
    require_data_pin,
)
from mlops_config.errors import ConfigError, PlatformError
from mlops_config.evaluation import EvaluationConfig, LMEvaluationConfig, TabularEvaluationConfig
from mlops_config.features import FeaturesConfig
from mlops_config.loader import LoadedConfig, config_schema, find_config_dir, load_config
from mlops_config.monitoring import MonitoringConfig
from mlops_config.platform import PlatformConfig
from mlops_config.project import ProjectConfig
from mlops_config.provenance import ProvenanceConfig
from mlops_config.serving import LLMServingConfig, ServingConfig, ShadowConfig, TabularServingConfig
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
    "DATA_VERSION",
    "SPARK_DEFAULTS",
    "TIMESTAMP_COLUMNS",
    "CausalLMConfig",
    "CheckpointConfig",
    "ConfigError",
    "ContractConfig",
    "DataConfig",
    "DeliveryConfig",
    "DerivedColumnSpec",
    "EvaluationConfig",
    "ExpectationsSpec",
    "FSDPConfig",
    "FeaturesConfig",
    "LLMServingConfig",
    "LMDeliveryConfig",
    "LMEvaluationConfig",
    "LMSequentialConfig",
    "LoRAConfig",
    "LoadedConfig",
    "MixedPrecisionConfig",
    "MonitoringConfig",
    "PlatformConfig",
    "PlatformError",
    "ProjectConfig",
    "ProvenanceConfig",
    "RangeSpec",
    "RetrainConfig",
    "SequentialCanaryConfig",
    "ServingConfig",
    "ShadowConfig",
    "TabularDeliveryConfig",
    "TabularEvaluationConfig",
    "TabularSequentialConfig",
    "TabularServingConfig",
    "TrackingConfig",
    "TrainingConfig",
    "WrapPolicyConfig",
    "config_schema",
    "data_pin_path",
    "find_config_dir",
    "load_config",
    "parse_data_pin",
    "read_data_pin",
    "require_data_pin",
    "spark_conf",
]
