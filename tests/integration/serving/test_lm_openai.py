"""The language-model server as a real process (``mlops serve --model-dir`` on a Hugging Face folder made here),
driven by the official ``openai`` client, unchanged, and by raw HTTP for the refusals and the concurrency bound.

Expected outputs come from plain ``transformers`` on the same folder (``AutoModelForCausalLM.generate``, greedy),
token counts from ``AutoTokenizer``: never from the server's own code.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import free_port

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[3]
MODEL = "llm-sft"
PROMPTS = ["Add 12 and 30.\nAnswer:", "The model registry", "Reverse the words: stone lamp\nAnswer:"]
MAX_TOKENS_LIMIT = 200


@dataclass
class LMServer:
    url: str
    folder: Path
    log_dir: Path
    proc: subprocess.Popen[bytes]

    @property
    def openai_base(self) -> str:
        return f"{self.url}/openai/v1"


def sign(folder: Path, keys: Path) -> Path:
    """Sign ``folder`` as training signs an export (``mlops_model.model_signer``) with the key pair in ``keys``."""
    from mlops_config import ProvenanceConfig
    from mlops_model import model_signer

    model_signer(ProvenanceConfig(local_key_dir=str(keys)), folder)(folder)
    return folder


def keys_of(folder: Path) -> Path:
    """Where the fixture's key pair lives: beside the checkpoint, never in the repo's own .mlops/signing."""
    return folder.parent / "keys"


def start_lm_server(folder: Path, log_dir: Path, *sets: str, keys: Path | None = None,
                    wait_ready: bool = True) -> LMServer:
    port = free_port()
    # what services/predictor/entrypoint.sh runs in the InferenceService (infra/base/serving-llm)
    cmd = [sys.executable, "-m", "mlops_cli", "serve", "--role", "predictor", "--model", MODEL,
           "--model-dir", str(folder), "--model-version", "7", "--port", str(port),
           "--set", f"serving.prediction_log_uri={log_dir}",
           "--set", "serving.prediction_log_flush_s=0.2", "--set", f"serving.lm.max_tokens={MAX_TOKENS_LIMIT}",
           "--set", f"provenance.local_key_dir={keys or keys_of(folder)}",
           *(x for s in sets for x in ("--set", s))]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited {proc.returncode}: {proc.stderr.read().decode()[-3000:]}")  # type: ignore[union-attr]
        try:
            r = httpx.get(f"{url}/v2/health/ready", timeout=2)
            if r.status_code == 200 or (not wait_ready and "not loaded yet" not in r.text):
                return LMServer(url, folder, log_dir, proc)
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the LM server did not get ready in 90 s")


def stop(server: LMServer) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(20)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait(5)


@pytest.fixture(scope="module")
def checkpoint(base_checkpoint: Path) -> Path:
    """Signed: the server verifies the signature at load, as training signs it."""
    return sign(base_checkpoint, keys_of(base_checkpoint))


@pytest.fixture(scope="module")
def server(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LMServer]:
    s = start_lm_server(checkpoint, tmp_path_factory.mktemp("lm-log"), "serving.lm.max_concurrent=1",
                        "serving.lm.max_queue=1")
    yield s
    stop(s)


@pytest.fixture(scope="module")
def reference(checkpoint: Path) -> Any:
    """Plain transformers on the folder: tokenizer and greedy generate."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(checkpoint))
    model = AutoModelForCausalLM.from_pretrained(str(checkpoint)).eval()

    class Ref:
        tokenizer = tok

        @staticmethod
        def greedy(ids: list[int], n: int) -> tuple[str, int]:
            with torch.inference_mode():
                out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False)
            new = out[0, len(ids):].tolist()
            return tok.decode(new, skip_special_tokens=True), len(new)

    return Ref


def client(server: LMServer) -> Any:
    import openai

    return openai.OpenAI(base_url=server.openai_base, api_key="unused", max_retries=0)


def test_models_lists_the_served_model(server: LMServer) -> None:
    models = client(server).models.list()
    assert [m.id for m in models.data] == [MODEL]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_completion_equals_plain_transformers_generate(server: LMServer, reference: Any, prompt: str) -> None:
    ids = reference.tokenizer(prompt)["input_ids"]
    text, n = reference.greedy(ids, 24)
    r = client(server).completions.create(model=MODEL, prompt=prompt, max_tokens=24, temperature=0)
    assert r.choices[0].text == text
    assert r.usage.prompt_tokens == len(ids)
    assert r.usage.completion_tokens == n
    assert r.choices[0].finish_reason == ("length" if n == 24 else "stop")


def test_chat_uses_the_tokenizers_template_and_streams_the_same_text(server: LMServer, reference: Any) -> None:
    messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Add 2 and 3."}]
    ids = reference.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    text, n = reference.greedy(ids, 20)
    c = client(server)
    r = c.chat.completions.create(model=MODEL, messages=messages, max_tokens=20, temperature=0)  # type: ignore[arg-type]
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == text
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(ids), n)

    chunks = list(c.chat.completions.create(model=MODEL, messages=messages, max_tokens=20, temperature=0,  # type: ignore[arg-type]
                                            stream=True, stream_options={"include_usage": True}))
    deltas = [ch.choices[0].delta.content or "" for ch in chunks if ch.choices]
    assert "".join(deltas) == text
    assert len([d for d in deltas if d]) > 1  # really streamed, not one blob
    finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finals == [r.choices[0].finish_reason]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == n


def test_v2_generate_answers_plain_text(server: LMServer, reference: Any) -> None:
    prompt = PROMPTS[0]
    text, _ = reference.greedy(reference.tokenizer(prompt)["input_ids"], 10)
    r = httpx.post(f"{server.url}/v2/models/{MODEL}/generate", timeout=30,
                   json={"text_input": prompt, "parameters": {"max_tokens": 10}})
    assert r.status_code == 200, r.text
    assert r.json()["text_output"] == text and r.json()["model_version"] == "7"
    bad = httpx.post(f"{server.url}/v2/models/{MODEL}/generate", json={"text_input": 5}, timeout=30)
    assert bad.status_code == 400 and "text_input=5" in bad.json()["error"]["message"]
    v1 = httpx.post(f"{server.url}/v1/models/{MODEL}:predict", json={"instances": [{"text": "x"}]}, timeout=30)
    assert v1.status_code == 400 and "/openai/v1/completions" in v1.json()["error"]


def test_streamed_completion_is_sse_ending_in_done(server: LMServer, reference: Any) -> None:
    prompt = PROMPTS[1]
    text, _ = reference.greedy(reference.tokenizer(prompt)["input_ids"], 16)
    streamed = client(server).completions.create(model=MODEL, prompt=prompt, max_tokens=16, temperature=0,
                                                 stream=True)
    assert "".join(ch.choices[0].text for ch in streamed) == text
    with httpx.stream("POST", f"{server.openai_base}/completions", timeout=30,
                      json={"model": MODEL, "prompt": prompt, "max_tokens": 16, "temperature": 0, "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        raw = b"".join(r.iter_bytes()).decode()
    events = raw.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    assert all(e.startswith("data: {") for e in events[:-2])


def test_stop_string_ends_the_text_before_it(server: LMServer, reference: Any) -> None:
    prompt = PROMPTS[0]
    text, _ = reference.greedy(reference.tokenizer(prompt)["input_ids"], 24)
    start = next(i for i in range(4, len(text) - 2) if "\ufffd" not in text[i:i + 2])
    stop_at = text[start:start + 2]
    expected = text[: text.find(stop_at)]
    c = client(server)
    r = c.completions.create(model=MODEL, prompt=prompt, max_tokens=24, temperature=0, stop=[stop_at, "\x00zz"])
    assert r.choices[0].text == expected
    assert r.choices[0].finish_reason == "stop"
    streamed = c.completions.create(model=MODEL, prompt=prompt, max_tokens=24, temperature=0, stop=stop_at,
                                    stream=True)
    assert "".join(ch.choices[0].text for ch in streamed) == expected


@pytest.mark.parametrize(("change", "status", "words"), [
    ({"max_tokens": 0}, 400, ["max_tokens=0", f"1 to {MAX_TOKENS_LIMIT}"]),
    ({"max_tokens": MAX_TOKENS_LIMIT + 1}, 400, [f"max_tokens={MAX_TOKENS_LIMIT + 1}", str(MAX_TOKENS_LIMIT)]),
    ({"max_tokens": "8"}, 400, ["max_tokens='8'"]),
    ({"temperature": 2.5}, 400, ["temperature=2.5", "between 0 and 2"]),
    ({"top_p": 0}, 400, ["top_p=0", "greater than 0"]),
    ({"top_p": 1.5}, 400, ["top_p=1.5", "at most 1"]),
    ({"stop": ["a", "b", "c", "d", "e"]}, 400, ["stop=", "at most 4"]),
    ({"stop": 3}, 400, ["stop=3"]),
    ({"n": 2}, 400, ["n=2", "n=1"]),
    ({"model": "gpt-4"}, 404, ["'gpt-4'", MODEL]),
])
def test_bad_parameters_get_a_4xx_naming_value_and_limit(server: LMServer, change: dict[str, Any], status: int,
                                                         words: list[str]) -> None:
    body = {"model": MODEL, "prompt": "hello", "max_tokens": 4, **change}
    r = httpx.post(f"{server.openai_base}/completions", json=body, timeout=30)
    assert r.status_code == status, r.text
    message = r.json()["error"]["message"]
    for w in words:
        assert w in message


def test_the_openai_client_raises_its_own_error_types(server: LMServer) -> None:
    import openai

    c = client(server)
    with pytest.raises(openai.BadRequestError, match=r"temperature=3\.0"):
        c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], temperature=3.0)
    with pytest.raises(openai.NotFoundError, match="not served here"):
        c.completions.create(model="other", prompt="x")


def test_a_prompt_over_the_context_length_gets_400_naming_limit_and_count(server: LMServer, reference: Any) -> None:
    prompt = "stone lamp green tiger " * 120
    n = len(reference.tokenizer(prompt)["input_ids"])
    context = reference_context(server)
    assert n + 8 > context  # the case is real: over the 256-token context of the test checkpoint
    r = httpx.post(f"{server.openai_base}/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 8},
                   timeout=30)
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert f"{n} tokens" in message and f"context length of {context}" in message


def reference_context(server: LMServer) -> int:
    import json

    return int(json.loads((server.folder / "config.json").read_text())["max_position_embeddings"])


def test_past_the_bound_requests_get_503_with_retry_after(server: LMServer) -> None:
    async def fire() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=60) as http:
            body = {"model": MODEL, "prompt": PROMPTS[1], "max_tokens": 150, "temperature": 0}
            return await asyncio.gather(*(http.post(f"{server.openai_base}/completions", json=body)
                                          for _ in range(6)))

    replies = asyncio.run(fire())
    codes = sorted(r.status_code for r in replies)
    assert set(codes) == {200, 503}, codes
    assert codes.count(200) >= 2  # one running + one queued were admitted (bound 1 + 1)
    for r in replies:
        if r.status_code == 503:
            assert r.headers["retry-after"] == "1"
            assert "1 running + 1 queued" in r.json()["error"]["message"]
    # the slots are free again afterwards
    ok = httpx.post(f"{server.openai_base}/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 2},
                    timeout=30)
    assert ok.status_code == 200


def _series(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf'{name}\{{[^}}]*model="{MODEL}"[^}}]*version="7"[^}}]*\}} (\S+)', line)
        if m:
            total += float(m.group(1))
    return total


def test_metrics_and_prediction_log_count_tokens_without_text(server: LMServer, reference: Any) -> None:
    from mlops_serving import read_prediction_log

    before = httpx.get(f"{server.url}/metrics").text
    prompt = "Count the tokens of this request only:"  # no other test sends it: its log row is this request's
    n_in = len(reference.tokenizer(prompt)["input_ids"])
    r = client(server).completions.create(model=MODEL, prompt=prompt, max_tokens=12, temperature=0)
    n_out = r.usage.completion_tokens
    after = httpx.get(f"{server.url}/metrics").text
    assert _series(after, "mlops_serving_lm_prompt_tokens_total") - _series(
        before, "mlops_serving_lm_prompt_tokens_total") == n_in
    assert _series(after, "mlops_serving_lm_completion_tokens_total") - _series(
        before, "mlops_serving_lm_completion_tokens_total") == n_out
    assert _series(after, "mlops_serving_lm_time_to_first_token_seconds_count") - _series(
        before, "mlops_serving_lm_time_to_first_token_seconds_count") == 1
    assert _series(after, "mlops_serving_lm_queue_seconds_count") - _series(
        before, "mlops_serving_lm_queue_seconds_count") == 1
    assert _series(after, "mlops_serving_lm_tokens_per_second_count") >= 1

    deadline = time.monotonic() + 10
    while True:
        log = read_prediction_log(server.log_dir, MODEL)
        hit = log[(log["prompt_tokens"] == n_in)] if len(log) and "prompt_tokens" in log else log.iloc[0:0]
        if len(hit) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    row = hit.iloc[-1]
    assert row["completion_tokens"] == n_out and str(row["model_version"]) == "7"
    assert row["latency_ms"] >= row["ttft_ms"] > 0
    # The decode phase on the decoding thread's CPU clock: every token after the first (no stop string here), in
    # CPU time that one thread spent inside the request's wall time.
    assert n_out >= 2 and row["decode_steps"] == n_out - 1
    assert 0 < row["decode_cpu_ms"] <= row["latency_ms"]
    assert "prompt_text" not in log.columns and "response_text" not in log.columns


def test_log_text_writes_prompt_and_response_when_configured(checkpoint: Path, tmp_path: Path) -> None:
    from mlops_serving import read_prediction_log

    s = start_lm_server(checkpoint, tmp_path / "log", "serving.lm.log_text=true")
    try:
        r = client(s).completions.create(model=MODEL, prompt="The model registry", max_tokens=6, temperature=0)
        deadline = time.monotonic() + 10
        while not len(log := read_prediction_log(s.log_dir, MODEL)) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        stop(s)
    assert list(log["prompt_text"]) == ["The model registry"]
    assert list(log["response_text"]) == [r.choices[0].text]


def test_the_server_process_refuses_a_folder_altered_after_signing(checkpoint: Path, tmp_path: Path) -> None:
    """`mlops serve --model-dir` on a language model verifies its signature (the CLI path, not only the app)."""
    import shutil

    folder = tmp_path / "altered"
    shutil.copytree(checkpoint, folder)
    (folder / "notes.txt").write_text("added after signing\n")
    s = start_lm_server(folder, tmp_path / "log", keys=keys_of(checkpoint), wait_ready=False)
    try:
        r = httpx.get(f"{s.url}/v2/health/ready", timeout=5)
    finally:
        stop(s)
    assert r.status_code == 503, r.text
    assert "does not match its signature: added notes.txt" in r.json()["reason"]


# Parameters the server does not implement: refused with a 400 naming them (``error.param`` too), through the
# official client's own keyword arguments; their "ask for nothing" values are accepted and change nothing.
@pytest.mark.parametrize(("route", "kwargs", "param"), [
    ("completions", {"n": 2}, "n"),
    ("completions", {"logprobs": 2}, "logprobs"),
    ("completions", {"logprobs": 0}, "logprobs"),  # 0 still asks for the chosen tokens' log-probabilities
    ("completions", {"presence_penalty": 0.5}, "presence_penalty"),
    ("completions", {"frequency_penalty": -1.0}, "frequency_penalty"),
    ("completions", {"echo": True}, "echo"),
    ("completions", {"best_of": 3}, "best_of"),
    ("completions", {"logit_bias": {"17": 5}}, "logit_bias"),
    ("completions", {"suffix": " end"}, "suffix"),
    ("completions", {"seed": 7, "temperature": 0.8}, "seed"),
    ("completions", {"extra_body": {"top_k": 5}}, "top_k"),
    ("chat", {"logprobs": True}, "logprobs"),
    ("chat", {"logprobs": False, "top_logprobs": 3}, "top_logprobs"),
    ("chat", {"presence_penalty": 1.0}, "presence_penalty"),
    ("chat", {"n": 3}, "n"),
    ("chat", {"response_format": {"type": "json_object"}}, "response_format"),
    ("chat", {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]},
     "tools"),
])
def test_unimplemented_parameters_are_refused_naming_them(server: LMServer, route: str, kwargs: dict[str, Any],
                                                          param: str) -> None:
    import openai

    c = client(server)
    if route == "chat":
        call: Any = lambda: c.chat.completions.create(  # noqa: E731
            model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=4, **kwargs)
    else:
        call = lambda: c.completions.create(model=MODEL, prompt="hello", max_tokens=4, **kwargs)  # noqa: E731
    with pytest.raises(openai.BadRequestError) as err:
        call()
    assert err.value.status_code == 400
    assert err.value.param == param
    assert param in err.value.message


def test_values_that_ask_for_nothing_are_accepted_unchanged(server: LMServer, reference: Any) -> None:
    c = client(server)
    prompt = PROMPTS[2]
    text, _ = reference.greedy(reference.tokenizer(prompt)["input_ids"], 8)
    r = c.completions.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0, n=1, presence_penalty=0,
                             frequency_penalty=0.0, echo=False, best_of=1, logit_bias={}, seed=11, user="u-1",
                             logprobs=None)
    assert r.choices[0].text == text
    chat = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=4,
                                     temperature=0, logprobs=False, presence_penalty=0, seed=3)
    assert chat.choices[0].message.content is not None


def test_v2_generate_refuses_parameters_it_does_not_implement(server: LMServer) -> None:
    r = httpx.post(f"{server.url}/v2/models/{MODEL}/generate", timeout=30,
                   json={"text_input": "hi", "parameters": {"max_tokens": 4, "repetition_penalty": 1.3}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "repetition_penalty"
    assert "repetition_penalty" in r.json()["error"]["message"]


def test_a_prompt_too_long_in_characters_is_refused_before_tokenizing(server: LMServer) -> None:
    context = reference_context(server)
    limit = context * 32  # mlops_serving.lm_api.MAX_CHARS_PER_TOKEN, written out: the bound the 400 must name
    for route, body in (("completions", {"prompt": "a" * (limit + 1)}),
                        ("chat/completions", {"messages": [{"role": "user", "content": "a" * (limit + 1)}]})):
        r = httpx.post(f"{server.openai_base}/{route}", json={"model": MODEL, "max_tokens": 4, **body}, timeout=30)
        assert r.status_code == 400, r.text
        message = r.json()["error"]["message"]
        assert f"{limit + 1} characters" in message and f"at most {limit}" in message
    # the KServe v2 generate route holds the same bound (it tokenized any length before)
    r = httpx.post(f"{server.url}/v2/models/{MODEL}/generate", timeout=30,
                   json={"text_input": "a" * (limit + 1), "parameters": {"max_tokens": 4}})
    assert r.status_code == 400 and f"{limit + 1} characters" in r.text, r.text
    ok = httpx.post(f"{server.openai_base}/completions", json={"model": MODEL, "prompt": "stone", "max_tokens": 2},
                    timeout=30)
    assert ok.status_code == 200  # the server went on answering


@pytest.mark.parametrize(("messages", "bad"), [
    ([{"role": "tool", "content": "x"}], "messages[0].role = 'tool'"),
    ([{"role": "user", "content": "x"}, {"role": "system", "content": "obey"}], "messages[1].role = 'system'"),
    ([{"role": "ipython", "content": "x"}], "messages[0].role = 'ipython'"),
])
def test_chat_roles_are_system_first_then_user_and_assistant(server: LMServer, messages: list[dict[str, str]],
                                                             bad: str) -> None:
    r = httpx.post(f"{server.openai_base}/chat/completions",
                   json={"model": MODEL, "messages": messages, "max_tokens": 2}, timeout=30)
    assert r.status_code == 400 and bad in r.json()["error"]["message"], r.text
    good = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "x"},
            {"role": "assistant", "content": "y"}, {"role": "user", "content": "z"}]
    r = httpx.post(f"{server.openai_base}/chat/completions", json={"model": MODEL, "messages": good, "max_tokens": 2},
                   timeout=30)
    assert r.status_code == 200, r.text


def test_megabyte_prompts_are_refused_while_a_stream_goes_on(server: LMServer, reference: Any) -> None:
    """The attack: prompts of a million characters (just under the 1 MiB body limit) to every generating route while
    a client streams. The stream holds the server's one place (max_concurrent=1, max_queue=1); each big prompt is
    refused 400 by the character bound before it is admitted or tokenized (not 503: it took no place), and the stream
    ends with exactly the text plain transformers gives."""
    prompt = PROMPTS[2]
    text, _ = reference.greedy(reference.tokenizer(prompt)["input_ids"], 24)
    big = "a" * 1_000_000
    attacks = [(f"{server.openai_base}/completions", {"model": MODEL, "prompt": big, "max_tokens": 4}),
               (f"{server.openai_base}/chat/completions",
                {"model": MODEL, "messages": [{"role": "user", "content": big}], "max_tokens": 4}),
               (f"{server.url}/v2/models/{MODEL}/generate", {"text_input": big, "parameters": {"max_tokens": 4}})]
    refused: list[int] = []
    pieces: list[str] = []
    with httpx.stream("POST", f"{server.openai_base}/completions", timeout=60,
                      json={"model": MODEL, "prompt": prompt, "max_tokens": 24, "temperature": 0,
                            "stream": True}) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        for line in lines:
            if line.startswith("data: {"):
                pieces.append(json.loads(line.removeprefix("data: "))["choices"][0]["text"])
                break  # the stream is under way: attack now
        with httpx.Client(timeout=60) as attacker:
            for _ in range(3):
                refused += [attacker.post(url, json=body).status_code for url, body in attacks]
        rest = list(lines)
    pieces += [json.loads(line.removeprefix("data: "))["choices"][0]["text"] for line in rest
               if line.startswith("data: {")]
    assert refused == [400] * 9, refused
    assert rest[-1] == "data: [DONE]" or "data: [DONE]" in rest
    assert "".join(pieces) == text
