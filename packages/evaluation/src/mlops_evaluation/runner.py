"""``evaluate``: the one function behind ``mlops evaluate run``. Gathers the inputs and runs the gates.

Order: fetch candidate (and champion, if there is one) from the registry; build the family's gate suite
(:class:`mlops_evaluation.suite.GateSuite`, looked up by kind in :data:`GATE_SUITES`), which loads the fixed
holdout; run the gates asked for (quality, reproducibility, latency, contract, calibration) through
:func:`mlops_evaluation.suite.run_suite`; write JSON + Markdown; log both to the candidate's run. A gate that fails
is a verdict (exit 1); anything that stops the evaluation is an error.
"""

from __future__ import annotations

import functools
import json
import logging
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import ValidationError

from mlops_config import ContractConfig, EvaluationConfig, FeaturesConfig, PlatformConfig
from mlops_core import PlatformError, mlflow_client, now_iso, registered_model_name, restore_credentials
from mlops_evaluation.calibration_gate import calibration_gate
from mlops_evaluation.errors import EvaluationError
from mlops_evaluation.gates import (
    GATES,
    LM_GATES,
    GateResult,
    latency_rounds,
    quality_gate,
    reproducibility_gate,
    tabular_contract_gate,
)
from mlops_evaluation.holdout import Holdout, load_holdout
from mlops_evaluation.latency import measure_interleaved, one_torch_thread
from mlops_evaluation.lm import lm_contract_gate, lm_quality_gate, load_lm_holdout, window_nll
from mlops_evaluation.lm_evaluate import HFModel, HFSuite
from mlops_evaluation.report import EvaluationReport, log_report, write_report
from mlops_evaluation.scorer import Scorer, load_version
from mlops_evaluation.suite import GateSuite, Reproduce, SuiteRun, run_suite
from mlops_evaluation.trajectory import NAME, check_trajectory, export_transform, recorded_differences
from mlops_model import DEFAULT_CONTRACT, ModelKind, contract_of, load_exported, resolve_threshold

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient


def _default_reproduce(recorded: dict[str, Any], root: Path, max_steps: int | None) -> Any:
    from mlops_training import reproduce

    return reproduce(recorded, root, max_steps=max_steps)


def serving_inputs(features: FeaturesConfig, root: Path, contract: ContractConfig) -> list[str]:
    """Columns the serving transformer provides: the ``contract``'s request-time fields plus the FeatureService's
    features, as the Feast registry (the source of truth) lists them."""
    from mlops_features import service_features

    return [*contract.request_fields, *service_features(features, root)]


def recorded_contract(cand: Scorer) -> ContractConfig:
    """The contract the candidate's ``model.json`` records; :data:`mlops_model.DEFAULT_CONTRACT` for an export made
    before models recorded one (said in the log)."""
    source = f"candidate v{cand.version}'s model.json"
    contract = contract_of(cand.meta, source=source)
    if contract is None:
        logger.warning("%s records no contract (exported before models carried one): evaluating it under the "
                       "default contract", source)
        return DEFAULT_CONTRACT
    return contract


def check_reproducibility(candidate: Scorer, root: Path, section: EvaluationConfig,
                          reproduce_fn: Reproduce | None = None, *, client: MlflowClient,
                          live: Mapping[str, Any] | None = None) -> GateResult:
    """Re-run the candidate's recorded training (config, seed, data) and compare weights.

    The candidate's exported weights must be the end of its recorded trajectory. When the recorded run is no
    longer than ``repro_steps`` it is re-run whole and must reproduce the candidate's own weights hash. A longer
    run that recorded its trajectory is replayed for ``repro_steps`` steps and must reproduce the hash it
    recorded then (:mod:`mlops_evaluation.trajectory`). A longer run without that hash is "not verifiable" and
    fails, unless ``evaluation.reproducibility`` is ``determinism_only`` (see :func:`_rerun_and_compare`).
    Config and code are checked against the record on every path.

    ``live`` holds this process's config sections (``{"features": ..., "data": ...}``, JSON-dumped): the run's
    ``config.json`` was recorded without the passwords of its URLs (:mod:`mlops_core.redact`), and the re-run
    takes them from there (:func:`mlops_core.restore_credentials`), for the same URLs only.
    """
    from mlflow.exceptions import MlflowException

    rerun = reproduce_fn or _default_reproduce
    lineage = candidate.meta.get("lineage") or {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            if candidate.run_id is None:
                raise TypeError("the version has no run")
            path = client.download_artifacts(candidate.run_id, "config.json", tmp)
            recorded = json.loads(Path(path).read_text(encoding="utf-8"))
        except (MlflowException, OSError, json.JSONDecodeError, TypeError) as exc:
            return GateResult("reproducibility", False,
                              f"v{candidate.version} has no recorded config.json on run {candidate.run_id!r} to "
                              f"re-run ({type(exc).__name__}); train it with `mlops train run`", {})
    try:
        recorded = restore_credentials(recorded, dict(live or {}))
    except ValueError as exc:
        return GateResult("reproducibility", False, f"v{candidate.version}'s recorded training cannot be re-run "
                          f"here: {exc}", {"error": str(exc)})
    steps = int(lineage.get("steps") or recorded.get("training", {}).get("max_steps", 0))
    try:
        return _rerun_and_compare(candidate, recorded, lineage, steps, root, section, rerun)
    except (PlatformError, ValidationError) as exc:  # the recorded run cannot be re-run: a verdict, not a crash
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return GateResult("reproducibility", False,
                          f"v{candidate.version}'s recorded training could not be re-run: {type(exc).__name__}: "
                          f"{first}", {"error": str(exc)[:2000], "steps": steps})


def _trajectory_end(version: str, lineage: Mapping[str, Any], steps: int, weights: Any) -> str | None:
    """Why the candidate's exported weights are not the end of its recorded trajectory (None when they are)."""
    trajectory = dict(lineage.get("trajectory") or {})
    last = trajectory.get(str(steps))
    if last is None:
        return (f"v{version}'s recorded trajectory has no hash at its last step {steps} (recorded at steps "
                f"{sorted(trajectory, key=int)}): its exported weights cannot be tied to the run that made them")
    if last != weights:
        return (f"v{version}'s exported weights (sha256 {str(weights)[:12]}…) are not the end of its recorded "
                f"trajectory (step {steps}: {str(last)[:12]}…): these weights did not come out of that run")
    return None


def _rerun_and_compare(candidate: Scorer, recorded: dict[str, Any], lineage: dict[str, Any], steps: int,
                       root: Path, section: EvaluationConfig, rerun: Reproduce) -> GateResult:
    """The checks in order, each stopping at the first difference: the exported weights are the end of the
    recorded trajectory (when one was recorded); config and code match the record; then the weights are
    re-derived: a replay of ``repro_steps`` steps against the recorded hash, or, for a run no longer than that,
    a whole re-run against the candidate's own weights.

    A longer run with no hash at ``repro_steps`` cannot have its weights re-derived: under
    ``evaluation.reproducibility: trajectory`` (the default) it is "not verifiable" and fails; under
    ``determinism_only`` it is re-run twice for ``repro_steps`` steps and the two must agree, which shows the
    pipeline is deterministic but not that the candidate's weights came from it (the reason says so).

    A LoRA export (:func:`mlops_evaluation.trajectory.export_transform`) is not the state the trajectory hashes:
    it is re-run whole when ``repro_steps`` ≥ its steps, and is otherwise "not verifiable" under ``trajectory``.
    """
    device = "cuda" if _cuda() else "cpu"
    started = time.perf_counter()
    mode = section.reproducibility
    version = candidate.version
    trajectory = dict(lineage.get("trajectory") or {})
    weights = candidate.meta.get("weights_sha256")
    base = {"mode": mode, "recorded": trajectory, "weights_sha256": weights, "steps": steps}

    def verdict(gate: GateResult) -> GateResult:
        gate.evidence.setdefault("mode", mode)
        gate.evidence["reproducibility"] = mode
        gate.evidence["seconds"] = round(time.perf_counter() - started, 2)
        return gate

    whole = 0 < steps <= section.repro_steps
    transformed = export_transform(candidate.meta)
    if trajectory and not transformed and (broken := _trajectory_end(version, lineage, steps, weights)):
        return verdict(GateResult(NAME, False, broken, base))
    if transformed and not whole and mode == "trajectory":
        # a prefix replay would prove the recorded trajectory, not that these exported weights end it
        return verdict(GateResult(
            NAME, False, f"not verifiable: v{version}'s exported weights are {transformed}, not the trained state its "
            f"trajectory hashes, so a {section.repro_steps}-step replay cannot tie them to its {steps}-step run; set "
            f"evaluation.repro_steps ≥ {steps} to re-run it whole and compare the export itself",
            {**base, "verifiable": False, "export": transformed}))
    replayable = steps > section.repro_steps and str(section.repro_steps) in trajectory
    if replayable:
        gate = check_trajectory(version, lineage, recorded, root, section.repro_steps, rerun, device=device,
                                rtol=section.repro_gpu_rtol)
        if transformed:  # determinism_only: the replay stands, the export's tie to it was not checked
            gate = GateResult(NAME, gate.passed, f"{gate.reason}; determinism only "
                              f"(evaluation.reproducibility: determinism_only): the export ({transformed}) was not "
                              "tied to the trajectory's end", gate.evidence)
        return verdict(gate)
    problems = recorded_differences(lineage, recorded, root)
    if not whole and mode == "trajectory":
        missing = ("no weights trajectory" if not trajectory else
                   f"no weights hash at step {section.repro_steps} (recorded at steps {sorted(trajectory, key=int)})")
        also = f"; also {'; '.join(problems)}" if problems else ""
        return verdict(GateResult(
            NAME, False, f"not verifiable: v{version}'s {steps}-step run recorded {missing}, so a "
            f"{section.repro_steps}-step replay has nothing of the candidate's to match and its weights cannot be "
            "re-derived (evaluation.reproducibility: trajectory); retrain it to record its trajectory, or set "
            f"evaluation.reproducibility=determinism_only to check only that training is deterministic{also}",
            {**base, "verifiable": False, "differences": problems}))
    if problems:
        return verdict(GateResult(NAME, False, f"v{version}: " + "; ".join(problems),
                                  {**base, "differences": problems}))
    if whole:
        result = rerun(recorded, root, None)
        expected = {"weights_sha256": weights, "data_hash": lineage.get("data_hash"),
                    "steps": steps, "source": f"v{version}'s own weights"}
        reruns = [_facts(result, "full re-run")]
        max_rel = _max_rel_diff(candidate.folder, Path(result.export_dir)) if device != "cpu" else None
        gate = reproducibility_gate(expected, reruns, device=device, max_rel_diff=max_rel,
                                    rtol=section.repro_gpu_rtol)
        return verdict(GateResult(NAME, gate.passed, gate.reason, {**base, **gate.evidence}))
    first = rerun(recorded, root, section.repro_steps)
    second = rerun(recorded, root, section.repro_steps)
    expected = {**_facts(first, f"first {section.repro_steps}-step re-run"),
                "recorded_data_hash": lineage.get("data_hash")}
    if lineage.get("data_hash"):
        expected["data_hash"] = lineage["data_hash"]
    reruns = [_facts(second, f"second {section.repro_steps}-step re-run")]
    max_rel = _max_rel_diff(Path(first.export_dir), Path(second.export_dir)) if device != "cpu" else None
    gate = reproducibility_gate(expected, reruns, device=device, max_rel_diff=max_rel, rtol=section.repro_gpu_rtol)
    reason = (f"determinism only (evaluation.reproducibility: determinism_only): v{version}'s own weights were not "
              f"re-derived (its run recorded no hash at step {section.repro_steps}); two {section.repro_steps}-step "
              f"re-runs of its recorded config were compared with each other: {gate.reason}")
    return verdict(GateResult(NAME, gate.passed, reason, {**base, **gate.evidence, "verifiable": False}))


def _facts(result: Any, source: str) -> dict[str, Any]:
    return {"weights_sha256": result.weights_sha256, "data_hash": result.data_hash, "steps": result.steps,
            "source": source}


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _max_rel_diff(a: Path, b: Path) -> float:
    ta, _ = load_exported(a)
    tb, _ = load_exported(b)
    worst = 0.0
    for name, x in ta.items():
        y = tb[name].to(x.dtype)
        worst = max(worst, float(((x - y).abs() / x.abs().clamp_min(1e-12)).max()))
    return worst


def check_latency(candidate: Scorer, champion: Scorer | None, holdout: Holdout, section: EvaluationConfig, *,
                  seed: int = 0) -> GateResult:
    """Interleaved A B A′ timing of the champion's and candidate's serving path on holdout records.

    Each timed call is what serving does per batch (:meth:`mlops_model.ExportedModel.score_records`): encode
    ``tabular.latency_batch_rows`` row dicts with the model's own encoder, forward, sigmoid (and calibration). Rounds of
    ``latency_requests`` requests are measured until the gate can tell, at most ``latency_max_rounds``
    (:func:`mlops_evaluation.gates.latency_rounds`), judged on the CPU time of the timing thread with a wall-clock
    backstop bounded by ``latency_wall_max_ratio``.
    """
    n = section.tabular.latency_batch_rows
    ref = champion or candidate
    cand_cols, cand_p = candidate.serving_predictor()
    ref_cols, ref_p = ref.serving_predictor()
    frame = holdout.frame.iloc[: max(n * 64, n)]
    rows = frame[[c for c in sorted({*cand_cols, *ref_cols}) if c in frame.columns]]
    records = rows.astype(object).where(rows.notna(), None).to_dict("records")
    batches = [records[i:i + n] for i in range(0, len(records) - n + 1, n)]

    def one_round() -> Any:
        return measure_interleaved(ref_p, cand_p, batches, timed=section.latency_requests,
                                   warmup=section.latency_warmup, repeats=section.latency_repeats)

    with one_torch_thread():
        gate = latency_rounds(one_round, section.latency_tolerance, section.latency_max_noise,
                              max_rounds=section.latency_max_rounds, confidence=section.confidence, seed=seed,
                              wall_max_ratio=section.latency_wall_max_ratio)
    gate.evidence["timed"] = ("ExportedModel.score_records per batch (encode + forward) on one torch thread, as "
                              "serving scores; CPU time of that thread judged, wall-clock the backstop")
    if champion is None:
        return GateResult("latency", True, "no champion to regress against: candidate measured alone; "
                          + gate.reason, {**gate.evidence, "champion": None})
    return gate


class TabularSuite:
    """The tabular family's gates on the fixed holdout (:func:`mlops_evaluation.holdout.load_holdout`): F1
    against the champion (or the flag-all baseline) with its slices, the replay of recorded training, serving's
    per-batch latency, the FeatureService and input contract, and calibration."""

    gates: tuple[str, ...] = GATES

    def __init__(self, cand: Scorer, champ: Scorer | None, run: SuiteRun) -> None:
        self.cand, self.champ, self.run = cand, champ, run
        self.declared = recorded_contract(cand)
        self.frame = load_holdout(run.features, run.data, run.root, run.evaluation.tabular.holdout_fraction,
                                  contract=self.declared)
        self.labels = self.frame.frame[self.declared.label].to_numpy().astype(np.int64)
        self.holdout = self.frame.describe()

    def quality(self) -> GateResult:
        cand, champ, evaluation, holdout = self.cand, self.champ, self.run.evaluation, self.frame.frame
        missing = [c for c in evaluation.tabular.slice_columns if c not in holdout.columns]
        if missing:
            raise EvaluationError(f"slice columns {missing!r} are not in the holdout; "
                                  f"it has {sorted(holdout.columns)!r}")
        slices = {c: holdout[c].astype(str).to_numpy() for c in evaluation.tabular.slice_columns}
        champ_name = f"champion v{champ.version}" if champ else "champion"
        key, override = "evaluation.tabular.decision_threshold", evaluation.tabular.decision_threshold
        return quality_gate(
            self.labels, cand.score(holdout), champ.score(holdout) if champ else None, slices, evaluation,
            reference_name=champ_name, seed=self.run.seed,
            candidate_threshold=resolve_threshold(cand.meta, override, override_key=key,
                                                  model=f"candidate v{cand.version}"),
            reference_threshold=resolve_threshold(champ.meta, override, override_key=key, model=champ_name)
            if champ else None)

    def reproducibility(self) -> list[GateResult]:
        run = self.run
        live = {"features": run.features.model_dump(mode="json"), "data": run.data.model_dump(mode="json")}
        return [check_reproducibility(self.cand, run.root, run.evaluation, run.reproduce_fn, client=run.client,
                                      live=live)]

    def latency(self) -> GateResult:
        return check_latency(self.cand, self.champ, self.frame, self.run.evaluation, seed=self.run.seed)

    def contract(self) -> GateResult:
        features = self.run.features
        return tabular_contract_gate(self.cand.meta, feature_service=features.require_feature_service(),
                                     available=serving_inputs(features, self.run.root, self.declared))

    def calibration(self) -> GateResult:
        return calibration_gate(self.labels, self.cand.score(self.frame.frame), self.cand.meta, self.run.evaluation,
                                seed=self.run.seed)


class ByteLMSuite:
    """The byte-level LM's gates on fixed windows of the corpus's held-out tail (:func:`.lm.load_lm_holdout`):
    perplexity against the champion (or the uniform byte model), the replay of recorded training, the forward's
    latency per one-window request, and the byte tokenizer's contract."""

    gates: tuple[str, ...] = LM_GATES

    def __init__(self, cand: Scorer, champ: Scorer | None, run: SuiteRun) -> None:
        self.cand, self.champ, self.run = cand, champ, run
        self.windows, self.holdout = load_lm_holdout(run.evaluation)

    def quality(self) -> GateResult:
        champ = self.champ
        return lm_quality_gate(window_nll(self.cand.module, self.windows),
                               window_nll(champ.module, self.windows) if champ else None, self.run.evaluation,
                               reference_name=f"champion v{champ.version}" if champ else "champion",
                               seed=self.run.seed)

    def reproducibility(self) -> list[GateResult]:
        run = self.run
        return [check_reproducibility(self.cand, run.root, run.evaluation, run.reproduce_fn, client=run.client)]

    def latency(self) -> GateResult:
        import torch

        evaluation, windows = self.run.evaluation, self.windows
        ref = self.champ or self.cand
        requests = [torch.from_numpy(windows[i:i + 1, :-1].astype(np.int64)) for i in range(len(windows))]

        def forward(module: torch.nn.Module) -> Callable[[Any], Any]:
            def call(ids: Any) -> Any:
                with torch.inference_mode():
                    return module(input_ids=ids).logits

            return call

        one_round = functools.partial(measure_interleaved, forward(ref.module), forward(self.cand.module), requests,
                                      timed=min(evaluation.latency_requests, 100),
                                      warmup=evaluation.latency_warmup, repeats=evaluation.latency_repeats)
        with one_torch_thread():  # as the tabular gate and the HF generation gate time theirs
            result = latency_rounds(
                one_round,
                evaluation.latency_tolerance, evaluation.latency_max_noise,
                max_rounds=evaluation.latency_max_rounds, confidence=evaluation.confidence, seed=self.run.seed,
                wall_max_ratio=evaluation.latency_wall_max_ratio)
        result.evidence["timed"] = ("the module's forward per one-window request, on one torch thread; CPU time of "
                                    "that thread judged, wall-clock the backstop")
        if self.champ is None:
            result = GateResult("latency", True, "no champion to regress against: candidate measured alone; "
                                + result.reason, {**result.evidence, "champion": None})
        return result

    def contract(self) -> GateResult:
        return lm_contract_gate(self.cand.meta)


def _hf_suite(cand: Scorer, champ: Scorer | None, run: SuiteRun) -> GateSuite:
    """The HF causal LM's suite (:class:`.lm_evaluate.HFSuite`) over the loaded versions; the reproducibility
    gate replays the candidate's recorded training as every family's does."""
    ref = ((f"champion v{champ.version}", HFModel(champ.folder, champ.module, champ.tokenizer))
           if champ else None)
    live = {"features": run.features.model_dump(mode="json"), "data": run.data.model_dump(mode="json")}
    replay = functools.partial(check_reproducibility, cand, run.root, run.evaluation, run.reproduce_fn,
                               client=run.client, live=live)
    return HFSuite(HFModel(cand.folder, cand.module, cand.tokenizer), cand.meta, ref, run.evaluation,
                   run.training, run.root, run.seed, replay)


SuiteFactory = Callable[[Scorer, Scorer | None, SuiteRun], GateSuite]
"""``(candidate, champion, run)`` → the family's suite over them, its held-out set loaded."""

GATE_SUITES: dict[ModelKind, SuiteFactory] = {
    ModelKind.TABULAR: TabularSuite,
    ModelKind.BYTE_LM: ByteLMSuite,
    ModelKind.HF_CAUSAL_LM: _hf_suite,
}
"""How each model family's gate suite is built: the one place evaluation chooses by family."""


def gate_suite(kind: ModelKind) -> SuiteFactory:
    """The family's gate suite, to build over a candidate, its champion and the run.

    Raises:
        EvaluationError: no suite is registered for ``kind``.
    """
    try:
        return GATE_SUITES[kind]
    except KeyError:
        raise EvaluationError(f"no gate suite for model kind {kind.value!r}; registered: "
                              f"{[k.value for k in GATE_SUITES]}") from None


def evaluate(
    cfg: PlatformConfig, root: Path, candidate: str, *, report_dir: Path, gates: Sequence[str] = GATES,
    reproduce_fn: Reproduce | None = None, log_to_run: bool = True, check: Callable[[Path], object] | None = None,
) -> EvaluationReport:
    """Evaluate registry version ``candidate`` (or ``latest``) of ``cfg.project.model`` against its champion (or a
    baseline), with the gates of the candidate's family (:func:`gate_suite`).

    The family's suite reads the sections it needs from ``cfg`` (``evaluation`` and its family's subsection;
    ``features``, ``data`` and ``training`` where its held-out set or replay needs them); ``tracking`` names the
    registry and ``project.seed`` seeds the bootstrap. ``check`` (:func:`mlops_model.model_verifier`) verifies each
    version's signature before it is scored.

    Raises:
        EvaluationError: unknown gate, version or model; an unusable holdout. LifecycleError: no such model.
    """
    from mlops_core import aliases

    unknown = [g for g in gates if g not in GATES]
    if unknown or not gates:
        raise EvaluationError(f"unknown gates {unknown!r}; expected some of {list(GATES)}")
    model, tracking, evaluation, seed = cfg.project.model, cfg.tracking, cfg.evaluation, cfg.project.seed
    started = time.perf_counter()
    client = mlflow_client(tracking, root)
    name = registered_model_name(tracking, model)
    current = aliases(tracking, root, model)
    if str(candidate) == "latest":
        from mlops_core import versions

        listed = versions(tracking, root, model)
        if not listed:
            raise EvaluationError(f"{name!r} has no versions; train one first (`mlops train run`)")
        candidate = listed[0]["version"]
    champion_version = current.get("champion")
    with tempfile.TemporaryDirectory() as tmp:
        cand = load_version(client, name, str(candidate), Path(tmp) / "candidate", check)
        champ = (load_version(client, name, champion_version, Path(tmp) / "champion", check)
                 if champion_version and champion_version != cand.version else None)
        if champ is not None and champ.kind != cand.kind:
            raise EvaluationError(f"candidate v{cand.version} is a {cand.kind.value!r} model but champion "
                                  f"v{champ.version} is {champ.kind.value!r}; they cannot be compared")
        run = SuiteRun(evaluation, cfg.features, cfg.data, cfg.training, root, seed, reproduce_fn, client)
        suite = gate_suite(cand.kind)(cand, champ, run)
        results = run_suite(suite, gates)
        report = EvaluationReport(
            model=model, registered_model=name,
            candidate={"version": cand.version, "run_id": cand.run_id,
                       "weights_sha256": cand.meta.get("weights_sha256"),
                       "feature_service": (cand.meta.get("features") or {}).get("feature_service")},
            champion=({"version": champ.version, "run_id": champ.run_id,
                       "weights_sha256": champ.meta.get("weights_sha256")} if champ else None),
            holdout=suite.holdout, gates=results, created=now_iso(),
            settings={**evaluation.model_dump(mode="json"), "seed": seed, "gates_run": list(gates),
                      "seconds": round(time.perf_counter() - started, 2)},
        )
    paths = write_report(report, report_dir)
    if log_to_run:
        log_report(client, report, [Path(paths["json"]), Path(paths["markdown"])])
    return report
