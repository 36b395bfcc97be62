"""``project``: what this deployment is called and where its local state lives."""

from __future__ import annotations

from pydantic import Field

from mlops_config._base import Section


class ProjectConfig(Section):
    name: str = Field(default="mlops", pattern=r"^[a-z0-9][a-z0-9-]*$")
    """Project name (lowercase, digits, dashes); used for Kubernetes resource names, and the MLflow experiment
    (``tracking.experiment``) and Feast project (``features.feast_project``) unless a layer sets those."""

    model: str = ""
    """Name of the model config under ``configs/models/`` that this run uses: ``--model``, else this key in a
    file (``configs/base.yaml`` names the reference model). The loader always sets it and fails when no layer
    does; only a section built bare has none (``""``)."""

    profile: str = "local"
    """Profile the config was loaded with; set by the loader, not by files."""

    seed: int = Field(default=42, ge=0)
    """Global seed for data generation, splits and training."""

    state_dir: str = ".mlops"
    """Folder for local state (MLflow database, Feast SQLite store, DVC remote, ledger). Relative to the repo root."""

    reports_dir: str = "reports"
    """Folder where human-readable reports (gates, drift, pipeline) are written."""
