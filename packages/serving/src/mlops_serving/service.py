"""Assemble and run a server from config: the one function behind ``mlops serve``.

Start-up order: resolve the alias (and canary alias) to immutable versions, build the feature lookup for the
model's FeatureService, then serve. Resolution and loading happen in a background thread once the HTTP
server is up: liveness answers at once, readiness waits for them and reports the reason while it cannot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlops_config import FeaturesConfig, ProvenanceConfig, ServingConfig, TrackingConfig
from mlops_core import registered_model_name
from mlops_model import ENTITY_KEYS
from mlops_serving.admission import AdmissionLimits
from mlops_serving.errors import ModelLoadError, ServingError
from mlops_serving.log_store import resolve_prediction_log_uri
from mlops_serving.lookup import FeatureLookup, FeatureSource
from mlops_serving.metrics import ServingMetrics
from mlops_serving.prediction_log import PredictionLogWriter
from mlops_serving.registry import resolve_alias
from mlops_serving.remote import remote_loader
from mlops_serving.served import LocalModel, ModelRef, ServedModel, load_model
from mlops_serving.shadow import shadow_sender
from mlops_serving.transformer import FraudModel

log = logging.getLogger(__name__)
Check = Callable[[Path], object]
"""A verifier run on an exported folder before it loads (:func:`mlops_model.model_verifier`)."""


def create_app(
    serving: ServingConfig,
    *,
    model_name: str,
    loader: Callable[[], tuple[ServedModel, ServedModel | None]],
    source: FeatureSource,
    log_dir: str | Path,
    retry_s: float | None = None,
) -> Any:
    """A ready-to-run ASGI app from parts (tests and :func:`serve` both use it); ``log_dir`` is the
    prediction-log store (a folder or an fsspec URI such as ``s3://bucket/prefix``)."""
    from mlops_serving.server import StoreReadiness, build_app

    metrics = ServingMetrics()
    parity = getattr(source, "parity", None)  # the direct reader's sampled comparison with Feast's (OnlineFeatures)
    if parity is not None:
        metrics.registry.register(parity.collector(model=model_name))
    writer = PredictionLogWriter(
        log_dir, model_name, flush_s=serving.prediction_log_flush_s, max_queue=serving.prediction_log_max_queue,
        retention_hours=serving.prediction_log_retention_hours,
        on_written=lambda n: metrics.log_rows.labels(model_name).inc(n),
        on_dropped=lambda n: metrics.log_dropped.labels(model_name).inc(n),
        on_failed=lambda: metrics.log_flush_failures.labels(model_name).inc(),
    )
    lookup = FeatureLookup(source, entity_keys=ENTITY_KEYS, outage=serving.redis_outage,
                           retry_s=serving.feature_retry_s if retry_s is None else retry_s)
    shadow = None
    if serving.shadow.fraction > 0 and serving.shadow.url:
        shadow = shadow_sender(model_name, url=serving.shadow.url, fraction=serving.shadow.fraction,
                               queue_size=serving.shadow.queue_size, timeout_s=serving.shadow.timeout_s,
                               registry=metrics.registry, prediction_log_uri=log_dir,
                               flush_s=serving.prediction_log_flush_s,
                               retention_hours=serving.prediction_log_retention_hours,
                               max_rows=serving.max_instances)
    model = FraudModel(model_name, loader=loader, lookup=lookup, metrics=metrics,
                       prediction_log=writer, max_instances=serving.max_instances,
                       canary_percent=serving.canary_percent if serving.canary_alias else 0, shadow=shadow)
    return build_app(model, metrics, readiness=StoreReadiness(model, lookup, serving.redis_outage),
                     max_payload_bytes=serving.max_payload_bytes,
                     status_detail=serving.status_detail, prediction_log=writer,
                     admission=AdmissionLimits.from_config(serving))


def create_lm_app(serving: ServingConfig, *, model_name: str, folder: Path, version: str,
                  log_dir: str | Path | None, check: Check | None = None) -> Any:
    """The language-model app: a :class:`~mlops_serving.lm.CausalLM` on KServe's app with the OpenAI routes;
    ``check`` verifies the folder's signature at load (a refused model leaves the app up, not ready, saying why)."""
    from mlops_serving.lm import CausalLM
    from mlops_serving.lm_api import LMMetrics, LMRoutes, mount_lm_routes
    from mlops_serving.server import ModelReadiness, build_app

    metrics = LMMetrics()
    writer = None if log_dir is None else PredictionLogWriter(
        log_dir, model_name, flush_s=serving.prediction_log_flush_s, max_queue=serving.prediction_log_max_queue,
        retention_hours=serving.prediction_log_retention_hours,
        on_written=lambda n: metrics.log_rows.labels(model_name).inc(n),
        on_dropped=lambda n: metrics.log_dropped.labels(model_name).inc(n),
        on_failed=lambda: metrics.log_flush_failures.labels(model_name).inc(),
    )
    model = CausalLM(model_name, folder, version, check)
    metrics.model_info.labels(model_name, version, "stable", "").set(1)
    routes = LMRoutes(model, metrics, serving.llm, writer)
    return build_app(model, metrics, readiness=ModelReadiness(model), max_payload_bytes=serving.max_payload_bytes,
                     status_detail=serving.status_detail,
                     prediction_log=writer, mount=lambda app: mount_lm_routes(app, routes))


def is_causal_lm_folder(folder: Path) -> bool:
    """A Hugging Face causal-LM export (``model.json`` kind ``hf_causal_lm``, or a bare ``transformers`` folder)."""
    import json

    meta = folder / "model.json"
    if meta.is_file():
        return bool(json.loads(meta.read_text(encoding="utf-8")).get("kind") == "hf_causal_lm")
    return (folder / "config.json").is_file()


def registry_loader(tracking: TrackingConfig, root: Path, model: str, alias: str, canary_alias: str | None,
                    cache_dir: Path, report: Callable[[str], None] | None = None, *, check: Check | None = None
                    ) -> Callable[[], tuple[LocalModel, LocalModel | None]]:
    """A loader that resolves aliases to versions (once, at start-up) and loads them; the versions are reported.

    ``check`` verifies each version's signature before it is loaded (:func:`mlops_model.model_verifier`).
    """

    def load() -> tuple[LocalModel, LocalModel | None]:
        stable = load_model(resolve_alias(tracking, root, model, alias, cache_dir), check)
        canary = (load_model(resolve_alias(tracking, root, model, canary_alias, cache_dir), check)
                  if canary_alias else None)
        line = f"serving {model}@{alias} = version {stable.ref.version}" + (
            f"; canary {model}@{canary_alias} = version {canary.ref.version}" if canary else "")
        log.info(line)
        if report is not None:
            report(line)
        return stable, canary

    return load


def folder_loader(model: str, folder: Path, canary_folder: Path | None = None, *, version: str | None = None,
                  check: Check | None = None) -> Callable[[], tuple[LocalModel, LocalModel | None]]:
    """A loader for exported folders on disk (no registry); the version label is ``version`` or the folder's name."""

    def load() -> tuple[LocalModel, LocalModel | None]:
        stable = load_model(ModelRef(model, version or folder.name, folder), check)
        canary = load_model(ModelRef(model, canary_folder.name, canary_folder), check) if canary_folder else None
        return stable, canary

    return load


def serve(
    serving: ServingConfig,
    features: FeaturesConfig,
    tracking: TrackingConfig,
    root: Path,
    model: str,
    *,
    state_dir: str = ".mlops",
    model_dir: Path | None = None,
    model_version: str | None = None,
    report: Callable[[str], None] | None = None,
    provenance: ProvenanceConfig | None = None,
    causal_lm: bool = False,
) -> None:
    """Run the server for ``model`` until stopped (``serving`` already carries CLI overrides).

    Args:
        serving: The ``serving`` section (host, port, aliases, canary split, limits, outage policy, log).
        features: The ``features`` section (online store the transformer reads).
        tracking: The ``tracking`` section (registry the alias is resolved in).
        root: Repo root relative paths are resolved against.
        model: Model config name (registered as ``<prefix><model>``).
        state_dir: Local state folder (downloaded versions are cached under ``serving/models``).
        model_dir: Serve this exported folder instead of the registry's version; ``models:/<name>@<alias>``
            resolves that alias of the language model in the registry (:func:`lm_registry_ref`).
        model_version: Version label of ``model_dir`` in metrics and the log (default: the folder's name).
        report: Called with one line once the versions are resolved (the CLI prints it).
        provenance: Signature policy and keys; each model's signature is verified before it loads (``None``:
            no verification, for callers that checked already).
        causal_lm: ``model`` is a language model (its config trains ``causal_lm``): without ``model_dir`` the
            registry's ``serving.alias`` version is served by the language-model app.
    """
    import mlops_features
    from mlops_model import model_verifier
    from mlops_serving.server import run_app

    _check_plan(serving, model_dir)
    check = model_verifier(provenance, root) if provenance is not None else None
    lm_ref = lm_registry_ref(serving, tracking, root, model, state_dir=state_dir, model_dir=model_dir,
                             causal_lm=causal_lm, provenance=provenance)
    if lm_ref is not None:
        model_dir, model_version = lm_ref.folder, lm_ref.version
    if model_dir is not None and is_causal_lm_folder(model_dir):
        app = create_lm_app(serving, model_name=model, folder=model_dir, version=model_version or model_dir.name,
                            log_dir=resolve_prediction_log_uri(serving.prediction_log_uri, root), check=check)
        if report is not None:
            if lm_ref is not None:
                report(f"serving {model}@{lm_ref.alias} = version {lm_ref.version}")
            report(f"language model listening on http://{serving.host}:{serving.port} (OpenAI /openai/v1, "
                   f"V2 /v2/models/{model}/generate, /metrics)")
        run_app(app, serving.host, serving.port)
        return
    if serving.role == "predictor":
        _serve_predictor(serving, tracking, root, model, state_dir=state_dir, model_dir=model_dir,
                         model_version=model_version, report=report, check=check)
        return
    if serving.workers != 1:
        raise ServingError(f"serving.workers={serving.workers} is not supported by the local server; use 1 "
                           "(scale out with replicas of the InferenceService)")
    cache = root / state_dir / "serving" / "models"
    loader: Callable[[], tuple[ServedModel, ServedModel | None]]
    if serving.role == "transformer":
        if not serving.predictor_host:
            raise ServingError("serving.role=transformer needs serving.predictor_host (KServe: --predictor_host)")
        loader = remote_loader(serving.predictor_host, model)
    elif model_dir is not None:
        loader = folder_loader(model, model_dir, version=model_version, check=check)
    else:
        loader = registry_loader(tracking, root, model, serving.alias, serving.canary_alias, cache, report,
                                 check=check)
    source = mlops_features.OnlineFeatures(features, root)
    app = create_app(serving, model_name=model, loader=loader, source=source,
                     log_dir=resolve_prediction_log_uri(serving.prediction_log_uri, root))
    if report is not None:
        report(f"listening on http://{serving.host}:{serving.port} (V1 /v1/models/{model}:predict, "
               f"V2 /v2/models/{model}/infer, /metrics)")
    run_app(app, serving.host, serving.port)


def lm_registry_ref(serving: ServingConfig, tracking: TrackingConfig, root: Path, model: str, *, state_dir: str,
                    model_dir: Path | None, causal_lm: bool,
                    provenance: ProvenanceConfig | None = None) -> ModelRef | None:
    """The registry version a language-model server serves, downloaded; ``None`` when it serves a folder or
    is not a language model.

    ``model_dir`` ``models:/<name>@<alias>`` (``name``: the model config or its registered name) or, for a
    language model without ``model_dir``, ``serving.alias``: resolved once to an immutable version, downloaded into
    ``<state_dir>/serving/models`` like the fraud model's versions, its signature verified when ``provenance``
    is given.

    Raises:
        ServingError: a malformed ``models:/`` URI or another model's name.
        ModelLoadError: the alias is not set, the registry is unreachable, or the version is not a causal LM.
    """
    uri = str(model_dir) if model_dir is not None else ""
    if uri.startswith("models:/"):
        name, sep, alias = uri.removeprefix("models:/").partition("@")
        registered = registered_model_name(tracking, model)
        if not sep or not alias or "/" in alias:
            raise ServingError(f"--model-dir {uri!r} is not a registry alias; write models:/{registered}@<alias>")
        if name not in (model, registered):
            raise ServingError(f"--model-dir {uri!r} names model {name!r}, but this server serves {model!r} "
                               f"(registered as {registered!r}); pass --model {name} or models:/{registered}@{alias}")
    elif model_dir is None and causal_lm:
        alias = serving.alias
    else:
        return None
    ref = resolve_alias(tracking, root, model, alias, root / state_dir / "serving" / "models")
    if not is_causal_lm_folder(ref.folder):
        raise ModelLoadError(f"{model}@{alias} = version {ref.version} is not a causal language model export "
                             f"(model.json kind is not 'hf_causal_lm' in {str(ref.folder)!r})")
    if provenance is not None:
        from mlops_model import model_verifier

        model_verifier(provenance, root)(ref.folder)
    return ref


def create_predictor_app(serving: ServingConfig, *, model_name: str, loader: Callable[[], LocalModel]) -> Any:
    """The predictor-only app: encoded rows in, scores out (role ``predictor``)."""
    from mlops_serving.predictor import PredictorModel
    from mlops_serving.server import ModelReadiness, build_app

    metrics = ServingMetrics()
    model = PredictorModel(model_name, loader=loader, metrics=metrics, max_instances=serving.max_instances)
    return build_app(model, metrics, readiness=ModelReadiness(model), max_payload_bytes=serving.max_payload_bytes,
                     status_detail=serving.status_detail,
                     export_meta=model.export_meta, admission=AdmissionLimits.from_config(serving))


def _serve_predictor(serving: ServingConfig, tracking: TrackingConfig, root: Path, model: str, *, state_dir: str,
                     model_dir: Path | None, model_version: str | None,
                     report: Callable[[str], None] | None, check: Check | None) -> None:
    from mlops_serving.server import run_app

    if model_dir is not None:
        ref = ModelRef(model, model_version or model_dir.name, model_dir)
        app = create_predictor_app(serving, model_name=model, loader=lambda: load_model(ref, check))
    else:
        cache = root / state_dir / "serving" / "models"
        stable = registry_loader(tracking, root, model, serving.alias, None, cache, report, check=check)
        app = create_predictor_app(serving, model_name=model, loader=lambda: stable()[0])
    if report is not None:
        report(f"predictor listening on http://{serving.host}:{serving.port} (V2 /v2/models/{model}/infer)")
    run_app(app, serving.host, serving.port)


def _check_plan(serving: ServingConfig, model_dir: Path | None) -> None:
    """Refuse settings that would be silently ignored."""
    if serving.canary_percent and not serving.canary_alias:
        raise ServingError(f"serving.canary_percent={serving.canary_percent} needs serving.canary_alias "
                           "(the version to send that share to)")
    if serving.canary_alias and (model_dir is not None or serving.role != "all"):
        where = "--model-dir" if model_dir is not None else f"role {serving.role!r}"
        raise ServingError(f"serving.canary_alias={serving.canary_alias!r} cannot be used with {where}: the local "
                           "canary needs both versions from the registry (on Kubernetes, KServe splits traffic)")
    if serving.shadow.fraction > 0 and serving.role == "predictor":
        raise ServingError(f"serving.shadow.fraction={serving.shadow.fraction} cannot be used with role 'predictor': "
                           "the transformer (role 'transformer' or 'all') mirrors requests; the candidate is a "
                           "predictor of its own at serving.shadow.url")
    if serving.canary_alias and serving.canary_percent == 0:
        log.warning("canary alias %r set with canary_percent 0: it is loaded but gets no traffic",
                    serving.canary_alias)

