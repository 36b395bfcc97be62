"""``PlatformConfig``: the sections composed. Functions take a section, never this whole object."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, model_validator

from mlops_config._base import Section
from mlops_config.contract import ContractConfig
from mlops_config.data import DataConfig
from mlops_config.delivery import DeliveryConfig
from mlops_config.errors import ConfigError
from mlops_config.evaluation import EvaluationConfig
from mlops_config.features import FeaturesConfig
from mlops_config.monitoring import SERVING_COLUMNS, MonitoringConfig
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

    contract: ContractConfig | None = None
    """The tabular model's contract (request fields, entity keys, label, data expectations, encoder columns, key
    features), declared in its ``configs/models/<m>.yaml``; ``None`` for models without one (language models)."""

    @model_validator(mode="before")
    @classmethod
    def _names_from_project(cls, data: Any) -> Any:
        """``tracking.experiment`` and ``features.feast_project`` follow ``project.name`` unless set (before the
        sections are built, so a bare ``PlatformConfig(project=...)`` gets them too)."""
        if not isinstance(data, dict):
            return data
        name = _given(data.get("project"), "name", ProjectConfig.model_fields["name"].default)
        if not isinstance(name, str):
            return data  # validation names the bad project.name
        data = dict(data)
        for section, key, value in (("tracking", "experiment", name), ("features", "feast_project",
                                                                       name.replace("-", "_"))):
            given = data.get(section)
            if isinstance(given, BaseModel) and key not in given.model_fields_set:
                data[section] = given.model_copy(update={key: value})
            elif (given is None or isinstance(given, dict)) and key not in (given or {}):
                data[section] = {**(given or {}), key: value}
        return data

    def declared_contract(self, use: str) -> ContractConfig:
        """:attr:`contract`, for ``use`` (what needs it, said in the error).

        Raises:
            ConfigError: the model declares no contract.
        """
        if self.contract is None:
            raise ConfigError(f"{use} needs the model's contract, and model {self.project.model!r} declares none; "
                              f"expected a section contract in configs/models/{self.project.model}.yaml (a tabular "
                              "model's record_id, entity keys, fields and label)")
        return self.contract

    @model_validator(mode="before")
    @classmethod
    def _monitoring_from_contract(cls, data: Any) -> Any:
        """``monitoring.key_features`` and ``monitoring.ignore_columns`` follow the contract unless set. Before the
        sections are built, as :meth:`_names_from_project`: ``PlatformConfig(...)`` ignores a copy returned by an
        *after* validator (pydantic), so a config built directly kept the monitoring defaults."""
        if not isinstance(data, dict) or data.get("contract") is None:
            return data
        try:
            c = ContractConfig.model_validate(data["contract"])
        except ValueError:
            return data  # validation names the bad contract
        data = dict(data)
        resolved = {"key_features": c.key_features,
                    "ignore_columns": (*SERVING_COLUMNS[:5], c.record_id, *c.entity_keys, *SERVING_COLUMNS[5:],
                                       c.label)}
        given = data.get("monitoring")
        if isinstance(given, BaseModel):
            update = {k: v for k, v in resolved.items() if k not in given.model_fields_set}
            data["monitoring"] = given.model_copy(update=update) if update else given
        elif given is None or isinstance(given, dict):
            data["monitoring"] = {**resolved, **(given or {})}
        return data

def _given(section: Any, key: str, default: Any) -> Any:
    """``key`` of a section given as a model (when set) or a mapping, else ``default``."""
    if isinstance(section, BaseModel):
        return getattr(section, key) if key in section.model_fields_set else default
    return section.get(key, default) if isinstance(section, dict) else default
