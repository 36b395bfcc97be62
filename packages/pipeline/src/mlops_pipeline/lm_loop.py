"""The language model's loop (``mlops pipeline run --model llm-sft``): the fraud loop's stages for a fine-tuned LM.

data (DVC ``datasets/dvc.yaml``: base checkpoint + instruction gate, and a corrupted copy through the same gate)
→ train (a first generation walked to champion on an empty registry, then the candidate continuing from the
champion; 2 CPU processes)
→ gates (:mod:`mlops_evaluation.lm_gates`) → staging → canary (two real LM servers, stable and canary, traffic
split client-side, :func:`mlops_delivery.analyze_lm_canary`) → champion → drifted prompts through the champion
(longer, another task mix) → :func:`mlops_monitoring.lm_drift` → rollback to the fallback on CRITICAL.
"""

from __future__ import annotations

import json
import logging
import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pandas as pd

from mlops_pipeline.context import PipelineContext
from mlops_pipeline.errors import PipelineError
from mlops_pipeline.local_server import Endpoint, post_retrying, run_server
from mlops_pipeline.runner import Step, StepResult
from mlops_pipeline.steps import _aliases, _dvc, _evaluate, _held, _promote, step_gates

log = logging.getLogger(__name__)
LM_DVC = "datasets/dvc.yaml"
MAX_TOKENS = 16
DRIFT_TOPICS = ("the history of the harbour", "why the winter was long", "a recipe for bread and soup",
                "the rules of an old board game", "how rivers carve valleys")


def _dataset(ctx: PipelineContext) -> Path:
    named = Path(str(ctx.cfg.training.causal_lm.dataset))
    return named if named.is_absolute() else ctx.root / named


def _checkpoint(ctx: PipelineContext) -> Path:
    named = Path(str(ctx.cfg.training.causal_lm.checkpoint))
    return named if named.is_absolute() else ctx.root / named


# --- 1. data ------------------------------------------------------------------------------------------------


def corrupt_instructions(source: Path, out: Path) -> dict[str, int]:
    """A copy of the dataset with deliberate faults appended; returns how many lines carry each."""
    lines = source.read_bytes().splitlines()
    faults = {
        "empty completion": [json.dumps({"prompt": "Add 1 and 2.\nAnswer:", "completion": ""}).encode()],
        "missing field": [json.dumps({"prompt": "Reverse the words: a b\nAnswer:"}).encode()],
        "wrong type": [json.dumps({"prompt": 7, "completion": " 7"}).encode()],
        "duplicate": lines[:2],
        "invalid UTF-8": [b'{"prompt": "caf\xe9", "completion": " x"}'],
        "too long": [json.dumps({"prompt": "word " * 400, "completion": " x"}).encode()],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(b"\n".join([*lines, *(x for rows in faults.values() for x in rows)]) + b"\n")
    return {name: len(rows) for name, rows in faults.items()}


def step_lm_data(ctx: PipelineContext) -> dict[str, Any]:
    """The base checkpoint and the instruction gate through DVC; then a corrupted copy through the same gate."""
    from mlops_training import gate_instructions

    dvc = _dvc(ctx, f"{LM_DVC}:instructions")
    gate_dir = ctx.root / "data" / "llm" / "gate"
    clean = json.loads(next(gate_dir.glob("*.json")).read_text()) if any(gate_dir.glob("*.json")) else {}
    bad_file = ctx.work_dir / "incoming" / "instructions_corrupted.jsonl"
    faults = corrupt_instructions(_dataset(ctx), bad_file)
    bad_cfg = ctx.cfg.model_copy(update={"training": ctx.cfg.training.model_copy(update={
        "causal_lm": ctx.cfg.training.causal_lm.model_copy(update={"dataset": str(bad_file)})})})
    bad = gate_instructions(bad_cfg, ctx.root, ctx.work_dir / "instructions_gate").to_json()
    ctx.facts["lm_data"] = {"clean": clean, "corrupted": bad, "injected_faults": faults}
    return {"dvc": dvc, "input_rows": bad["input_rows"], "accepted_rows": bad["accepted_rows"],
            "quarantined_rows": bad["quarantined_rows"], "reasons": bad["reasons"], "injected_faults": faults,
            "clean_accepted": clean.get("accepted_rows")}


# --- 2. training --------------------------------------------------------------------------------------------


def _train(ctx: PipelineContext, steps: int, run_name: str, start: str | None = None) -> Any:
    """Train ``steps`` steps from the configured checkpoint, or from ``start`` (a checkpoint URI) when given."""
    from mlops_training import train_model

    training = ctx.cfg.training.model_copy(update={"max_steps": steps})
    if start is not None:
        training = training.model_copy(update={"causal_lm": training.causal_lm.model_copy(
            update={"checkpoint": start})})
    result = train_model(ctx.cfg.model_copy(update={"training": training}), ctx.root, run_name=run_name)
    if result is None or result.model_version is None:
        raise PipelineError(f"training {run_name!r} registered no version")
    return result


def champion_start(ctx: PipelineContext) -> str | None:
    """Where the candidate starts: ``models:/<registered model>/<version>``, the champion alias pinned to the
    version it names now (so the run's recorded config, its ``model.json`` and the reproducibility gate's replay
    all name those weights, however the alias moves later); ``None`` without a champion or with
    ``training.causal_lm.candidate_steps`` unset (the candidate then trains from the configured checkpoint)."""
    from mlops_core import registered_model_name

    champion = _aliases(ctx).get("champion")
    if champion is None or ctx.cfg.training.causal_lm.candidate_steps is None:
        return None
    return f"models:/{registered_model_name(ctx.cfg.tracking, ctx.model)}/{champion}"


def step_lm_train(ctx: PipelineContext) -> dict[str, Any]:
    """On an empty registry: a first generation from the base checkpoint through the gates (against the base
    checkpoint) to champion. Then the candidate: with ``training.causal_lm.candidate_steps`` it continues from
    the champion (:func:`champion_start`) for that many steps, as production fine-tunes from
    ``models:/<model>@champion``; without, it trains from the base checkpoint for ``max_steps``."""
    out: dict[str, Any] = {}
    if "champion" not in _aliases(ctx):
        # An earlier generation, trained long enough to have learned the answer format and when to stop, so the
        # canary compares two versions of one behaviour (a 1/3-trained first champion rambled to max_tokens on a
        # third of the prompts: response-length PSI 3.2 against the candidate).
        steps = max(10, 2 * ctx.cfg.training.max_steps // 3)
        first = _train(ctx, steps, f"{ctx.model}-first-champion")
        version = str(first.model_version)
        _promote(ctx, version, "candidate", "first version of a new registry")
        report = _evaluate(ctx, version, "first")
        if not report.passed:
            raise PipelineError(f"the first champion v{version} failed gates "
                                f"{[f'{g.name}: {g.reason}' for g in report.gates if not g.passed]}")
        for alias in ("staging", "canary", "champion"):
            _promote(ctx, version, alias, "bootstrap: first champion of an empty registry")
        out["first_champion"] = {"version": version, "steps": steps, "metrics": first.metrics}
    start = champion_start(ctx)
    continued = ctx.cfg.training.causal_lm.candidate_steps if start is not None else None
    result = _train(ctx, continued or ctx.cfg.training.max_steps, f"{ctx.model}-candidate", start)
    ctx.facts["candidate_version"] = str(result.model_version)
    return {**out, "version": str(result.model_version), "run_id": result.run_id, "steps": result.steps,
            "start": start or str(ctx.cfg.training.causal_lm.checkpoint),
            "metrics": result.metrics, "weights_sha256": result.weights_sha256,
            "samples_per_second": (result.system or {}).get("samples_per_second")}


# --- 3. gates: steps.step_gates (evaluate() dispatches kind hf_causal_lm) -----------------------------------


# --- 4. canary ----------------------------------------------------------------------------------------------


def version_folder(ctx: PipelineContext, version: str) -> Path:
    """The registered version's exported Hugging Face folder, downloaded once under the work area."""
    from mlops_core import mlflow_client, registered_model_name

    dst = ctx.work_dir / "versions" / f"v{version}"
    if (dst / "model" / "config.json").is_file():
        return dst / "model"
    client = mlflow_client(ctx.cfg.tracking, ctx.root)
    run_id = client.get_model_version(registered_model_name(ctx.cfg.tracking, ctx.model), version).run_id
    if not run_id:
        raise PipelineError(f"v{version} of {ctx.model!r} has no run: cannot fetch its exported folder")
    dst.mkdir(parents=True, exist_ok=True)
    return Path(client.download_artifacts(run_id, "model", str(dst)))


def _serve_args(folder: Path, version: str, log_dir: Path, *extra: str) -> list[str]:
    return ["--model-dir", str(folder), "--model-version", version, "--set", f"serving.prediction_log_uri={log_dir}",
            "--set", "serving.prediction_log_flush_s=0.2", *extra]


def send_prompts(servers: dict[str, Endpoint], prompts: list[str], *, concurrency: int = 2
                 ) -> dict[str, dict[str, Any]]:
    """POST prompts to ``/openai/v1/completions`` (greedy, ``MAX_TOKENS``) of each arm in turn, each by
    :func:`~mlops_pipeline.local_server.post_retrying`; the final statuses per arm.

    With several arms the requests alternate between them (prompt ``i`` to arm ``i mod k``, the order within each
    round rotating) from one pool of ``concurrency`` clients, so the arms share the machine alike: two arms each
    fed by its own pool on one 2-core machine decoded at 437 vs 607 tokens/s with identical weights.
    """
    arms = list(servers)
    tasks = []
    for i in range(0, len(prompts), len(arms)):
        order = arms[(i // len(arms)) % len(arms):] + arms[:(i // len(arms)) % len(arms)]
        tasks += list(zip(order, prompts[i:i + len(arms)], strict=False))
    statuses: dict[str, dict[int, int]] = {arm: {} for arm in arms}
    with httpx.Client(timeout=60) as client:

        def one(task: tuple[str, str]) -> tuple[str, int]:
            server = servers[task[0]]
            body = {"model": server.model, "prompt": task[1], "max_tokens": MAX_TOKENS, "temperature": 0}
            resp, _ = post_retrying(client, f"{server.url}/openai/v1/completions", json.dumps(body),
                                    {"content-type": "application/json"})
            return task[0], resp.status_code

        with ThreadPoolExecutor(concurrency) as pool:
            for arm, status in pool.map(one, tasks):
                statuses[arm][status] = statuses[arm].get(status, 0) + 1
    return {arm: {"requests": sum(statuses[arm].values()), "statuses": statuses[arm]} for arm in arms}


def _prompts(ctx: PipelineContext, n: int, seed: int) -> list[str]:
    rows = [json.loads(line) for line in _dataset(ctx).read_text(encoding="utf-8").splitlines() if line.strip()]
    rng = random.Random(seed)
    return [rng.choice(rows)["prompt"] for _ in range(n)]


def _read_log(log_dir: Path, model: str) -> pd.DataFrame:
    from mlops_serving import read_prediction_log

    return read_prediction_log(log_dir, model) if log_dir.exists() else pd.DataFrame()


def step_lm_canary(ctx: PipelineContext) -> dict[str, Any]:
    """Champion (stable) and candidate (canary) each on a real LM server; traffic split 50/50; analyse; promote.

    Traffic goes in rounds and the analysis looks after each, as the tabular canary does: the sequential verdict
    stays valid however often it looks, and a check that cannot tell yet (the decode-rate interval straddling its
    floor on a loaded machine) holds for the next round; a hold when the traffic budget runs out fails the step.
    """
    from mlops_delivery import analyze_lm_canary

    version = ctx.facts["candidate_version"]
    stable = _aliases(ctx)["champion"]
    if "canary" not in _held(ctx, version):
        _promote(ctx, version, "canary", "staged; canary starts")
    first = max(ctx.cfg.delivery.min_canary_requests, 40) + 10  # per side, before the first look
    more, rounds = 40, 4  # per side, per later look; later looks at most
    prompts = _prompts(ctx, 2 * (first + more * rounds), ctx.cfg.project.seed)
    chunks = [prompts[:2 * first]] + [prompts[2 * (first + more * i):2 * (first + more * (i + 1))]
                                      for i in range(rounds)]
    logs = {v: ctx.work_dir / "lm_canary_log" / f"v{v}" for v in (stable, version)}
    looks: list[dict[str, Any]] = []
    traffic: dict[str, dict[str, Any]] = {}
    with run_server(ctx.root, ctx.model, ctx.work_dir / "serve-lm-stable.log",
                    _serve_args(version_folder(ctx, stable), stable, logs[stable])) as s_srv, \
            run_server(ctx.root, ctx.model, ctx.work_dir / "serve-lm-canary.log",
                       _serve_args(version_folder(ctx, version), version, logs[version])) as c_srv:
        before = {"stable": s_srv.metrics_text(), "canary": c_srv.metrics_text()}  # readiness 503s stay out
        for chunk in chunks:
            sent = send_prompts({"stable": s_srv, "canary": c_srv}, chunk)  # interleaved: the same load on both
            for arm, seen in sent.items():
                total = traffic.setdefault(arm, {"requests": 0, "statuses": {}})
                total["requests"] += seen["requests"]
                for status, n in seen["statuses"].items():
                    total["statuses"][status] = total["statuses"].get(status, 0) + n
            s_metrics, c_metrics = s_srv.metrics_text(), c_srv.metrics_text()
            time.sleep(0.6)  # every answered request reaches the log (flushed each 0.2 s) before this look
            served = pd.concat([_read_log(p, ctx.model) for p in logs.values()], ignore_index=True)
            analysis = analyze_lm_canary(ctx.cfg.delivery, stable_metrics=s_metrics, canary_metrics=c_metrics,
                                         log=served, stable_version=int(stable), canary_version=int(version),
                                         model=ctx.model, stable_before=before["stable"],
                                         canary_before=before["canary"])
            rate = analysis.decode_rate
            looks.append({"canary_requests": analysis.canary.requests, "decision": analysis.decision,
                          "threshold_decision": analysis.threshold_decision,
                          "decode_rate_interval": None if rate is None else [rate.low, rate.high],
                          "decode_rate_clock": None if rate is None else rate.clock})
            if analysis.decision != "hold":
                break
    ctx.facts["lm_canary"] = {"analysis": analysis.to_dict(), "traffic": traffic, "stable": stable,
                              "canary": version, "looks": looks}
    if analysis.decision != "promote":
        raise PipelineError(f"canary v{version} not promoted ({analysis.decision} after {len(looks)} looks; "
                            f"traffic {traffic}): " + "; ".join(analysis.reasons))
    entry = _promote(ctx, version, "champion", "LM canary analysis: promote")
    return {"stable": stable, "canary": version, "percent": 50,
            "requests": sum(t["requests"] for t in traffic.values()), "traffic": traffic, "looks": len(looks),
            "decision": analysis.decision, "reasons": list(analysis.reasons),
            "champion_now": entry["aliases_after"].get("champion"),
            "fallback_now": entry["aliases_after"].get("fallback")}


# --- 5. drift -----------------------------------------------------------------------------------------------


def drifted_prompts(n: int, seed: int) -> list[str]:
    """Prompts unlike the fine-tuning set: long free-form requests on other topics, no ``Answer:`` frame."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        topic = rng.choice(DRIFT_TOPICS)
        out.append(f"Please write a detailed, friendly essay about {topic}, with three examples, a short "
                   f"summary at the end and a title; mention {rng.choice(DRIFT_TOPICS)} as well.")
    return out


def step_lm_drift(ctx: PipelineContext) -> dict[str, Any]:
    """Drifted prompts through the champion (prompt text logged); LM drift vs the training prompts; CRITICAL →
    rollback to the fallback (GitOps commit when configured, registry alias, ledger)."""
    from transformers import AutoTokenizer

    from mlops_monitoring import Level, RollbackDecision, lm_drift, lm_reference
    from mlops_pipeline.rollback import fallback_executor

    cfg = ctx.cfg
    before = _aliases(ctx)
    champion, fallback = before.get("champion"), before.get("fallback")
    if champion is None:
        raise PipelineError("no champion to monitor")
    folder = version_folder(ctx, champion)
    log_dir = ctx.work_dir / "lm_drift_log"
    prompts = drifted_prompts(60, cfg.project.seed + 1)
    with run_server(ctx.root, ctx.model, ctx.work_dir / "serve-lm-drift.log",
                    _serve_args(folder, champion, log_dir, "--set", "serving.lm.log_text=true")) as server:
        traffic = send_prompts({"champion": server}, prompts)["champion"]
    time.sleep(0.6)
    served = _read_log(log_dir, ctx.model)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))

    def encode(text: str) -> list[int]:
        return list(tokenizer(text)["input_ids"])  # as the server encodes a completion prompt

    train_prompts = [json.loads(line)["prompt"] for line in _dataset(ctx).read_text(encoding="utf-8").splitlines()
                     if line.strip()]
    report = lm_drift(lm_reference(train_prompts, encode), served, cfg.monitoring, encode=encode)
    actions = []
    if Level(report.level) is Level.CRITICAL:
        decision = RollbackDecision(ctx.model, champion, fallback, "; ".join(report.reasons), report.level,
                                    actor=ctx.actor, problem=None if fallback else "no fallback version")
        if fallback is None:
            raise PipelineError(f"CRITICAL drift on v{champion} but no fallback to roll back to")
        actions.append(fallback_executor(cfg.delivery, cfg.tracking, ctx.root)(decision).__dict__)
    after = _aliases(ctx)
    ctx.facts["drift"] = {**report.to_dict(), "actions": actions}
    return {"level": report.level, "champion_before": champion, "champion_after": after.get("champion"),
            "rolled_back": bool(actions) and after.get("champion") == fallback, "requests": traffic["requests"],
            "statuses": traffic["statuses"], "drifted_features": report.drifted(), "reasons": report.reasons}


def step_lm_gates(ctx: PipelineContext) -> dict[str, Any]:
    """The fraud loop's gate step: ``evaluate()`` runs the LM gates for a ``hf_causal_lm`` version; the quality
    gate's verdict on the task (exact match and token accuracy on the held-out prompts) is named in the outputs."""
    out = step_gates(ctx)
    quality = next((g for g in ctx.facts["gates"].gates if g.name == "quality"), None)
    if quality is not None and "task" in quality.evidence:
        task = quality.evidence["task"]
        out["quality"] = {"verdict": quality.verdict, "reason": quality.reason, "examples": task["examples"],
                          "floor": task["floor"], "exact_match": task["candidate"]["exact_match"],
                          "token_accuracy": task["candidate"]["token_accuracy"],
                          "reference_exact_match": (task.get("reference_metrics") or {}).get("exact_match")}
    return out


LM_STEPS = [
    Step("lm-data", "Base checkpoint + instruction gate (DVC), a corrupted copy quarantined", step_lm_data),
    Step("lm-train", "Fine-tune with FSDP2 (2 CPU processes), register", step_lm_train),
    Step("lm-gates", "LM gates (task + perplexity, reproducibility, latency, contract), promote to staging",
         step_lm_gates),
    Step("lm-canary", "Serve stable + canary LM, analyse, promote to champion", step_lm_canary),
    Step("lm-drift", "Drifted prompts → LM drift → rollback", step_lm_drift),
]


def summarize_lm(step: StepResult) -> str:
    """One line per LM step for the summary table."""
    o = step.outputs
    if step.name == "lm-data":
        return (f"{o['input_rows']} lines with injected faults: {o['accepted_rows']} accepted, "
                f"{o['quarantined_rows']} quarantined ({', '.join(sorted(o['reasons']))})")
    if step.name == "lm-train":
        first = f"first champion v{o['first_champion']['version']}; " if "first_champion" in o else ""
        ppl = o["metrics"].get("val_perplexity", float("nan"))
        return f"{first}candidate v{o['version']} ({o['steps']} steps from {o['start']}), val perplexity {ppl:.2f}"
    if step.name == "lm-gates":
        passed = ", ".join(f"{k} {'✓' if v else '✗'}" for k, v in o["gates"].items())
        ref = f"champion v{o['champion']}" if o["champion"] else "base checkpoint"
        task = o.get("quality")
        on_task = (f"; exact match {task['exact_match']:.0%} (floor {task['floor']:.0%}), token accuracy "
                   f"{task['token_accuracy']:.0%} on {task['examples']} held-out prompts" if task else "")
        return f"v{o['candidate']} vs {ref}: {passed}{on_task} → staging"
    if step.name == "lm-canary":
        return (f"v{o['canary']} vs v{o['stable']}: {o['requests']} requests, {o['looks']} looks → {o['decision']}; "
                f"champion v{o['champion_now']}, fallback v{o['fallback_now']}")
    if step.name == "lm-drift":
        return (f"{o['level']} on {', '.join(o['drifted_features']) or 'nothing'}; champion v{o['champion_before']} "
                f"→ v{o['champion_after']} (rollback {'recorded' if o['rolled_back'] else 'NOT done'})")
    return json.dumps(o, default=str)[:120]
