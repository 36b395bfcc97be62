"""``delivery``: GitOps promotion, canary analysis, and retraining pull requests (``delivery.retrain``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from mlops_config._base import Section
from mlops_config.errors import ConfigError

DATA_VERSION = re.compile(r"^[0-9a-f]{32}(\.dir)?$")
"""A data version as ingestion publishes it: DVC's md5 of the accepted folder (``pointers/<md5>.dvc``)."""


class LMSequentialConfig(Section):
    """The language model's sequential tests (``mlops_delivery.lm_canary``): its own signals and margins; ``alpha``,
    ``mixture_scale``, ``verdict`` and ``threshold_guard`` are ``delivery.sequential``'s.

    Each is a difference of proportions, canary minus stable, read exactly from the LM server's histograms. An LM
    canary sees tens to thousands of requests, not the tabular model's many thousands, so the margins are wider.
    """

    error_margin: float = Field(default=0.02, gt=0, lt=1)
    """Non-inferiority margin on the 5xx error rate (absolute)."""

    ttft_slow_ms: float = Field(default=1000.0, gt=0)
    """A first token later than this is slow; must be an upper bound (``le``) of the time-to-first-token
    histogram's buckets (``mlops_serving.lm_api.TTFT_BUCKETS``, in seconds there)."""

    ttft_margin: float = Field(default=0.05, gt=0, lt=1)
    """Non-inferiority margin on the share of requests with a slow first token (absolute)."""

    slow_decode_tokens_per_s: float = Field(default=10.0, gt=0)
    """A request decoding at this many tokens/s or fewer is slow; must be an upper bound (``le``) of the tokens/s
    histogram's buckets (``mlops_serving.lm_api.RATE_BUCKETS``)."""

    decode_margin: float = Field(default=0.05, gt=0, lt=1)
    """Non-inferiority margin on the share of slowly decoding requests (absolute)."""


class LMDeliveryConfig(Section):
    """The language-model canary's own settings (``delivery.lm``; ``mlops_delivery.lm_canary``): its sequential
    tests' signals and margins and the checks only an LM has (response lengths, truncated answers, decode rate).
    The rest of ``delivery`` (``min_canary_requests``, ``max_error_rate_increase``, ``max_p99_ratio``,
    ``sequential``'s ``alpha``, ``verdict``, ``threshold_guard``, …) is shared with the tabular canary."""

    sequential: LMSequentialConfig = LMSequentialConfig()
    """The language-model canary's sequential tests (error rate, slow first token, slow decode) and their margins;
    its fourth, truncated answers, takes ``max_truncated_increase`` as its margin."""

    max_response_length_psi: float | None = Field(default=0.2, ge=0)
    """PSI of canary vs stable response lengths (completion tokens) above which the canary is
    rolled back (a two-sided distance: it also stops a canary that answers better, e.g. one that stopped rambling).
    ``null``: the PSI and KS are reported, not checked, and ``max_truncated_increase`` guards the harmful
    direction alone."""

    max_truncated_increase: float = Field(default=0.05, gt=0, le=1)
    """the most the share of answers cut off at ``max_tokens`` (``finish_reason: length``) may
    rise, canary minus stable (absolute); beyond it the canary is rolled back (vetoed, under the sequential
    verdict). Checked whenever the prediction log records ``finish_reason``. Under the sequential verdict it is also
    the truncation test's margin: a promotion needs the rise shown below it, and a canary shown to truncate more
    often than stable is rolled back."""

    decode_rate_interval: float = Field(default=0.9, gt=0, lt=1)
    """the level of the central bootstrap interval of the canary's decode rate (tokens over all
    its logged answers' decode phases, per second of the decoding thread's CPU time where both sides logged it,
    else of wall-clock time) divided by stable's. The rate check fails only when the whole interval lies below
    ``1 / max_p99_ratio``, passes only when it lies at or above it, and otherwise cannot tell yet (``hold``): a
    rate measured on a shared machine moves with the load (identical weights decoded at 509 vs 798 tokens/s of
    wall time on a loaded CI runner), so a point estimate alone is no evidence either way."""


class SequentialCanaryConfig(Section):
    """The sequential canary verdict: always-valid (mixture SPRT) tests, safe however often the analysis looks.

    Each metric is a difference of proportions, canary minus stable; each family's metrics and margins are its own
    (``delivery.tabular.sequential``, ``delivery.lm.sequential``), the settings here both families'. Promote when
    every test shows the canary is not worse than stable by its margin; roll back when a test shows it is worse;
    hold otherwise. See ``mlops_delivery.sequential``.
    """

    verdict: Literal["sequential", "threshold"] = "sequential"
    """Which analysis decides: ``sequential`` (the thresholds then only veto a promotion, if ``threshold_guard``)
    or ``threshold`` (the fixed thresholds alone, as before; no error-rate guarantee under repeated looks)."""

    alpha: float = Field(default=0.05, gt=0, lt=0.5)
    """Guaranteed bound on the chance of promoting a canary worse than stable by a margin on some metric, and on
    the chance of rolling back one that is as good as stable (split across the metrics), over any number of looks."""

    mixture_scale: float = Field(default=1.0, gt=0)
    """Standard deviation of the mSPRT's normal mixture, in units of each test's margin: the effect size the
    tests are most sensitive to."""

    threshold_guard: bool = True
    """With the sequential verdict, a promotion is held back while the fixed thresholds (``max_*``) fail."""


class TabularSequentialConfig(Section):
    """The tabular model's sequential tests (``mlops_delivery.sequential``): its signals and margins; ``alpha``,
    ``mixture_scale``, ``verdict`` and ``threshold_guard`` are ``delivery.sequential``'s.

    Each metric is a difference of proportions, canary minus stable (error rate, share of slow requests, share
    of scores in each band), read from the serving latency histogram and the prediction log's scores.
    """

    error_margin: float = Field(default=0.005, gt=0, lt=1)
    """Non-inferiority margin on the 5xx error rate (absolute): a canary worse than this is never promoted."""

    slow_ms: float = Field(default=100.0, gt=0)
    """A request is slow above this latency; must be an upper bound (``le``) of the latency histogram's buckets,
    so the slow count is read exactly from them."""

    slow_margin: float = Field(default=0.01, gt=0, lt=1)
    """Non-inferiority margin on the share of slow requests (absolute)."""

    score_edges: tuple[float, ...] = (0.05, 0.1, 0.2, 0.5)
    """Inner edges of the score bands; a band is ``(lower, upper]`` like the serving score histogram's buckets."""

    score_margin: float = Field(default=0.1, gt=0, lt=1)
    """Largest tolerated change of any score band's share (absolute, either direction): a bigger shift shown
    by the test rolls back; promotion needs every band's shift shown smaller. A retrained model moves its
    scores somewhat; 0.1 moved between two mid bands is a PSI near 0.06, inside
    ``delivery.tabular.max_prediction_psi``."""

    @field_validator("score_edges")
    @classmethod
    def _edges_increase(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if not v or list(v) != sorted(set(v)) or v[0] <= 0 or v[-1] >= 1:
            raise ValueError(f"score_edges must strictly increase inside (0, 1), got {list(v)!r}")
        return v


class RetrainConfig(Section):
    """Retraining as a pull request (``mlops retrain request``): one PR per model that bumps the model's
    data-version pin; merging it is what trains (``train.yml`` watches the pin)."""

    require_pin: bool = False
    """Training refuses to register a version unless the model's pin (``pin_path``) names a data version and the
    accepted area it reads is exactly that version (its DVC pointer names it, ``dvc status`` finds it unchanged).
    On in the cluster profiles (staging, production); off locally, where the demo's data is generated, not
    pulled."""

    pin_path: str = "configs/models/{model}.data_version"
    """The pin, relative to the repository root: one line, the accepted data version (DVC md5) to train on."""

    branch: str = "retrain/{model}"
    """Head branch of a model's retraining pull request (one per model: a second trigger updates it)."""

    backend: Literal["git", "github"] = "git"
    """Where the pull request lives: ``github`` (REST API of ``$GITHUB_REPOSITORY``, token from
    ``delivery.github_token_var``) or ``git`` (a bare remote: the branch plus a record on
    ``refs/retrain-prs/<model>``; ``mlops retrain merge`` fast-forwards the base to it)."""

    repo: str | None = None
    """Git URL (or path) of the repository holding the pin; ``None``: ``delivery.gitops_repo``."""

    min_interval_hours: float = Field(default=24.0, ge=0)
    """A trigger within this many hours of the last pushed one is recorded as rate-limited; nothing is pushed."""

    auto_merge: bool = False
    """Merge the pull request as soon as it is opened or updated. Off: a person merges it (the platform never
    merges its own pull request unless this is set)."""

    enabled: bool = True
    """Master switch of the automatic triggers (``on_*``): off, no command opens a retraining pull request by
    itself (each reports ``disabled``). ``mlops retrain request``, a person asking, is not gated by it. A trigger
    also reports ``disabled`` where no repository is configured (neither ``repo`` nor ``delivery.gitops_repo``)
    or, for drift and performance, no ``data.dvc_remote`` publishes the versions a pin names."""

    on_drift: bool = True
    """``mlops monitor run``: a CRITICAL drift verdict requests a retraining (reason ``drift``), after the
    rollback. On: the rollback only buys time on an older model; the pull request is reviewed and rate-limited."""

    on_performance: bool = True
    """``mlops monitor run`` (a CRITICAL realized-quality verdict) and ``mlops monitor performance`` (a served
    version's realized F1 drop beyond ``monitoring.max_f1_drop``) request a retraining (reason ``performance``).
    On: a measured drop is the strongest evidence there is."""

    on_estimated_performance: bool = False
    """``mlops monitor performance``: the CBPE *estimated* drop beyond ``monitoring.max_f1_drop`` also requests
    a retraining. Off: the estimate holds only while the model stays calibrated (covariate shift); under concept
    shift it can miss or invent a drop (docs/monitoring.md)."""

    on_data: bool = False
    """``mlops data ingest``: a newly published accepted data version requests a retraining on it (reason
    ``data``, the new md5 pinned). Off: new data lands daily, and retraining on every batch is a choice (continuous
    training), not a default; ``train.yml``'s schedule and the other triggers cover the rest."""

    @field_validator("pin_path", "branch")
    @classmethod
    def _names_model(cls, v: str) -> str:
        if "{model}" not in v:
            raise ValueError(f"must contain '{{model}}' so each model has its own, got {v!r}")
        return v


def data_pin_path(retrain: RetrainConfig, root: Path, model: str) -> Path:
    """Where ``model``'s data-version pin lives under the repository ``root``."""
    return root / retrain.pin_path.format(model=model)


def parse_data_pin(text: str, origin: str) -> str:
    """The data version a pin file holds (one line; ``#`` comments and blank lines ignored)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if len(lines) != 1 or not DATA_VERSION.match(lines[0]):
        raise ConfigError(f"{origin}: holds {lines!r}; expected one line with the accepted data version "
                          "(32 hex digits, optionally '.dir': DVC's md5 that `mlops data ingest` reports)")
    return lines[0]


def read_data_pin(retrain: RetrainConfig, root: Path, model: str) -> str | None:
    """``model``'s pinned data version, or ``None`` when the pin file does not exist."""
    path = data_pin_path(retrain, root, model)
    if not path.is_file():
        return None
    return parse_data_pin(path.read_text(encoding="utf-8"), retrain.pin_path.format(model=model))


def require_data_pin(retrain: RetrainConfig, root: Path, model: str) -> str | None:
    """The pinned data version; with ``require_pin`` a missing pin is an error saying how to set one."""
    pinned = read_data_pin(retrain, root, model)
    if pinned is None and retrain.require_pin:
        rel = retrain.pin_path.format(model=model)
        raise ConfigError(f"delivery.retrain.require_pin is set and the data-version pin {rel!r} is missing under "
                          f"{str(root)!r}: this profile trains only a pinned version. Pin one with `mlops retrain "
                          f"request --model {model} --reason data --evidence FILE.json` and merge its pull request "
                          f"(or commit {rel!r} holding the md5 `mlops data ingest` reported)")
    return pinned


class TabularDeliveryConfig(Section):
    """The tabular canary's own settings (``delivery.tabular``; ``mlops_delivery.canary``): its sequential tests'
    signals and margins and the checks only the tabular model has (prediction-score PSI, the estimated-F1 guard,
    the skew replay, the latency histogram it reads p99 and slow requests from). The rest of ``delivery``
    (``min_canary_requests``, ``max_error_rate_increase``, ``max_p99_ratio``, ``psi_bins``, ``sequential``'s
    ``alpha``, ``verdict``, ``threshold_guard``, …) is shared with the language-model canary."""

    sequential: TabularSequentialConfig = TabularSequentialConfig()
    """The tabular canary's sequential tests (error rate, slow requests, score bands) and their margins."""

    max_prediction_psi: float = Field(default=0.2, ge=0)
    """PSI of canary vs stable prediction scores above which the canary is rolled back."""

    canary_max_estimated_f1_drop: float | None = Field(default=None, gt=0, lt=1)
    """Tabular canaries: the most the canary's CBPE estimated F1 may fall below the stable's on the same traffic
    (relative; ``mlops_delivery.estimate_guard``). Beyond it, past label noise: rollback; undecided: a promotion
    is held. ``null``: not checked. Only for calibrated models (the calibration gate)."""

    canary_estimate_threshold: float | None = Field(default=None, gt=0, lt=1)
    """Override of the decision threshold the canary's and the stable's estimated F1 are computed at. ``null``:
    each version's own, recorded in its ``model.json`` (0.5 for an export that records none, reported as such);
    a value set here that disagrees with a recorded one is named in the reason."""

    latency_metric: str = "mlops_serving_request_seconds"
    """Prometheus histogram of request latency in seconds (p99 is read from its buckets)."""

    max_skew_mismatch_rate: float | None = Field(default=None, ge=0, le=1)
    """When set, a promotion needs a training/serving skew replay (``mlops monitor run`` with
    ``monitoring.skew_sample_rows``) whose mismatch rate is at most this; without one, or above it, it holds."""


class DeliveryConfig(Section):
    infra_dir: str = "infra"
    """Kustomize root with ``base/`` and ``overlays/<env>/``."""

    environments: tuple[str, ...] = ("staging", "production")
    """Overlays, in promotion order."""

    model_manifest: str = "model-{model}.yaml"
    """File inside each overlay that pins the served version of ``{model}`` (the only file promotions edit)."""

    storage_uri_template: str = "s3://mlops-artifacts/models/{model}/v{version}/"
    """Immutable artifact location of one registered version; ``{model}`` and ``{version}`` are filled in.
    Ends in ``/``: KServe's storage initializer lists objects by raw prefix, so ``.../v1`` would also pull ``v10/``."""

    canary_steps: tuple[int, ...] = (10, 50, 100)
    """Traffic percentages the canary walks through before it becomes production."""

    commit_mode: Literal["commit", "pull_request"] = "commit"
    """How an overlay change lands in git (promote, revert, shadow and the drift rollback alike, through
    ``mlops_delivery.overlay.write_overlay``): a direct commit or a pull request."""

    max_error_rate_increase: float = Field(default=0.01, ge=0)
    """Canary error rate may exceed stable's by at most this (absolute)."""

    max_p99_ratio: float = Field(default=1.2, ge=1)
    """Canary p99 latency may be at most this multiple of stable's (plus ``p99_slack_ms``)."""

    p99_slack_ms: float = Field(default=2.0, ge=0)
    """Absolute slack on top of the ratio: a p99 read from histogram buckets is only as exact as the bucket
    width (2.5 ms around 5 ms), so the canary fails only when p99 > stable p99 × ratio + this."""

    min_canary_requests: int = Field(default=100, ge=1)
    """Below this many canary requests the analysis answers ``hold``."""

    psi_bins: int = Field(default=10, ge=2, le=100)
    """Quantile bins (of the stable scores) for the prediction-distribution PSI."""

    psi_floor: float = Field(default=1e-4, gt=0, lt=0.01)
    """Share an empty bin is floored at in PSI."""

    requests_metric: str = "mlops_serving_requests_total"
    """Prometheus counter of prediction requests answered successfully (the serving exporter's)."""

    errors_metric: str = "mlops_serving_errors_total"
    """Prometheus counter of failed requests; only series whose ``status`` label is 5xx count as errors."""

    prometheus_url: str | None = None
    """Prometheus HTTP API base (``http://prometheus:9090``) the canary analysis queries for error rate and
    p99 per version; ``None``: scrape the predictors' ``/metrics`` directly (local demo)."""

    canary_rate_window: str = Field(default="5m", pattern=r"^[0-9]+[smh]$")
    """PromQL range of the canary queries' ``rate()`` / ``increase()`` (e.g. ``5m``): the evidence window."""

    gitops_repo: str | None = None
    """Git URL (or path) of the GitOps repository that a monitor's rollback commits to and pushes, on
    ``git_branch``; ``None``: nothing deploys from git (local profile), a rollback moves the registry alias only."""

    git_branch: str = "main"
    """Branch of ``gitops_repo`` whose overlays Argo CD syncs."""
    sequential: SequentialCanaryConfig = SequentialCanaryConfig()
    """The sequential canary verdict (always-valid tests) and its guaranteed error rate."""

    tabular: TabularDeliveryConfig = TabularDeliveryConfig()
    """The tabular canary's own checks and sequential margins (``delivery.tabular.*``); the language-model
    canary does not read them."""

    lm: LMDeliveryConfig = LMDeliveryConfig()
    """The language-model canary's own checks and sequential margins (``delivery.lm.*``); the tabular canary does
    not read them."""

    git_author: str = "mlops-bot <mlops-bot@users.noreply.github.com>"
    """Author of promotion commits."""

    git_remote: str = "origin"
    """Remote that ``--push`` pushes promotion commits (or, in pull-request mode, their branches) to."""

    retrain: RetrainConfig = RetrainConfig()
    """Retraining pull requests: the data-version pin, rate limit, backend, merging."""

    github_token_var: str = "GITHUB_TOKEN"
    """Name of the env var holding the token that opens promotion pull requests (secret; never a value here).
    Not an ``*_env`` key on purpose: only a pull-request push needs it, so it is checked then, not at load."""

    @field_validator("canary_steps")
    @classmethod
    def _steps_increase(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v or list(v) != sorted(set(v)) or v[-1] != 100 or v[0] <= 0:
            raise ValueError(f"canary_steps must strictly increase from >0 to 100, got {list(v)!r}")
        return v

    @field_validator("storage_uri_template")
    @classmethod
    def _template_names_version(cls, v: str) -> str:
        if "{version}" not in v:
            raise ValueError(f"storage_uri_template must contain '{{version}}' so each version is immutable, got {v!r}")
        if not v.endswith("{version}/"):
            raise ValueError(f"storage_uri_template must end in '{{version}}/' (a folder: KServe lists objects by raw "
                             f"prefix, so a version without the slash also matches v10/, v11/...), got {v!r}")
        return v
