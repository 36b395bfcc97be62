"""The server processes of ``serving_load.py``'s arms, and the data they all serve.

Each function here is the body of one server process (``serving_load.py --role <role>``), started by the benchmark:

- ``floor``: KServe's own ``ModelServer`` with the same exported weights, scoring a pre-encoded tensor (V1
  ``instances`` of numbers): no lookup, no validation, no log. What any model server costs.
- ``ours``: ``mlops_serving`` in one process (``serving.tabular.role: all``): validate, online features, encode,
  forward, prediction log.
- ``transformer`` + ``predictor``: the same platform split as the InferenceService runs it (``serving.tabular.role:
  transformer`` calling ``serving.tabular.role: predictor`` over V2 HTTP, one call per micro-batch).
- ``glue``: what a user writes today, as KServe's and Feast's transformer examples show: a ``kserve.Model`` on
  KServe's ``ModelServer`` whose ``preprocess`` calls ``FeatureStore.get_online_features(...).to_dict()`` per
  request and encodes (with the platform's own encoder, so the encoding work is equal), and whose inherited
  ``predict`` calls the predictor over HTTP (the platform's predictor process, the same one the split arm uses).
"""

from __future__ import annotations

import json
import shutil
import sys
from datetime import date, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
HIDDEN = [64, 32]
MODEL = "fraud"


def reader_key_exists() -> bool:
    """Whether this checkout's config schema has ``features.online_reader`` (the direct Redis reader's switch)."""
    from mlops_config import FeaturesConfig

    return "online_reader" in FeaturesConfig.model_fields


def features_section(root: Path, redis_port: int, online_reader: str | None = None) -> Any:
    """The ``features`` section of every arm: Redis on ``redis_port``, values served as of the day after the sample.

    The sample data has fixed dates; without ``online_ttl_as_of`` every value would be past its view's TTL today
    and served as a default (a different code path from production's). ``online_reader`` is set only where the
    schema has the key (:func:`reader_key_exists`); ``None`` keeps the schema's default.
    """
    from mlops_config import DataConfig, FeaturesConfig

    # the Feast repository's sources are relative to it: a copy beside the benchmark's data, as a checkout has
    if not (root / "feature_repo").exists():
        shutil.copytree(REPO / "feature_repo", root / "feature_repo", ignore=shutil.ignore_patterns("__pycache__"))
    data = DataConfig(days=3)
    as_of = date.fromisoformat(data.start_date) + timedelta(days=data.days)
    extra = {"online_reader": online_reader} if online_reader is not None else {}
    return FeaturesConfig(repo_path="feature_repo", feature_service="fraud_v1", online_store="redis",
                          redis_url=f"redis://127.0.0.1:{redis_port}/0", online_store_path=".mlops/feast/online.db",
                          registry=".mlops/feast/registry.db", source_dir="data/features",
                          online_ttl_as_of=f"{as_of.isoformat()}T00:00:00Z", **extra)


def prepare(root: Path, redis_port: int, rows: int) -> dict[str, Any]:
    """Data → Feast (Redis) → encoder → exported model → request bodies (entity rows, and pre-encoded rows)."""
    import numpy as np
    import torch

    from mlops_config import DataConfig
    from mlops_features import prepare_local_data, training_set
    from mlops_model import DEFAULT_CONTRACT, EncoderSpec, build_tabular_mlp, save_exported

    features = features_section(root, redis_port)
    data = DataConfig(rows=rows, days=3, users=max(50, rows // 20), merchants=max(20, rows // 100))
    contract = DEFAULT_CONTRACT  # the reference model's (configs/models/fraud.yaml): this bench serves fraud
    prepare_local_data(data, features, root, contract=contract, seed=11)
    df = training_set(features, data, root, contract=contract)
    encoder = EncoderSpec.fit(df, contract=contract)
    arch = {"input_dim": encoder.input_dim, "hidden_sizes": HIDDEN, "dropout": 0.0}
    torch.manual_seed(11)
    net = build_tabular_mlp(arch)
    folder = save_exported(root / "model" / "1", net.state_dict(), {
        "kind": "tabular_mlp", "architecture": arch, "lineage": {"seed": 11},
        "features": {"feature_service": features.feature_service, "encoder": encoder.to_dict()}})
    sample = df.sample(n=min(512, len(df)), random_state=0).reset_index(drop=True)
    fields = list(contract.required_fields)
    entity = [json.dumps({"instances": [{**{k: (float(r[k]) if k == "amount" else str(r[k])) for k in fields},
                                         "transaction_id": str(r["transaction_id"])}]}) for _, r in sample.iterrows()]
    x = encoder.encode_frame(sample)
    encoded = [json.dumps({"instances": [row.tolist()]}) for row in np.asarray(x, dtype=np.float64)]
    return {"folder": str(folder), "entity": entity, "encoded": encoded}


def _log_like_kserve(model: Any) -> None:
    """KServe's logging defaults on our server: the per-request latency trace of KServe's Model call path (which
    our server uses) and, with ``run_app(access_log=True)``, uvicorn's access log, both to stderr."""
    from kserve.logging import configure_logging

    configure_logging()  # what ModelServer does by default (the floor's setting)
    model.enable_latency_logging = True


def run_ours(root: Path, redis_port: int, port: int, logging_on: bool, online_reader: str | None,
             predictor_port: int | None = None) -> None:
    """``mlops_serving`` from parts: role ``all`` (``predictor_port`` None) or role ``transformer``."""
    from mlops_config import ServingConfig
    from mlops_features import OnlineFeatures
    from mlops_model import DEFAULT_CONTRACT
    from mlops_serving.remote import remote_loader
    from mlops_serving.server import run_app
    from mlops_serving.service import create_app, folder_loader

    features = features_section(root, redis_port, online_reader)
    if predictor_port is None:
        serving = ServingConfig(port=port, prediction_log_uri=str(root / "predlog"))
        loader = folder_loader(MODEL, root / "model" / "1")
        log_dir = root / "predlog"
    else:
        host = f"127.0.0.1:{predictor_port}"
        serving = ServingConfig(port=port, tabular={"role": "transformer", "predictor_host": host},
                                prediction_log_uri=str(root / "predlog-split"))
        loader = remote_loader(host, MODEL)  # type: ignore[assignment]
        log_dir = root / "predlog-split"
    source = OnlineFeatures(features, root, contract=DEFAULT_CONTRACT)  # fraud's: this bench serves fraud
    app = create_app(serving, model_name=MODEL, loader=loader, source=source, log_dir=log_dir)
    if logging_on:
        _log_like_kserve(app.state.model)
    run_app(app, "127.0.0.1", port, access_log=logging_on)


def run_predictor(root: Path, port: int, logging_on: bool, deadline_ms: float) -> None:
    """The platform's predictor (``serving.tabular.role: predictor``) on the exported folder, behind both the split
    arm and the glue.

    ``deadline_ms`` (``serving.request_deadline_ms``; the benchmark's default is the schema's upper bound): with
    the platform's 250 ms, the glue's calls are refused now and then with 408, because KServe's client writes the
    body after the headers from an event loop that Feast's synchronous call blocks for as long, and the predictor's
    slow-body guard takes that for a trickling client. On 2 shared cores that turns the glue's own stalls into
    errors; the comparison here is of throughput and latency, so the predictor waits.
    """
    from mlops_config import ServingConfig
    from mlops_serving.served import ModelRef, load_model
    from mlops_serving.server import run_app
    from mlops_serving.service import create_predictor_app

    ref = ModelRef(MODEL, "1", root / "model" / "1")
    serving = ServingConfig(port=port, tabular={"role": "predictor"}, request_deadline_ms=deadline_ms)
    app = create_predictor_app(serving, model_name=MODEL, loader=lambda: load_model(ref))
    if logging_on:
        _log_like_kserve(app.state.model)
    run_app(app, "127.0.0.1", port, access_log=logging_on)


def _kserve_rest(server: Any, port: int, logging_on: bool) -> None:
    """Run a ``ModelServer``'s REST server on loopback with the benchmark's logging setting."""
    import logging

    from kserve.constants.constants import FASTAPI_APP_IMPORT_STRING
    from kserve.logging import KSERVE_TRACE_LOGGER_NAME
    from kserve.protocol.rest.server import RESTServer

    rest = RESTServer(FASTAPI_APP_IMPORT_STRING, server.dataplane, server.model_repository_extension, port)
    rest.config.host = "127.0.0.1"  # ModelServer binds 0.0.0.0 and has no host option: keep it on loopback
    # the same logging as ours: uvicorn's access log and KServe's per-request trace (its TimingMiddleware's
    # PrintTimings and the model's latency line, both to the kserve.trace logger)
    rest.config.access_log = logging_on
    if not logging_on:
        logging.getLogger(KSERVE_TRACE_LOGGER_NAME).setLevel(logging.WARNING)
    rest.run()


def run_floor(root: Path, port: int, logging_on: bool) -> None:
    """KServe's ``ModelServer`` scoring pre-encoded rows with the exported weights."""
    sys.argv = sys.argv[:1]  # kserve.model_server parses sys.argv at import
    import kserve
    import numpy as np
    import torch
    from kserve.model_server import ModelServer

    from mlops_model import build_tabular_mlp, load_exported

    class Plain(kserve.Model):
        def __init__(self) -> None:
            super().__init__(MODEL)
            tensors, meta = load_exported(root / "model" / "1")
            self.net = build_tabular_mlp(meta["architecture"])
            self.net.load_state_dict(tensors)
            self.net.eval()
            self.ready = True

        async def predict(self, payload: Any, headers: Any = None, response_headers: Any = None) -> dict[str, Any]:
            x = torch.from_numpy(np.asarray(payload["instances"], dtype=np.float32))
            with torch.inference_mode():
                return {"predictions": torch.sigmoid(self.net(x)).reshape(-1).tolist()}

    torch.set_num_threads(1)  # as mlops_serving does: same model, same threading
    server = ModelServer(http_port=port, enable_grpc=False, enable_latency_logging=logging_on)
    server.register_model(Plain())
    _kserve_rest(server, port, logging_on)


def run_glue(root: Path, redis_port: int, port: int, predictor_port: int, logging_on: bool) -> None:
    """A user's KServe transformer over Feast's SDK, calling the platform's predictor (V2) for the forward pass."""
    sys.argv = sys.argv[:1]
    import kserve
    from kserve.model_server import ModelServer
    from kserve.predictor_config import PredictorConfig
    from kserve.protocol.infer_type import InferInput, InferRequest

    from mlops_features import open_store
    from mlops_model import EncoderSpec, load_exported

    _, meta = load_exported(root / "model" / "1")
    features = features_section(root, redis_port)

    class FeastTransformer(kserve.Model):
        """Entity rows in, Feast's online features joined on, encoded, sent to the predictor (KServe's default
        ``predict`` for a transformer), scores out."""

        def __init__(self) -> None:
            super().__init__(MODEL)
            self.store = open_store(features, root)  # a plain feast.FeatureStore on the same Redis
            self.service = self.store.get_feature_service(features.feature_service)
            self.encoder = EncoderSpec.from_dict(meta["features"]["encoder"])
            self.ready = True

        async def preprocess(self, payload: Any, headers: Any = None) -> InferRequest:
            instances = payload["instances"]
            entity_rows = [{"user_id": r["user_id"], "merchant_id": r["merchant_id"]} for r in instances]
            found = self.store.get_online_features(features=self.service, entity_rows=entity_rows).to_dict()
            records = [{**r, **{name: values[i] for name, values in found.items()}} for i, r in enumerate(instances)]
            x = self.encoder.encode_records(records)
            return InferRequest(model_name=MODEL, infer_inputs=[
                InferInput("input", list(x.shape), "FP32", x.ravel().tolist())])

        async def postprocess(self, result: Any, headers: Any = None, response_headers: Any = None) -> Any:
            scores = next(o for o in result.outputs if o.name == "score")
            return {"predictions": list(scores.data)}

    config = PredictorConfig(predictor_host=f"127.0.0.1:{predictor_port}", predictor_protocol="v2")
    server = ModelServer(http_port=port, enable_grpc=False, enable_latency_logging=logging_on,
                         predictor_config=config)
    server.register_model(FeastTransformer())
    _kserve_rest(server, port, logging_on)
