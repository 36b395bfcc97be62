"""`mlops canary analyze --model llm-sft` against two real LM servers writing one shared prediction log.

Real parts: small Hugging Face checkpoints (tests/hf_checkpoint.py), each served by its own `mlops serve` process
(stable and canary, one log folder for both, as the cluster's shared store; the two start at once), scraped at their
``/metrics``. Where the CLI looks again and again while its answer is ``hold``, it runs as its own process, read
while it runs; its one-shot looks run the same command in this process (click's runner).

Four checkpoints, their behaviour checked with plain ``transformers`` before any server starts (the independent
expectation): two random-weight versions that both answer at the full ``max_tokens`` (alike: the good canary), and
two "concise" ones built by hand to answer two tokens and stop (the stable version a rambling canary is compared
with: every one of its answers ends, every one of the canary's is cut at ``max_tokens``; and, asked with
``max_tokens`` 2 or 8, an equal pair whose answers are cut exactly when ``max_tokens`` is 2).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
MODEL = "llm-sft"
MAX_TOKENS = 8
DATASET = REPO / "datasets" / "instructions.jsonl"


def prompts(n: int, offset: int = 0) -> list[str]:
    rows = [json.loads(line)["prompt"] for line in DATASET.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [rows[(offset + i) % len(rows)] for i in range(n)]


def make_concise(folder: Path) -> tuple[int, int]:
    """Rewrite the checkpoint at ``folder`` so that greedy decoding answers ``t1 t2 </s>`` to any prompt that does
    not end in ``t1`` or ``t2``: attention and MLP outputs are zeroed, so the last hidden state is the last token's
    embedding, whose first three dimensions say which of three states it is in; the LM head maps each state to
    the next token. Returns ``(t1, t2)``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder))
    t1, t2, eos = len(tok) - 1, len(tok) - 2, tok.eos_token_id
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        emb = model.model.embed_tokens.weight
        emb[:, :3] = 0.0
        emb[:, 0] = 5.0
        emb[t1, :3] = torch.tensor([0.0, 5.0, 0.0])
        emb[t2, :3] = torch.tensor([0.0, 0.0, 5.0])
        model.model.norm.weight.zero_()
        model.model.norm.weight[:3] = 1.0
        head = model.lm_head.weight
        head.zero_()
        head[t1, 0] = head[t2, 1] = head[eos, 2] = 10.0
    model.save_pretrained(str(folder))
    return t1, t2


def greedy(folder: Path, texts: list[str]) -> list[list[int]]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    out = []
    with torch.inference_mode():
        for text in texts:
            ids = tok(text)["input_ids"]
            gen = model.generate(torch.tensor([ids]), max_new_tokens=MAX_TOKENS, do_sample=False)
            out.append(gen[0, len(ids):].tolist())
    return out


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from transformers import AutoTokenizer

    from mlops_config import load_config
    from mlops_model import model_signer
    from tests.hf_checkpoint import make_checkpoint

    base = tmp_path_factory.mktemp("lm-canary")
    sign = model_signer(load_config(model=MODEL, check_secrets=False).config.provenance, REPO)
    folders = {name: make_checkpoint(base / name / "model", "tiny", seed=seed)
               for name, seed in (("random1", 1), ("random2", 2), ("concise", 3), ("concise2", 4))}
    t1, t2 = make_concise(folders["concise"])
    assert make_concise(folders["concise2"]) == (t1, t2)
    sample = prompts(40)
    eos = AutoTokenizer.from_pretrained(str(folders["concise"])).eos_token_id
    for name in ("concise", "concise2"):
        assert all(ids == [t1, t2, eos] for ids in greedy(folders[name], sample)), name
    for name in ("random1", "random2"):  # both ramble: every answer runs to max_tokens without an end token
        assert all(len(ids) == MAX_TOKENS and eos not in ids for ids in greedy(folders[name], sample)), name
    for folder in folders.values():
        (folder / "model.json").write_text(json.dumps({"kind": "hf_causal_lm"}))
        sign(folder)
    return folders


@contextmanager
def lm_process(folder: Path, version: str, log_dir: Path, work: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """One `mlops serve` process serving ``folder`` as ``version`` (started, not yet ready), stopped afterwards."""
    port = free_port()
    with (work / f"serve-{version}.err").open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mlops_cli", "serve", "--model", MODEL, "--port", str(port), "--model-dir",
             str(folder), "--model-version", version, "--set", f"serving.prediction_log_uri={log_dir}",
             "--set", "serving.prediction_log_flush_s=0.2"],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
        try:
            yield proc, f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(30)


@contextmanager
def lm_servers(stable: Path, canary: Path, log_dir: Path, work: Path) -> Iterator[tuple[str, str]]:
    """Versions 1 (``stable``) and 2 (``canary``), each in its own `mlops serve` process, both started before
    either is waited for (their start-ups overlap); their URLs once both are ready."""
    with ExitStack() as stack:
        started = [stack.enter_context(lm_process(folder, version, log_dir, work))
                   for folder, version in ((stable, "1"), (canary, "2"))]
        deadline = time.monotonic() + 240  # start-up only; no verdict hangs on it
        for (proc, url), version in zip(started, ("1", "2"), strict=True):
            while True:
                assert proc.poll() is None, (work / f"serve-{version}.err").read_text()[-3000:]
                try:
                    if httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, f"LM server of version {version} not ready in 240 s"
                time.sleep(0.3)
        yield started[0][1], started[1][1]


def send(urls: list[str], texts: list[str]) -> None:
    """Each prompt to every server, interleaved, two at a time: both arms see the same load."""
    send_each([(u, t, MAX_TOKENS) for t in texts for u in urls])


def send_each(tasks: list[tuple[str, str, int]]) -> list[str]:
    """``(server, prompt, max_tokens)`` requests, two at a time; the answers' ``finish_reason`` in order."""
    with httpx.Client(timeout=120) as client, ThreadPoolExecutor(2) as pool:

        def one(task: tuple[str, str, int]) -> str:
            body = {"model": MODEL, "prompt": task[1], "max_tokens": task[2], "temperature": 0}
            response = client.post(f"{task[0]}/openai/v1/completions", json=body)
            assert response.status_code == 200, response.text
            return str(response.json()["choices"][0]["finish_reason"])

        return list(pool.map(one, tasks))


def wait_for_log(log_dir: Path, n: int) -> None:
    from mlops_serving import read_prediction_log

    for _ in range(150):
        if log_dir.exists() and len(read_prediction_log(log_dir, MODEL)) >= n:
            return
        time.sleep(0.2)
    raise AssertionError(f"the shared log at {log_dir} does not hold the {n} requests sent")


def canary_cli(log_dir: Path, stable: str, canary: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "mlops_cli", "--log-level", "INFO", "canary", "analyze", "--model", MODEL, "--json",
         "--exit-code", "--stable-metrics", f"{stable}/metrics", "--canary-metrics", f"{canary}/metrics",
         "--stable-version", "1", "--canary-version", "2", "--set", f"serving.prediction_log_uri={log_dir}", *extra],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str]) -> tuple[int, dict[str, Any], str]:
    out, err = proc.communicate(timeout=600)
    assert out.strip(), err[-3000:]
    return proc.returncode, json.loads(out), err


def look_once(log_dir: Path, stable: str, canary: str, *extra: str) -> tuple[int, dict[str, Any]]:
    """One look (no retries): the command :func:`canary_cli` runs, in this process; its exit code and JSON."""
    result = invoke_cli(
        ["canary", "analyze", "--model", MODEL, "--json", "--exit-code", "--stable-metrics", f"{stable}/metrics",
         "--canary-metrics", f"{canary}/metrics", "--stable-version", "1", "--canary-version", "2",
         "--set", f"serving.prediction_log_uri={log_dir}", *extra])
    assert result.stdout.strip(), f"{result.stderr[-3000:]}{result.exception!r}"
    return result.exit_code, json.loads(result.stdout)


def invoke_cli(args: list[str]) -> Any:
    """``mlops <args>`` run in this process from the repository root (click's runner); its result."""
    from typer.testing import CliRunner

    from mlops_cli.app import app

    cwd = Path.cwd()
    os.chdir(REPO)
    try:
        result = CliRunner().invoke(app, args)
    finally:
        os.chdir(cwd)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def test_a_good_canary_is_promoted_after_the_cli_looked_again_while_it_held(
        checkpoints: dict[str, Path], tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    with lm_servers(checkpoints["random1"], checkpoints["random2"], log_dir, tmp_path) as (stable, canary):
        send([stable, canary], prompts(10))
        wait_for_log(log_dir, 20)
        proc = canary_cli(log_dir, stable, canary, "--wait-s", "540", "--interval-s", "1")
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:  # the first look: 10 requests a side is below min_canary_requests, so it holds
            seen.append(line)
            if "canary analysis: hold" in line:
                break
        assert any("canary analysis: hold" in s for s in seen), "".join(seen)[-3000:]
        send([stable, canary], prompts(110, offset=10))  # only now the evidence to decide on arrives
        code, doc, _ = finish(proc)
    assert (code, doc["decision"]) == (0, "promote"), doc["reasons"]
    assert doc["sequential"]["decision"] == "promote"
    assert doc["canary"]["version"] == 2 and doc["stable"]["version"] == 1
    assert doc["canary"]["requests"] > 20  # decided on traffic that came after the first look
    # Judged on what both servers logged of their decoding threads' CPU time, not on the loaded machine's wall clock
    assert doc["decode_rate"]["clock"] == "cpu" and doc["decode_rate"]["low"] >= 1 / 1.2, doc["decode_rate"]
    assert doc["canary"]["truncated_responses"] == doc["canary"]["responses_logged"]  # both ramble alike
    assert doc["stable"]["truncated_responses"] == doc["stable"]["responses_logged"]


def truncation_test(doc: dict[str, Any]) -> dict[str, Any]:
    return next(t for t in doc["sequential"]["tests"] if t["metric"].startswith("truncated_answer"))


def test_a_rambling_canary_is_rolled_back_by_the_sequential_verdict(checkpoints: dict[str, Path],
                                                                     tmp_path: Path) -> None:
    """The sequential verdict (the default) rolls the rambling canary back on its truncation test after 20 requests
    a side, where the thresholds alone still hold (fewer than min_canary_requests); with all 120 the thresholds
    roll it back too."""
    log_dir = tmp_path / "log"
    with lm_servers(checkpoints["concise"], checkpoints["random2"], log_dir, tmp_path) as (stable, canary):
        send([stable, canary], prompts(20))
        wait_for_log(log_dir, 40)
        code, doc = look_once(log_dir, stable, canary)
        assert (code, doc["decision"], doc["sequential"]["decision"]) == (4, "rollback", "rollback"), doc["reasons"]
        assert doc["threshold_decision"] == "hold"  # 20 canary requests: the thresholds could not stop it yet
        cut = truncation_test(doc)
        assert (cut["outcome"], cut["canary_events"], cut["canary_seen"], cut["stable_events"]) == ("worse", 20, 20, 0)
        assert doc["reasons"][0].startswith("WORSE: truncated_answer(finish_reason=length)"), doc["reasons"]
        assert [t["outcome"] for t in doc["sequential"]["tests"] if t is not cut].count("worse") == 0
        send([stable, canary], prompts(100, offset=20))
        wait_for_log(log_dir, 240)
        code, doc = look_once(log_dir, stable, canary, "--set", "delivery.sequential.verdict=threshold")
    assert (code, doc["decision"]) == (4, "rollback"), doc["reasons"]
    assert any(r.startswith("FAILED: answers cut at max_tokens") for r in doc["reasons"]), doc["reasons"]
    assert (doc["stable"]["truncated_responses"], doc["canary"]["truncated_responses"]) == (0, 120)


def test_an_equal_canary_is_not_rolled_back_early(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    """Two equal concise versions, each asked the same 40 requests, 16 of them with max_tokens 2 (cut there) and 24
    with 8 (ended), in a different order: the first 10 of the canary's hold 6 cut answers, stable's 2. The
    thresholds, looking then, roll it back (0.4 more cut answers, over max_truncated_increase); the sequential
    verdict does not, at that look nor once both have seen the same 16 of 40."""
    order_s = [2] * 2 + [8] * 8 + [2] * 14 + [8] * 16
    order_c = [2] * 6 + [8] * 4 + [2] * 10 + [8] * 20
    assert sorted(order_s) == sorted(order_c) and order_s.count(2) == 16
    texts = prompts(40)
    log_dir = tmp_path / "log"
    few = ("--set", "delivery.min_canary_requests=10")
    with lm_servers(checkpoints["concise"], checkpoints["concise2"], log_dir, tmp_path) as (stable, canary):
        first = [(u, texts[i], order[i]) for i in range(10) for u, order in ((stable, order_s), (canary, order_c))]
        reasons = send_each(first)
        assert (reasons[0::2].count("length"), reasons[1::2].count("length")) == (2, 6)  # cut exactly at 2
        wait_for_log(log_dir, 20)
        code, threshold = look_once(log_dir, stable, canary, *few, "--set", "delivery.sequential.verdict=threshold")
        assert (code, threshold["decision"]) == (4, "rollback"), threshold["reasons"]
        code, early = look_once(log_dir, stable, canary, *few)
        assert early["decision"] != "rollback" and early["sequential"]["decision"] != "rollback", early["reasons"]
        cut = truncation_test(early)
        assert (cut["canary_events"], cut["canary_seen"], cut["stable_events"], cut["stable_seen"]) == (6, 10, 2, 10)
        assert cut["outcome"] == "undecided" and cut["rollback_statistic"] < cut["rollback_boundary"]
        rest = [(u, texts[i], order[i]) for i in range(10, 40) for u, order in ((stable, order_s), (canary, order_c))]
        send_each(rest)
        wait_for_log(log_dir, 80)
        code, late = look_once(log_dir, stable, canary, *few)
    assert late["decision"] != "rollback" and late["sequential"]["decision"] != "rollback", late["reasons"]
    cut = truncation_test(late)
    assert (cut["canary_events"], cut["canary_seen"], cut["stable_events"], cut["stable_seen"]) == (16, 40, 16, 40)
    assert cut["outcome"] != "worse" and cut["estimate"] == 0.0


def test_without_the_servers_metrics_the_lm_canary_asks_prometheus_and_names_it_when_down(tmp_path: Path) -> None:
    """Without ``--*-metrics`` the LM canary is read from Prometheus (as promote.yml runs it); one that does not
    answer is named with the key that points at it. (No Prometheus configured either:
    ``test_canary_lm_prometheus.py`` checks that both ways are named.)"""
    done = invoke_cli(
        ["canary", "analyze", "--model", MODEL, "--stable-version", "1", "--canary-version", "2",
         "--set", f"serving.prediction_log_uri={tmp_path / 'log'}", "--set", "delivery.prometheus_url=http://127.0.0.1:9"])
    assert done.exit_code != 0
    said = done.stderr + done.stdout
    assert "Prometheus at 'http://127.0.0.1:9' is unreachable" in said and "delivery.prometheus_url" in said, said
