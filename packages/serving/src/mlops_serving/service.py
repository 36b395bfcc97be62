"""Assemble and run a server from config: the one function behind ``mlops serve``.

Start-up order: resolve the alias (and canary alias) to immutable versions, build the feature lookup for the
model's FeatureService, then serve. Resolution and loading happen in a background thread once the HTTP
server is up: liveness answers at once, readiness waits for them and reports the reason while it cannot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlops_config import ContractConfig, FeaturesConfig, ProvenanceConfig, ServingConfig, TrackingConfig
from mlops_core import registered_model_name
from mlops_model import META_FILE, ModelKind, kind_of, kind_problem, model_verifier
from mlops_serving.admission import Admission, AdmissionLimits
from mlops_serving.errors import ModelLoadError, ServingError
from mlops_serving.log_store import resolve_prediction_log_uri
from mlops_serving.lookup import FeatureLookup, FeatureSource
from mlops_serving.metrics import ServingMetrics
from mlops_serving.prediction_log import PredictionLogWriter
from mlops_serving.registry import resolve_alias
from mlops_serving.remote import remote_loader
from mlops_serving.served import LocalModel, ModelRef, ServedModel, load_model
from mlops_serving.shadow import shadow_sender
from mlops_serving.transformer import TabularModel

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
    lookup = FeatureLookup(source, outage=serving.tabular.redis_outage,
                           retry_s=serving.tabular.feature_retry_s if retry_s is None else retry_s)
    shadow = None
    if serving.tabular.shadow.fraction > 0 and serving.tabular.shadow.url:
        shadow = shadow_sender(model_name, url=serving.tabular.shadow.url, fraction=serving.tabular.shadow.fraction,
                               queue_size=serving.tabular.shadow.queue_size, timeout_s=serving.tabular.shadow.timeout_s,
                               registry=metrics.registry, prediction_log_uri=log_dir,
                               flush_s=serving.prediction_log_flush_s,
                               retention_hours=serving.prediction_log_retention_hours,
                               max_rows=serving.tabular.max_instances)
    model = TabularModel(model_name, loader=loader, lookup=lookup, metrics=metrics,
                       prediction_log=writer, max_instances=serving.tabular.max_instances,
                       canary_percent=serving.canary_percent if serving.canary_alias else 0, shadow=shadow)
    return build_app(model, metrics, readiness=StoreReadiness(model, lookup, serving.tabular.redis_outage),
                     max_payload_bytes=serving.max_payload_bytes,
                     status_detail=serving.status_detail,
                     not_ready_retry_after_s=serving.not_ready_retry_after_s, prediction_log=writer,
                     admission=Admission(AdmissionLimits.from_config(serving), metrics.registry, model_name))


def create_lm_app(serving: ServingConfig, *, model_name: str, folder: Path, version: str,
                  log_dir: str | Path | None, check: Check | None = None) -> Any:
    """The language-model app: a :class:`~mlops_serving.lm.CausalLM` on KServe's app with the OpenAI routes, behind
    the tabular servers' admission controller in its concurrency mode (``serving.lm.max_concurrent`` generating,
    ``serving.lm.max_queue`` waiting) and error map (OpenAI's error body on its routes); ``check`` verifies the
    folder's signature at load (a refused model leaves the app up, not ready, saying why)."""
    from mlops_serving.lm import CausalLM
    from mlops_serving.lm_api import LMMetrics, LMRoutes, lm_error_format, mount_lm_routes
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
    admission = Admission(AdmissionLimits.for_generation(serving), metrics.registry, model_name)
    routes = LMRoutes(model, metrics, serving.lm, writer, admission)
    return build_app(model, metrics, readiness=ModelReadiness(model), max_payload_bytes=serving.max_payload_bytes,
                     status_detail=serving.status_detail,
                     not_ready_retry_after_s=serving.not_ready_retry_after_s, prediction_log=writer,
                     admission=admission, mount=lambda app: mount_lm_routes(app, routes), error_formats=lm_error_format)


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
    model_uri: str | None = None,
    model_version: str | None = None,
    report: Callable[[str], None] | None = None,
    provenance: ProvenanceConfig | None = None,
    kind: ModelKind = ModelKind.TABULAR,
    contract: ContractConfig | None,
) -> None:
    """Run the server for ``model`` until stopped (``serving`` already carries CLI overrides).

    The family's server is looked up in :data:`SERVERS` by the kind of what is served: the folder's own
    (``model.json``, or a bare Hugging Face checkpoint) when ``model_dir`` names one, else ``kind``.

    Args:
        serving: The ``serving`` section (host, port, aliases, canary split, limits, outage policy, log).
        features: The ``features`` section (online store the transformer reads).
        tracking: The ``tracking`` section (registry the alias is resolved in).
        root: Repo root relative paths are resolved against.
        model: Model config name (registered as ``<prefix><model>``).
        state_dir: Local state folder (downloaded versions are cached under ``serving/models``).
        model_dir: Serve this exported folder instead of the registry's version.
        model_uri: Serve the version ``models:/<name>@<alias>`` names, resolved in the registry
            (:func:`registry_ref`); not together with ``model_dir``.
        model_version: Version label of ``model_dir`` in metrics and the log (default: the folder's name).
        report: Called with one line once the versions are resolved (the CLI prints it).
        provenance: Signature policy and keys; each model's signature is verified before it loads (``None``:
            no verification, for callers that checked already).
        kind: The family the model config trains (``mlops_model.kind_of(config.training)``): what the
            registry's ``serving.alias`` version is served as when no folder is named.
        contract: The model config's contract (``cfg.contract``; ``None`` where the model declares none, which a
            tabular server refuses): the entity keys the online store is read by. Requests are validated by the
            served version's own; a version whose entity keys differ is refused at load.

    Raises:
        ServingError: a URI as ``model_dir``, a folder as ``model_uri``, or both; no server is registered for the
            kind served (the message names the kinds that are).
    """
    _check_source(model_dir, model_uri)
    _check_plan(serving, model_dir, model_uri)
    check = model_verifier(provenance, root) if provenance is not None else None
    alias = None
    ref = registry_ref(serving, tracking, root, model, state_dir=state_dir, model_uri=model_uri,
                       provenance=provenance)
    if ref is not None:
        model_dir, model_version, alias = ref.folder, ref.version, ref.alias
    served = _served_kind(model_dir, kind)
    server = SERVERS.get(served)
    if server is None:
        raise ServingError(f"{model!r} is a {served.value!r} model, which has no server; servers exist for "
                           f"{[k.value for k in SERVERS]}")
    server(ServeTarget(serving, features, tracking, root, model, state_dir, model_dir, model_version, alias,
                       report, check, provenance, contract))


def _served_kind(folder: Path | None, configured: ModelKind) -> ModelKind:
    """The folder's own kind where it says one; the configured kind for the registry's version, or for a folder
    that is not there yet (the server starts and says, not ready, why it cannot load it)."""
    if folder is None or not ((folder / META_FILE).is_file() or (folder / "config.json").is_file()):
        return configured
    return kind_of(folder)


@dataclass(frozen=True)
class ServeTarget:
    """What :func:`serve` resolved, handed to the family's server."""

    serving: ServingConfig
    features: FeaturesConfig
    tracking: TrackingConfig
    root: Path
    model: str
    state_dir: str
    model_dir: Path | None
    model_version: str | None
    alias: str | None
    """The registry alias ``model_dir`` was resolved from (a ``models:/`` URI), else ``None``."""
    report: Callable[[str], None] | None
    check: Check | None
    provenance: ProvenanceConfig | None
    contract: ContractConfig | None
    """The model config's contract: the entity keys the online store is read by (``None``: it declares none)."""


def _serve_tabular(t: ServeTarget) -> None:
    """The transformer + predictor (role ``all``), or one of the halves of an InferenceService."""
    import mlops_features
    from mlops_serving.server import run_app

    serving, model, model_dir, report, check = t.serving, t.model, t.model_dir, t.report, t.check
    if serving.tabular.role == "predictor":
        _serve_predictor(serving, t.tracking, t.root, model, state_dir=t.state_dir, model_dir=model_dir,
                         model_version=t.model_version, report=report, check=check)
        return
    if t.contract is None:
        raise ServingError(f"serving tabular model {model!r} needs the model config's contract (its entity keys read "
                           f"the online store), and it declares none; expected a section contract in "
                           f"configs/models/{model}.yaml")
    if serving.tabular.workers != 1:
        raise ServingError(f"serving.tabular.workers={serving.tabular.workers} is not supported by the local server; "
                           "use 1 (scale out with replicas of the InferenceService)")
    cache = t.root / t.state_dir / "serving" / "models"
    loader: Callable[[], tuple[ServedModel, ServedModel | None]]
    if serving.tabular.role == "transformer":
        if not serving.tabular.predictor_host:
            raise ServingError("serving.tabular.role=transformer needs serving.tabular.predictor_host "
                               "(KServe: --predictor_host)")
        loader = remote_loader(serving.tabular.predictor_host, model)
    elif model_dir is not None:
        loader = folder_loader(model, model_dir, version=t.model_version, check=check)
    else:
        loader = registry_loader(t.tracking, t.root, model, serving.alias, serving.canary_alias, cache, report,
                                 check=check)
    source = mlops_features.OnlineFeatures(t.features, t.root, contract=t.contract)
    app = create_app(serving, model_name=model, loader=loader, source=source,
                     log_dir=resolve_prediction_log_uri(serving.prediction_log_uri, t.root))
    if report is not None:
        report(f"listening on http://{serving.host}:{serving.port} (V1 /v1/models/{model}:predict, "
               f"V2 /v2/models/{model}/infer, /metrics)")
    run_app(app, serving.host, serving.port)


def _serve_causal_lm(t: ServeTarget) -> None:
    """The language-model app over a folder, or over the registry's ``serving.alias`` version, downloaded."""
    from mlops_serving.server import run_app

    serving, model = t.serving, t.model
    folder, version, alias = t.model_dir, t.model_version, t.alias
    if folder is None:
        ref = _registry_version(serving.alias, t.tracking, t.root, model, state_dir=t.state_dir,
                                provenance=t.provenance, expect=ModelKind.HF_CAUSAL_LM)
        folder, version, alias = ref.folder, ref.version, ref.alias
    app = create_lm_app(serving, model_name=model, folder=folder, version=version or folder.name,
                        log_dir=resolve_prediction_log_uri(serving.prediction_log_uri, t.root), check=t.check)
    if t.report is not None:
        if alias is not None:
            t.report(f"serving {model}@{alias} = version {version}")
        t.report(f"language model listening on http://{serving.host}:{serving.port} (OpenAI /openai/v1, "
                 f"V2 /v2/models/{model}/generate, /metrics)")
    run_app(app, serving.host, serving.port)


SERVERS: dict[ModelKind, Callable[[ServeTarget], None]] = {
    ModelKind.TABULAR: _serve_tabular,
    ModelKind.HF_CAUSAL_LM: _serve_causal_lm,
}
"""The server of each family that is served (a byte-level LM is trained and gated, not served): the one place
serving chooses by family, as KServe's huggingfaceserver picks its ``Model`` class from the task it inferred."""


def _check_source(model_dir: Path | None, model_uri: str | None) -> None:
    """A folder goes in ``--model-dir``, a registry URI in ``--model-uri``; one of them at most."""
    if model_dir is not None and model_uri is not None:
        raise ServingError(f"--model-dir {str(model_dir)!r} and --model-uri {model_uri!r} both name the model to "
                           "serve; pass one")
    if model_dir is not None and str(model_dir).startswith("models:"):
        raise ServingError(f"--model-dir {str(model_dir)!r} is a registry URI; pass it as --model-uri "
                           "(--model-dir takes an exported model folder)")
    if model_uri is not None and not model_uri.startswith("models:/"):
        raise ServingError(f"--model-uri {model_uri!r} is not a registry URI models:/<name>@<alias>; "
                           "pass an exported model folder as --model-dir")


def registry_ref(serving: ServingConfig, tracking: TrackingConfig, root: Path, model: str, *, state_dir: str,
                 model_uri: str | None, provenance: ProvenanceConfig | None = None) -> ModelRef | None:
    """The registry version ``model_uri`` ``models:/<name>@<alias>`` names (``name``: the model config or its
    registered name), downloaded; ``None`` without a URI.

    Raises:
        ServingError: a malformed ``models:/`` URI or another model's name.
        ModelLoadError: the alias is not set or the registry is unreachable.
    """
    if model_uri is None:
        return None
    uri = model_uri
    name, sep, alias = uri.removeprefix("models:/").partition("@")
    registered = registered_model_name(tracking, model)
    if not sep or not alias or "/" in alias:
        raise ServingError(f"--model-uri {uri!r} is not a registry alias; write models:/{registered}@<alias>")
    if name not in (model, registered):
        raise ServingError(f"--model-uri {uri!r} names model {name!r}, but this server serves {model!r} "
                           f"(registered as {registered!r}); pass --model {name} or models:/{registered}@{alias}")
    return _registry_version(alias, tracking, root, model, state_dir=state_dir, provenance=provenance)


def _registry_version(alias: str, tracking: TrackingConfig, root: Path, model: str, *, state_dir: str,
                      provenance: ProvenanceConfig | None, expect: ModelKind | None = None) -> ModelRef:
    """``model@alias`` resolved once to an immutable version, downloaded into ``<state_dir>/serving/models``
    like the fraud model's versions, of kind ``expect`` (when given), its signature verified when ``provenance``
    is given."""
    ref = resolve_alias(tracking, root, model, alias, root / state_dir / "serving" / "models")
    problem = None if expect is None else kind_problem(ref.folder, expect)
    if expect is not None and problem is not None:
        raise ModelLoadError(f"{model}@{alias} = version {ref.version} is not a {expect.value!r} export: {problem} "
                             f"in {str(ref.folder)!r}")
    if provenance is not None:
        model_verifier(provenance, root)(ref.folder)
    return ref


def create_predictor_app(serving: ServingConfig, *, model_name: str, loader: Callable[[], LocalModel]) -> Any:
    """The predictor-only app: encoded rows in, scores out (role ``predictor``)."""
    from mlops_serving.predictor import PredictorModel
    from mlops_serving.server import ModelReadiness, build_app

    metrics = ServingMetrics()
    model = PredictorModel(model_name, loader=loader, metrics=metrics, max_instances=serving.tabular.max_instances)
    return build_app(model, metrics, readiness=ModelReadiness(model), max_payload_bytes=serving.max_payload_bytes,
                     status_detail=serving.status_detail,
                     not_ready_retry_after_s=serving.not_ready_retry_after_s,
                     export_meta=model.export_meta,
                     admission=Admission(AdmissionLimits.from_config(serving), metrics.registry, model_name))


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


def _check_plan(serving: ServingConfig, model_dir: Path | None, model_uri: str | None = None) -> None:
    """Refuse settings that would be silently ignored."""
    named = "--model-dir" if model_dir is not None else "--model-uri" if model_uri is not None else None
    if serving.canary_percent and not serving.canary_alias:
        raise ServingError(f"serving.canary_percent={serving.canary_percent} needs serving.canary_alias "
                           "(the version to send that share to)")
    if serving.canary_alias and (named is not None or serving.tabular.role != "all"):
        where = named or f"role {serving.tabular.role!r}"
        raise ServingError(f"serving.canary_alias={serving.canary_alias!r} cannot be used with {where}: the local "
                           "canary needs both versions from the registry (on Kubernetes, KServe splits traffic)")
    if serving.tabular.shadow.fraction > 0 and serving.tabular.role == "predictor":
        raise ServingError(f"serving.tabular.shadow.fraction={serving.tabular.shadow.fraction} cannot be used with "
                           "role 'predictor': the transformer (role 'transformer' or 'all') mirrors requests; the "
                           "candidate is a predictor of its own at serving.tabular.shadow.url")
    if serving.canary_alias and serving.canary_percent == 0:
        log.warning("canary alias %r set with canary_percent 0: it is loaded but gets no traffic",
                    serving.canary_alias)

