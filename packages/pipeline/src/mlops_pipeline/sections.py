"""Turn what the steps found into the report's sections (tables + inline SVG plots)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from mlops_pipeline import plots
from mlops_pipeline.context import PipelineContext
from mlops_pipeline.performance_section import performance_section
from mlops_pipeline.report import Section
from mlops_pipeline.shadow import shadow_section

log = logging.getLogger(__name__)


def _metric_series(ctx: PipelineContext, run_id: str, key: str) -> tuple[list[float], list[float]]:
    from mlops_core import mlflow_client

    client = mlflow_client(ctx.cfg.tracking, ctx.root)
    points = sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)
    return [float(m.step) for m in points], [float(m.value) for m in points]


def training_section(ctx: PipelineContext) -> Section | None:
    train = ctx.facts.get("train")
    if not train:
        return None
    run_id = train["run_id"]
    loss = _metric_series(ctx, run_id, "train_loss")
    series = {"train loss": loss}
    val = _metric_series(ctx, run_id, "val_loss")
    if val[0]:
        series["validation loss"] = val
    rate = _metric_series(ctx, run_id, "samples_per_second")
    metrics = train.get("metrics", {})
    rows = [[k, f"{v:.4f}"] for k, v in sorted(metrics.items())]
    return Section("training", "Training (FSDP, 2 CPU processes)",
                   text=f"run {run_id}, version v{train['model_version']}, weights {train['weights_sha256'][:16]}…",
                   table={"header": ["validation metric", "value"], "rows": rows},
                   plots=[plots.line_chart("training-loss", series, title="loss", xlabel="step", ylabel="loss"),
                          plots.line_chart("training-throughput", {"samples/s": rate}, title="throughput",
                                           xlabel="step", ylabel="samples/s")])


def gates_section(ctx: PipelineContext) -> Section | None:
    report = ctx.facts.get("gates")
    if report is None:
        return None
    rows = [[g.name, g.label, g.reason] for g in report.gates]
    figures: list[str] = []
    by_name = {g.name: g for g in report.gates}
    quality = by_name.get("quality")
    if quality is not None:
        ev = quality.evidence
        boot = ev.get("bootstrap") or {}
        what = "perplexity reduction" if ev.get("metric") == "perplexity" else "ΔF1"
        if {"estimate", "lower", "upper"} <= set(boot):
            figures.append(plots.interval_chart(
                "gate-f1-delta", [(f"{what}: candidate vs {ev.get('reference', 'reference')}", boot["estimate"],
                                   boot["lower"], boot["upper"])],
                title=f"quality gate: {what} with its {boot.get('confidence', 0.95):.0%} paired-bootstrap CI",
                xlabel=f"{what} ({boot.get('mode', 'absolute')})", threshold=ev.get("min_improvement")))
        cand, ref = ev.get("candidate") or {}, ev.get("reference_metrics") or {}
        for metric in ("f1", "precision", "recall", "pr_auc", "roc_auc"):
            if metric in cand:
                rows.append([f"  {metric}", f"{cand[metric]:.4f}",
                             f"reference {ref[metric]:.4f}" if metric in ref else "no reference"])
    latency = by_name.get("latency")
    if latency is not None:
        ev = latency.evidence
        sides = {"champion": ev.get("champion"), "candidate": ev.get("candidate"),
                 "champion again (A/A)": ev.get("champion_control")}
        sides = {k: v.get("ttft_ms", v) for k, v in sides.items() if v}  # a language model's: time to first token
        if sides:
            groups = {f"{q} ms": {k: float(v[q]) for k, v in sides.items()} for q in ("p50", "p95", "p99")}
            figures.append(plots.grouped_bar_chart("gate-latency", groups,
                                                   title="latency gate: interleaved A B A, warm-up discarded"))
    return Section("gates", "Evaluation gates", text=f"candidate v{report.candidate['version']} vs "
                   + (f"champion v{report.champion['version']}" if report.champion else "trivial baseline"),
                   table={"header": ["gate", "verdict", "reason"], "rows": rows}, plots=figures)


def _verdict_text(analysis: dict[str, Any], looks: list[dict[str, Any]]) -> str:
    seq = analysis.get("sequential")
    if not seq:
        return "; fixed thresholds decided"
    return (f"; sequential verdict (always-valid, alpha {seq['alpha']}) after {len(looks)} looks and "
            f"{seq['canary_requests']} canary requests; the thresholds alone said {analysis['threshold_decision']}")


def canary_section(ctx: PipelineContext) -> Section | None:
    canary = ctx.facts.get("canary")
    if not canary:
        return None
    a = canary["analysis"]
    ms = {v: (a[v]["p99_s"] or 0.0) * 1000 for v in ("stable", "canary")}
    err = {v: a[v]["error_rate"] or 0.0 for v in ("stable", "canary")}
    reqs = {v: a[v]["requests"] for v in ("stable", "canary")}
    figures = [plots.grouped_bar_chart("canary-compare", {"requests": reqs, "p99 ms": ms, "error rate": err},
                                       title="stable vs canary")]
    # the local loop keeps the served scores; the rehearsal's canary (Prometheus and the shared log) does not
    if canary.get("scores"):
        scores = {f"v{k} ({'canary' if k == canary['canary'] else 'stable'})": v for k, v in canary["scores"].items()}
        figures.append(plots.distribution_chart("canary-scores", scores, title="prediction scores", xlabel="score"))
    return Section("canary", f"Canary analysis: {a['decision']}",
                   text=f"stable v{canary['stable']} vs canary v{canary['canary']} at {canary['percent']}%; "
                   f"prediction PSI {_fmt(a['prediction_psi'])}" + _verdict_text(a, canary.get("looks") or []),
                   table={"header": ["check"], "rows": [[r] for r in a["reasons"]]}, plots=figures)


def lm_canary_section(ctx: PipelineContext) -> Section | None:
    """The LM loop's canary (``mlops_delivery.analyze_lm_canary``): the decision, each check, the two variants'
    figures and, under the sequential verdict, each test's always-valid interval against its margin."""
    run = ctx.facts.get("lm_canary")
    if not run:
        return None
    a = run["analysis"]
    sides = ("stable", "canary")
    groups = {"requests": {v: a[v]["requests"] for v in sides},
              "error rate": {v: a[v]["error_rate"] or 0.0 for v in sides},
              "TTFT p99 ms": {v: (a[v]["ttft_p99_s"] or 0.0) * 1000 for v in sides},
              "tokens/s": {v: a[v]["tokens_per_s_mean"] or 0.0 for v in sides}}
    figures = [plots.grouped_bar_chart("lm-canary-compare", groups, title="stable vs canary LM")]
    seq = a.get("sequential")
    if seq:
        text = (f"; sequential verdict (always-valid, alpha {seq['alpha']}) said {seq['decision']} after "
                f"{seq['canary_requests']} canary requests; the thresholds alone said {a['threshold_decision']}")
        rows = [(f"{t['metric']} (margin {t['margin']:g})", t["estimate"], *t["promote_interval"])
                for t in seq["tests"] if t["promote_interval"] is not None]
        if rows:
            figures.append(plots.interval_chart(
                "lm-canary-sequential", rows, title="canary - stable share, always-valid interval (promote needs it "
                "below the margin)", xlabel="difference of proportions"))
    else:
        text = "; fixed thresholds decided"
    return Section("lm-canary", f"LM canary: {a['decision']}",
                   text=f"stable v{run['stable']} vs canary v{run['canary']}, the same prompt stream split 50/50; "
                   f"response-length PSI {_fmt(a['response_length_psi'])}" + text,
                   table={"header": ["check"], "rows": [[r] for r in a["reasons"]]}, plots=figures)


def drift_section(ctx: PipelineContext) -> Section | None:
    drift = ctx.facts.get("drift")
    if not drift:
        return None
    cols = drift["columns"]
    psi = {name: float(c.get("psi") or 0.0) for name, c in cols.items()}
    rows = [[name, c.get("method"), _fmt(c.get("statistic")), _fmt(c.get("p_value")), _fmt(c.get("psi")),
             "yes" if c.get("drifted") else ""] for name, c in sorted(cols.items(), key=lambda kv: -psi[kv[0]])]
    m = ctx.cfg.monitoring
    return Section("drift", f"Drift: {drift['level']}", text="; ".join(drift.get("reasons", [])),
                   table={"header": ["column", "method", "statistic", "p-value", "PSI", "drifted"], "rows": rows},
                   plots=[plots.bar_chart("drift-psi", dict(sorted(psi.items(), key=lambda kv: -kv[1])),
                                          title="PSI per feature vs the training reference", ylabel="PSI",
                                          thresholds={"warning": m.psi_warning, "critical": m.psi_critical})])


def ledger_section(ctx: PipelineContext) -> Section | None:
    from mlops_core import LifecycleError, history

    try:
        entries = [e.as_dict() for e in history(ctx.cfg.tracking, ctx.root, ctx.model)]
    except LifecycleError as exc:  # nothing registered yet (a run stopped before training): no ledger to show
        log.debug("no ledger: %s", exc)
        return None
    if not entries:
        return None
    t0 = datetime.fromisoformat(entries[0]["ts"])
    events = [((datetime.fromisoformat(e["ts"]) - t0).total_seconds(), e["to_alias"] or e["action"],
               f"{e['action']} v{e['version']}") for e in entries]
    rows = [[e["seq"], e["ts"], e["action"], f"v{e['version']}", e.get("from_alias") or "", e["to_alias"],
             e["actor"], e["reason"]] for e in entries]
    return Section("ledger", "Promotion ledger",
                   table={"header": ["#", "when (UTC)", "action", "version", "from", "to", "who", "why"],
                          "rows": rows},
                   plots=[plots.timeline_chart("ledger-timeline", events, title="alias moves")])


def provenance_section(ctx: PipelineContext) -> Section | None:
    """``mlops registry verify`` of the candidate this run trained (the new champion, unless gates stopped it)."""
    from mlops_pipeline.provenance import verify_version

    version = ctx.facts.get("candidate_version")
    if version is None:
        return None
    audit = verify_version(ctx.cfg, ctx.root, version)
    summary = ", ".join(f"{n} {s}" for s, n in audit.counts().items() if n)
    return Section("provenance", f"Provenance of v{version}",
                   text=f"`mlops registry verify --version {version}`: {summary}"
                        + ("" if audit.ok else " — a broken link means this version cannot be trusted"),
                   table={"header": ["link", "status", "detail"],
                          "rows": [[link.name, link.status, link.detail] for link in audit.links]})


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def build_sections(ctx: PipelineContext) -> list[Section]:
    """Every section whose step ran; a section that cannot be built is logged and left out."""
    out = []
    for build in (training_section, gates_section, shadow_section, canary_section, lm_canary_section, drift_section,
                  performance_section, ledger_section, provenance_section):
        try:
            section = build(ctx)
        except Exception:  # the report must still be written when one section's inputs are odd
            log.warning("report section %s could not be built", build.__name__, exc_info=True)
            continue
        if section is not None:
            out.append(section)
    return out
