"""``serving``: the KServe transformer + predictor."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from mlops_config._base import Section


class ShadowConfig(Section):
    """Shadow traffic: a share of live requests mirrored to a candidate predictor, off the request path.

    The candidate's answers never reach the caller; they are logged with the request id (the shadow log, beside
    the prediction log) and compared by ``mlops shadow analyze``.
    """

    fraction: float = Field(default=0.0, ge=0, le=1)
    """Share of live requests mirrored to the candidate (0: shadow off; 1: every request), spread evenly."""

    url: str | None = None
    """The candidate predictor (role ``predictor``): ``host[:port]`` or ``http://...``; required when
    ``fraction`` > 0."""

    queue_size: int = Field(default=1000, ge=1, le=1_000_000)
    """Mirrored requests waiting for the sender; when full, new ones are dropped and counted, never waited for."""

    timeout_s: float = Field(default=1.0, gt=0, le=60)
    """Per-call timeout to the candidate; a slower answer counts as a shadow error (``timeout``)."""

    @model_validator(mode="after")
    def _url_when_on(self) -> ShadowConfig:
        if self.fraction > 0 and not self.url:
            raise ValueError(f"shadow.fraction={self.fraction!r} needs shadow.url (the candidate predictor's "
                             "host[:port] or http:// URL)")
        if self.url is not None and (not self.url.strip() or any(c.isspace() for c in self.url)):
            raise ValueError(f"shadow.url={self.url!r} is not a host[:port] or http(s):// URL")
        return self


class LLMServingConfig(Section):
    """The language-model server (a Hugging Face causal-LM folder behind OpenAI-compatible routes)."""

    max_concurrent: int = Field(default=2, ge=1)
    """Generations running at once; each holds one CPU/GPU stream of decoding."""

    max_queue: int = Field(default=8, ge=0)
    """Requests waiting for a generation slot; past ``max_concurrent + max_queue`` a request gets 503."""

    retry_after_s: int = Field(default=1, ge=1)
    """``Retry-After`` (seconds) of the 503 answered past the bound."""

    max_tokens: int = Field(default=256, ge=1)
    """Largest ``max_tokens`` a request may ask for (larger: 400)."""

    default_max_tokens: int = Field(default=16, ge=1)
    """``max_tokens`` of a request that does not set it (OpenAI's completions default is 16)."""

    torch_threads: int = Field(default=1, ge=1)
    """Intra-op threads of each generation (torch's setting, per decoding thread); raise it on a machine whose
    cores outnumber ``max_concurrent``."""

    log_text: bool = False
    """Write the prompt and the response text into the prediction log (by default only their token lengths)."""


class TabularServingConfig(Section):
    """The tabular family's serving settings (``serving.tabular``): read by the tabular servers only (the
    transformer/predictor split, the online-store lookup and its outage policy, shadow traffic, the adaptive
    admission bound), beside the section's shared keys. The language model's own are in ``serving.lm``."""

    role: Literal["all", "transformer", "predictor"] = "all"
    """``all``: transformer + predictor in one process (local). On Kubernetes the InferenceService runs a
    ``transformer`` (features + encoding, calls ``predictor_host``) and a ``predictor`` (the model only)."""

    predictor_host: str | None = None
    """``host[:port]`` of the predictor (role ``transformer``); KServe passes it as ``--predictor_host``."""

    shadow: ShadowConfig = ShadowConfig()
    """Shadow traffic to a candidate predictor (``serving.tabular.shadow.fraction``, ``.url``, ``.queue_size``,
    ``.timeout_s``)."""

    max_instances: int = Field(default=256, ge=1)
    """Requests with more instances get 422."""

    redis_outage: Literal["degraded", "unavailable"] = "degraded"
    """When the online store is unreachable: answer with default features and ``degraded: true``, or 503."""

    feature_retry_s: float = Field(default=1.0, gt=0, le=60)
    """After the online store failed, wait this long before trying it again (and the 503's Retry-After)."""

    workers: int = Field(default=1, ge=1)
    """Server worker processes."""

    max_inflight: int = Field(default=128, ge=1, le=100_000)
    """Most predict requests one server holds at once (being read, waiting for a batch, or scored); one past the
    limit is refused at once with 503 + ``Retry-After`` instead of queueing. The limit in force adapts below this
    bound so that admitted requests stay within half of ``serving.request_deadline_ms`` (overload shedding)."""

    shed_retry_after_s: int = Field(default=1, ge=1, le=3600)
    """``Retry-After`` (seconds) of a request refused for overload or a missed deadline."""


class ServingConfig(Section):
    """Keys both families' servers read; each family's own are in ``tabular`` and ``lm``."""

    host: str = "127.0.0.1"
    """Address the local server binds to."""

    port: int = Field(default=8080, ge=1, le=65535)
    """HTTP port."""

    alias: str = "champion"
    """Registry alias served; resolved to an immutable version at start-up."""

    canary_alias: str | None = None
    """Alias served as canary next to ``alias`` (``None``: no canary)."""

    canary_percent: int = Field(default=0, ge=0, le=100)
    """Share of requests routed to the canary."""

    max_payload_bytes: int = Field(default=1_048_576, ge=1024)
    """Requests with a larger body get 413."""

    status_detail: bool = True
    """``/status`` shows the model's description and the online store's last error (its URL, its exception);
    false in the cluster profiles, where it says ready or not and why in one line, nothing internal."""

    prediction_log_max_queue: int = Field(default=100_000, ge=100)
    """Rows held in memory between flushes; beyond it rows are counted as dropped, never blocking a request."""

    prediction_log_uri: str = Field(default=".mlops/prediction_log", min_length=1)
    """Store of the prediction log (parquet parts partitioned by model / version / hour): a folder (relative to
    the repo root) or ``file://`` locally, ``s3://bucket/prefix`` in a cluster, so serving pods, the drift job and
    the canary analysis all reach it."""

    prediction_log_retention_hours: float = Field(default=720.0, gt=0)
    """Hour partitions older than this are deleted (by each serving replica, once an hour)."""

    prediction_log_flush_s: float = Field(default=2.0, gt=0)
    """Flush interval of the prediction log; a crash loses at most this much."""

    request_deadline_ms: float = Field(default=250.0, gt=0, le=60_000)
    """Latency objective of a predict request: one not scored by then is refused with 503 + ``Retry-After``, and
    a feature lookup still running at its batch's deadline is abandoned (the outage policy answers instead). A
    client may shorten it per request with the ``X-Request-Deadline-Ms`` header, never lengthen it."""

    not_ready_retry_after_s: int = Field(default=5, ge=1, le=3600)
    """``Retry-After`` (seconds) of an inference request to a model that is not ready (still loading, or refused at
    load): 503, the same for every family."""

    tabular: TabularServingConfig = TabularServingConfig()
    """The tabular servers' own settings (``serving.tabular.*``); the language-model server does not read
    them."""

    lm: LLMServingConfig = LLMServingConfig()
    """The language-model server (``mlops serve --model-dir`` on a ``hf_causal_lm`` folder)."""
