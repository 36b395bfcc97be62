"""The staging topology rehearsed on one machine (`mlops pipeline rehearse`, `make rehearse`).

Modules: ``servers`` (the process harness), ``topology`` (the platform servers), ``gitops`` (the bare remote
and what its overlays serve at HEAD), ``datapath`` (ingest → DVC remote → ``dvc pull``), ``serving`` (revisions
started from ``services/`` as the overlay names them), ``release`` (publish, canary analysis, rollback),
``loop`` (the steps), ``rehearse`` (the run, its summary, report and JSON line).
"""

from mlops_pipeline.rehearsal.rehearse import STEPS, RehearsalResult, run_rehearsal

__all__ = ["STEPS", "RehearsalResult", "run_rehearsal"]
