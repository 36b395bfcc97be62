"""The language-model server against ``transformers``' ``generate`` in a loop on the same model and prompts.

A checkpoint made here (``tests/hf_checkpoint.py``, shape ``--shape``) is served by a real server process
(``mlops serve --role predictor --model-dir``, what the InferenceService runs) with ``serving.lm.max_concurrent``
= 8; the baseline calls ``model.generate`` (greedy, ``max_new_tokens``) in this process, timing the first token
with a streamer. Both run at concurrency 1 (one request after another) and 8 (8 threads / 8 streaming clients),
each round interleaved (baseline, server, baseline, server, ...) so machine load hits both alike. Both use one
torch intra-op thread (the server's setting).

Time to first token: request sent → first SSE event with text (server; a token that ends inside a UTF-8
character sends no text, and this random-weight model emits many byte fragments); ``generate`` called → first new
token (baseline). ``server_side_ttft_mean_s`` is the server's own histogram (admission → first token) over the same
requests. Tokens/s: all generated tokens of a round / the round's wall time.

Prints one JSON line: ``{"shape", "max_tokens", "concurrency_1": {"server": {...}, "generate": {...},
"ttft_p50_overhead", "tokens_per_s_ratio"}, "concurrency_8": {...}}`` with ``ttft_p50_s``, ``ttft_p99_s``,
``tokens_per_s`` per side; overhead = server / generate - 1 on the TTFT median, ratio = server / generate.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["Add 12 and 30.\nAnswer:", "The model registry", "Reverse the words: stone lamp\nAnswer:",
           "Write in capitals: green tiger\nAnswer:", "Feature store", "The canary", "Drift is", "Serving"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(folder: Path, log_dir: Path, max_tokens: int, keys: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "mlops_cli", "serve", "--role", "predictor", "--model", "llm-sft",
           "--model-dir", str(folder), "--port", str(port), "--set", f"serving.prediction_log_uri={log_dir}",
           "--set", "serving.lm.max_concurrent=8", "--set", "serving.lm.max_queue=8",
           "--set", f"serving.lm.max_tokens={max_tokens}", "--set", f"provenance.local_key_dir={keys}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("server did not get ready")


def ttft_totals(url: str) -> tuple[float, float]:
    """(sum, count) of the server's own time-to-first-token histogram."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    total = {"sum": 0.0, "count": 0.0}
    for line in text.splitlines():
        for part in total:
            if line.startswith(f"mlops_serving_lm_time_to_first_token_seconds_{part}{{"):
                total[part] += float(line.rsplit(" ", 1)[1])
    return total["sum"], total["count"]


def served(url: str, prompt: str, max_tokens: int) -> tuple[float, int]:
    """(TTFT, completion tokens) of one streamed completion."""
    body = {"model": "llm-sft", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    ttft, tokens = None, 0
    with httpx.stream("POST", f"{url}/openai/v1/completions", json=body, timeout=120) as r:
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[6:])
            if ttft is None and event["choices"] and event["choices"][0]["text"]:
                ttft = time.perf_counter() - t0
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
    return (ttft if ttft is not None else time.perf_counter() - t0), tokens


def baseline(model: Any, tok: Any, prompt: str, max_tokens: int) -> tuple[float, int]:
    import torch

    class First:
        def __init__(self) -> None:
            self.seen = 0
            self.at: float | None = None

        def put(self, value: Any) -> None:
            self.seen += 1
            if self.seen == 2 and self.at is None:
                self.at = time.perf_counter()

        def end(self) -> None:
            pass

    ids = torch.tensor([tok(prompt)["input_ids"]])
    first = First()
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens, do_sample=False,
                             streamer=first)
    return ((first.at or time.perf_counter()) - t0), out.shape[1] - ids.shape[1]


def round_of(call: Any, concurrency: int, requests: int) -> tuple[list[float], int, float]:
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(requests)]
    t0 = time.perf_counter()
    if concurrency == 1:
        results = [call(p) for p in prompts]
    else:
        with ThreadPoolExecutor(concurrency) as pool:
            results = list(pool.map(call, prompts))
    wall = time.perf_counter() - t0
    return [r[0] for r in results], sum(r[1] for r in results), wall


def summary(ttfts: list[float], tokens: int, wall: float) -> dict[str, float]:
    return {"ttft_p50_s": round(float(np.percentile(ttfts, 50)), 5),
            "ttft_p99_s": round(float(np.percentile(ttfts, 99)), 5),
            "tokens_per_s": round(tokens / wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="load", help="tests/hf_checkpoint.py SHAPES key (default: load, 63 M).")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=8, help="Requests per round and concurrency.")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    import torch
    from hf_checkpoint import make_checkpoint
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # the server runs torch with one intra-op thread (mlops_serving.transformer.single_threaded_torch, process-wide);
    # the baseline gets the same, so the comparison is of serving overhead, not of thread settings
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        folder = make_checkpoint(Path(tmp) / "ckpt", args.shape)
        tok = AutoTokenizer.from_pretrained(str(folder))
        model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
        from mlops_config import ProvenanceConfig
        from mlops_model import model_signer

        keys = Path(tmp) / "keys"  # signed as training signs an export: the server verifies it at load
        model_signer(ProvenanceConfig(local_key_dir=str(keys)), folder)(folder)
        proc, url = start_server(folder, Path(tmp) / "log", args.max_tokens, keys)
        try:
            result: dict[str, Any] = {"shape": args.shape, "max_tokens": args.max_tokens}
            for conc in (1, 8):
                for p in PROMPTS[:3]:  # warm-up
                    served(url, p, args.max_tokens)
                    baseline(model, tok, p, args.max_tokens)
                sides: dict[str, tuple[list[float], int, float]] = {"server": ([], 0, 0.0), "generate": ([], 0, 0.0)}
                first_sum, first_count = ttft_totals(url)
                for _ in range(args.rounds):
                    for name, call in (("generate", lambda p: baseline(model, tok, p, args.max_tokens)),
                                       ("server", lambda p: served(url, p, args.max_tokens))):
                        t, n, w = round_of(call, conc, args.requests)
                        acc = sides[name]
                        sides[name] = (acc[0] + t, acc[1] + n, acc[2] + w)
                s, g = summary(*sides["server"]), summary(*sides["generate"])
                last_sum, last_count = ttft_totals(url)
                s["server_side_ttft_mean_s"] = round((last_sum - first_sum) / (last_count - first_count), 5)
                result[f"concurrency_{conc}"] = {
                    "server": s, "generate": g,
                    "ttft_p50_overhead": round(s["ttft_p50_s"] / g["ttft_p50_s"] - 1, 3),
                    "tokens_per_s_ratio": round(s["tokens_per_s"] / g["tokens_per_s"], 3),
                }
        finally:
            proc.terminate()
            proc.wait(20)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
