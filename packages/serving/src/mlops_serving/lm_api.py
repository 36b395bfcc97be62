"""OpenAI-compatible routes (and V2 ``generate``) over a :class:`~mlops_serving.lm.CausalLM`, on KServe's app.

Why not ``kserve.protocol.rest.openai``: in KServe 0.21 it imports its request and response types from ``vllm``
at import time, and vLLM cannot join this lock (it pins its own torch and ``fastapi[standard]<0.137``). The
routes here keep KServe's ``ModelServer`` app (:func:`mlops_serving.server.build_app`: health, readiness, V1/V2
model metadata, ``/metrics``, the request guard) and answer with the ``openai`` package's own response types,
so the official client reads them unchanged:

- ``GET /openai/v1/models``; ``POST /openai/v1/completions``; ``POST /openai/v1/chat/completions``, both with
  ``stream: true`` as server-sent events (``data: {chunk}\\n\\n`` ... ``data: [DONE]\\n\\n``);
- ``POST /v2/models/{name}/generate`` (KServe's V2 generate extension: ``text_input`` in, ``text_output`` out).

Requests are checked before any work: ``max_tokens`` (1..``serving.lm.max_tokens``), ``temperature`` (0..2),
``top_p`` (0 < p <= 1), ``stop`` (a string or up to 4), ``n`` (1 only), the model name, and prompt + ``max_tokens``
against the context length; each refusal is a 400/404 in OpenAI's error shape naming the value and the limit.
A parameter the server does not implement (``logprobs``, ``presence_penalty``, ``best_of``, ...) is refused with a
400 naming it unless its value asks for nothing (:mod:`mlops_serving.lm_params`).

Admission and errors are the server's own, as for the tabular model: the routes are behind
:class:`~mlops_serving.admission.AdmissionGuard` in its concurrency mode (at most ``max_concurrent`` generations
run and ``max_queue`` wait for a slot; past that: 503 with ``Retry-After``, counted in the shedding series), and
their errors are raised to :class:`~mlops_serving.server.ErrorReplies`, which formats them with
:func:`openai_error_body` on these routes.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import FastAPI, Request, Response
from fastapi.responses import StreamingResponse
from kserve.errors import ModelNotReady
from prometheus_client import Counter, Histogram

from mlops_config import LLMServingConfig
from mlops_serving.admission import OPENAI_PREFIX, Admission
from mlops_serving.errors import BadRequestError, ServingError
from mlops_serving.lm import CausalLM, Generation, Sampling
from mlops_serving.lm_params import check_supported, parse_sampling
from mlops_serving.metrics import ServingMetrics
from mlops_serving.prediction_log import PredictionLogWriter

if TYPE_CHECKING:
    from mlops_serving.server import ErrorFormat

log = logging.getLogger(__name__)

TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
RATE_BUCKETS = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500)


class ModelNameError(ServingError):
    """A request named a model this server does not serve."""

    http_status = 404


class LMMetrics(ServingMetrics):
    """The server's series plus the language model's: time to first token, tokens/s, tokens in and out."""

    def __init__(self) -> None:
        super().__init__()
        r = self.registry
        self.ttft = Histogram("mlops_serving_lm_time_to_first_token_seconds",
                              "From admission to the first generated token.", ["model", "version"],
                              buckets=TTFT_BUCKETS, registry=r)
        self.tokens_per_s = Histogram("mlops_serving_lm_tokens_per_second",
                                      "Generated tokens per second of a request (after the first token).",
                                      ["model", "version"], buckets=RATE_BUCKETS, registry=r)
        # decode tokens and seconds summed: a variant's decode rate over all its tokens is their ratio (a mean of
        # per-request rates is ruled by the shortest answers, whose few tokens can arrive together in microseconds)
        self.decode_tokens = Counter("mlops_serving_lm_decode_tokens", "Tokens generated after the first one.",
                                     ["model", "version"], registry=r)
        self.decode_seconds = Counter("mlops_serving_lm_decode_seconds",
                                      "Seconds from the first generated token to the last.", ["model", "version"],
                                      registry=r)
        self.tokens_in = Counter("mlops_serving_lm_prompt_tokens", "Prompt tokens processed.",
                                 ["model", "version"], registry=r)
        self.tokens_out = Counter("mlops_serving_lm_completion_tokens", "Tokens generated.",
                                  ["model", "version"], registry=r)
        self.queue_wait = Histogram("mlops_serving_lm_queue_seconds", "Wait for a generation slot.",
                                   ["model", "version"], buckets=TTFT_BUCKETS, registry=r)


CHAT_ROLES = frozenset({"system", "user", "assistant"})
"""The roles a chat request may use."""
MAX_CHARS_PER_TOKEN = 32
"""An upper bound on the characters one token covers (BPE merges of common vocabularies stay far below), so a
prompt longer than ``context_length * 32`` characters cannot fit and is refused before it is tokenized."""


def openai_error_body(exc: Exception, status: int, message: str) -> dict[str, Any]:
    """OpenAI's error object for an error the server's map answered (``param``: the request field at fault)."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": getattr(exc, "param", None), "code": status}}


def lm_error_format(path: str) -> ErrorFormat | None:
    """The error body of the language model's routes (OpenAI's, V2 generate included); KServe's elsewhere."""
    return openai_error_body if path.startswith(OPENAI_PREFIX) or path.endswith("/generate") else None


class LMRoutes:
    """The routes over one :class:`CausalLM`."""

    def __init__(self, model: CausalLM, metrics: LMMetrics, cfg: LLMServingConfig,
                 prediction_log: PredictionLogWriter | None, admission: Admission) -> None:
        self.model = model
        self.metrics = metrics
        self.cfg = cfg
        self.log = prediction_log
        self.admission = admission
        """The server's controller (its guard admitted the request); its slots bound the generations."""
        model.start_workers(cfg.max_concurrent, cfg.torch_threads)

    # --- routes --------------------------------------------------------------------------------------------
    async def models(self) -> Response:
        from openai.types import Model as OpenAIModel

        card = OpenAIModel(id=self.model.name, created=self.model.created, object="model", owned_by="mlops")
        return _json({"object": "list", "data": [card.model_dump(mode="json")]})

    async def completions(self, request: Request) -> Response:
        return await self._answer(request, chat=False)

    async def chat_completions(self, request: Request) -> Response:
        return await self._answer(request, chat=True)

    async def generate_v2(self, request: Request) -> Response:
        name = request.path_params["model_name"]
        body = await self._body(request)
        if name != self.model.name:
            raise ModelNameError(f"model {name!r} is not served here; this server serves {self.model.name!r}")
        text = body.get("text_input")
        if not isinstance(text, str):
            raise BadRequestError(f"text_input={text!r:.40} is invalid: it must be a string")
        params = body.get("parameters") or {}
        if not isinstance(params, dict):
            raise BadRequestError("parameters must be an object")
        check_supported(params, "v2_generate")
        sampling = parse_sampling({"temperature": 0.0, **params}, self.cfg, chat=False)
        self._check_chars(len(text))
        ids = await asyncio.to_thread(self.model.encode, text)  # off the loop: the other streams go on
        self.model.check_fits(len(ids), sampling.max_tokens)
        out = await self._run(ids, sampling, text, "v2_generate")
        return _json({"model_name": self.model.name, "model_version": self.model.version,
                      "text_output": out.text, "finish_reason": out.finish_reason})

    # --- the OpenAI path -----------------------------------------------------------------------------------
    async def _answer(self, request: Request, *, chat: bool) -> Response:
        body = await self._body(request)
        check_supported(body, "chat" if chat else "completions")
        # tokenizing (bounded by _check_chars) runs off the event loop, so the streams already running go on
        prompt_ids, prompt_text = await asyncio.to_thread(self._prompt, body, chat=chat)
        sampling = parse_sampling(body, self.cfg, chat=chat)
        self.model.check_fits(len(prompt_ids), sampling.max_tokens)
        endpoint = "chat" if chat else "completions"
        if body.get("stream"):
            # the admission guard holds the request's place until the stream ends; the generation slot is taken
            # inside the stream, so the first event still waits for it
            stream = self._sse(prompt_ids, sampling, prompt_text, chat=chat, endpoint=endpoint,
                               include_usage=bool((body.get("stream_options") or {}).get("include_usage")))
            return StreamingResponse(stream, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        out = await self._run(prompt_ids, sampling, prompt_text, endpoint)
        return _json(self._final(out, chat=chat).model_dump(mode="json", exclude_unset=True))

    async def _body(self, request: Request) -> dict[str, Any]:
        if not self.model.ready:
            raise ModelNotReady(self.model.name, self.model.reason)  # the one not-ready answer (ErrorReplies)
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError as exc:
            raise BadRequestError(f"the body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise BadRequestError("the body must be a JSON object")
        model = body.get("model")
        if "model" in body and model != self.model.name:
            raise ModelNameError(f"model {model!r:.80} is not served here; this server serves {self.model.name!r}")
        return body

    def _prompt(self, body: dict[str, Any], *, chat: bool) -> tuple[list[int], str]:
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise BadRequestError("messages must be a non-empty list of {role, content} objects")
            clean = []
            for i, m in enumerate(messages):
                if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(
                        m.get("content"), str):
                    raise BadRequestError(f"messages[{i}] must be an object with string role and content")
                # other roles (tool, developer, a made-up "ipython") reach chat templates that were never trained
                # on them, or that render them as privileged turns; a system turn only opens the conversation
                if m["role"] not in CHAT_ROLES or (m["role"] == "system" and i > 0):
                    raise BadRequestError(f"messages[{i}].role = {m['role']!r:.40}; expected one of "
                                          f"{sorted(CHAT_ROLES)}, with 'system' only as the first message")
                clean.append({"role": m["role"], "content": m["content"]})
            self._check_chars(sum(len(m["content"]) for m in clean))
            return self.model.encode_chat(clean), "\n".join(m["content"] for m in clean)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise BadRequestError(f"prompt={prompt!r:.60} is invalid: it must be one string (batches of prompts "
                                  "are not supported)")
        self._check_chars(len(prompt))
        return self.model.encode(prompt), prompt

    def _check_chars(self, chars: int) -> None:
        """400 before tokenizing a prompt that cannot fit the context: tokenizing 1 MiB on the event loop stalls
        every stream the server is running, and the answer would be the same 400 after it."""
        limit = self.model.context_length * MAX_CHARS_PER_TOKEN
        if chars > limit:
            raise BadRequestError(f"the prompt has {chars} characters; at most {limit} can fit this model's context "
                                  f"of {self.model.context_length} tokens ({MAX_CHARS_PER_TOKEN} characters a token)")

    async def _run(self, ids: list[int], sampling: Sampling, prompt_text: str, endpoint: str) -> Generation:
        async with self.admission.slot() as waited:
            self.metrics.queue_wait.labels(self.model.name, self.model.version).observe(waited)
            out = Generation(prompt_tokens=len(ids))
            async for _ in self.model.stream(ids, sampling, out):
                pass
        self._record(out, prompt_text, endpoint)
        return out

    async def _sse(self, ids: list[int], sampling: Sampling, prompt_text: str, *, chat: bool, endpoint: str,
                   include_usage: bool) -> AsyncIterator[bytes]:
        async with self.admission.slot() as waited:
            self.metrics.queue_wait.labels(self.model.name, self.model.version).observe(waited)
            out = Generation(prompt_tokens=len(ids))
            rid = _request_id(chat)
            if chat:
                yield _sse(self._chunk(rid, out, {"role": "assistant", "content": ""}, None))
            async for delta in self.model.stream(ids, sampling, out):
                yield _sse(self._chunk(rid, out, {"content": delta}, None) if chat
                           else self._completion(rid, out, delta, None))
            last = (self._chunk(rid, out, {}, out.finish_reason) if chat
                    else self._completion(rid, out, "", out.finish_reason))
            yield _sse(last)
            if include_usage:
                usage = self._usage(out).model_dump(mode="json")
                tail = (self._chunk(rid, out, None, None) if chat else self._completion(rid, out, None, None))
                yield _sse({**tail, "choices": [], "usage": usage})
            yield b"data: [DONE]\n\n"
        self._record(out, prompt_text, endpoint)

    # --- response bodies (the openai package's own types) --------------------------------------------------
    def _final(self, out: Generation, *, chat: bool) -> Any:
        from openai.types import Completion, CompletionChoice
        from openai.types.chat import ChatCompletion, ChatCompletionMessage
        from openai.types.chat.chat_completion import Choice

        usage = self._usage(out)
        reason: Any = out.finish_reason or "stop"
        if chat:
            return ChatCompletion(id=_request_id(True), object="chat.completion", created=int(time.time()),
                                  model=self.model.name, usage=usage,
                                  choices=[Choice(index=0, finish_reason=reason, logprobs=None,
                                                  message=ChatCompletionMessage(role="assistant", content=out.text))])
        return Completion(id=_request_id(False), object="text_completion", created=int(time.time()),
                          model=self.model.name, usage=usage,
                          choices=[CompletionChoice(index=0, text=out.text, finish_reason=reason, logprobs=None)])

    def _usage(self, out: Generation) -> Any:
        from openai.types import CompletionUsage

        return CompletionUsage(prompt_tokens=out.prompt_tokens, completion_tokens=len(out.token_ids),
                               total_tokens=out.prompt_tokens + len(out.token_ids))

    def _chunk(self, rid: str, out: Generation, delta: dict[str, Any] | None, finish: str | None) -> dict[str, Any]:
        from openai.types.chat import ChatCompletionChunk
        from openai.types.chat.chat_completion_chunk import Choice, ChoiceDelta

        choices = [] if delta is None else [Choice(index=0, delta=ChoiceDelta(**delta), finish_reason=finish)]
        return ChatCompletionChunk(id=rid, object="chat.completion.chunk", created=int(time.time()),
                                   model=self.model.name, choices=choices).model_dump(mode="json")

    def _completion(self, rid: str, out: Generation, text: str | None, finish: str | None) -> dict[str, Any]:
        from openai.types import Completion, CompletionChoice

        # model_construct: OpenAI's stream sends finish_reason null until the last chunk, which the type forbids
        reason: Any = finish
        choices = [] if text is None else [CompletionChoice.model_construct(index=0, text=text, finish_reason=reason,
                                                                            logprobs=None)]
        body = Completion.model_construct(id=rid, object="text_completion", created=int(time.time()),
                                          model=self.model.name, choices=choices)
        return body.model_dump(mode="json", exclude_unset=True)

    # --- accounting ----------------------------------------------------------------------------------------
    def _record(self, out: Generation, prompt_text: str, endpoint: str) -> None:
        labels = (self.model.name, self.model.version)
        n_out = len(out.token_ids)
        self.metrics.tokens_in.labels(*labels).inc(out.prompt_tokens)
        self.metrics.tokens_out.labels(*labels).inc(n_out)
        self.metrics.requests.labels(*labels, "stable", endpoint).inc()
        if out.ttft_s is not None:
            self.metrics.ttft.labels(*labels).observe(out.ttft_s)
            decode_s = out.latency_s - out.ttft_s
            if n_out > 1 and decode_s > 0:
                self.metrics.tokens_per_s.labels(*labels).observe((n_out - 1) / decode_s)
                self.metrics.decode_tokens.labels(*labels).inc(n_out - 1)
                self.metrics.decode_seconds.labels(*labels).inc(decode_s)
        if self.log is None:
            return
        row: dict[str, Any] = {
            "request_id": uuid.uuid4().hex, "ts": datetime.now(UTC), "model_name": self.model.name,
            "model_version": self.model.version, "variant": "stable", "endpoint": endpoint,
            "prompt_tokens": out.prompt_tokens, "completion_tokens": n_out, "finish_reason": out.finish_reason,
            "latency_ms": out.latency_s * 1000.0,
            "ttft_ms": None if out.ttft_s is None else out.ttft_s * 1000.0,
            "decode_cpu_ms": None if out.decode_cpu_s is None else out.decode_cpu_s * 1000.0,
            "decode_steps": out.decode_steps,
        }
        if self.cfg.log_text:
            row.update(prompt_text=prompt_text, response_text=out.text)
        self.log.append([row])


def _request_id(chat: bool) -> str:
    return ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _json(payload: Any, status_code: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status_code, media_type="application/json")


def mount_lm_routes(app: FastAPI, routes: LMRoutes) -> None:
    """Add the OpenAI and V2 generate routes to ``app`` (ahead of KServe's, which are registered later)."""
    app.add_api_route("/openai/v1/models", routes.models, methods=["GET"])
    app.add_route("/openai/v1/completions", routes.completions, methods=["POST"])
    app.add_route("/openai/v1/chat/completions", routes.chat_completions, methods=["POST"])
    app.add_route("/v2/models/{model_name}/generate", routes.generate_v2, methods=["POST"])
