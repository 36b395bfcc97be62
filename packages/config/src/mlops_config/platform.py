"""``PlatformConfig``: the sections composed. Functions take a section, never this whole object."""

from __future__ import annotations

from mlops_config._base import Section
from mlops_config.data import DataConfig
from mlops_config.delivery import DeliveryConfig
from mlops_config.evaluation import EvaluationConfig
from mlops_config.features import FeaturesConfig
from mlops_config.monitoring import MonitoringConfig
from mlops_config.project import ProjectConfig
from mlops_config.provenance import ProvenanceConfig
from mlops_config.serving import ServingConfig
from mlops_config.tracking import TrackingConfig
from mlops_config.training import TrainingConfig


class PlatformConfig(Section):
    project: ProjectConfig = ProjectConfig()
    """Project identity and local state folders."""

    tracking: TrackingConfig = TrackingConfig()
    """MLflow tracking and registry."""

    data: DataConfig = DataConfig()
    """Raw data, validation and quarantine."""

    features: FeaturesConfig = FeaturesConfig()
    """Feast repository and stores."""

    training: TrainingConfig = TrainingConfig()
    """Trainer, FSDP and checkpoints."""

    evaluation: EvaluationConfig = EvaluationConfig()
    """Evaluation gates."""

    serving: ServingConfig = ServingConfig()
    """Model serving."""

    monitoring: MonitoringConfig = MonitoringConfig()
    """Drift monitoring and alerting."""

    delivery: DeliveryConfig = DeliveryConfig()
    """GitOps delivery and canary analysis."""

    provenance: ProvenanceConfig = ProvenanceConfig()
    """Model signing and verification."""
