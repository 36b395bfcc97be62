"""A causal language model served by KServe's ModelServer machinery: a ``kserve.Model`` over a Hugging Face folder.

The folder is what :mod:`mlops_training.hf_export` writes (``config.json``, ``model.safetensors``, tokenizer,
``generation_config.json``, ``model.json`` with ``kind: hf_causal_lm``) and what KServe's Hugging Face runtime
takes as its ``storageUri``; any folder ``AutoModelForCausalLM.from_pretrained`` opens works.

Decoding is ``transformers``' own ``generate`` (greedy when ``temperature`` is 0, else sampling with
``temperature`` / ``top_p``), run in a worker thread with a streamer that hands each new token to the event loop:
the server's greedy output is by construction what plain ``generate`` on the folder returns (a test checks it).
Text is decoded incrementally from all tokens so far (a token that ends inside a UTF-8 character waits for the
next); a ``stop`` string ends the generation and is cut from the text, and the text that could still become the
start of a stop string is held back until it cannot.

Besides the wall-clock timings (time to first token, latency), each generation records the CPU time its decoding
thread spent after the first token and the tokens it produced in that time (``decode_cpu_s``, ``decode_steps``):
the decode cost of the weights, which the load of other processes on the machine does not change the way it
changes a wall-clock rate (a thread waiting for a core counts in wall time, not in its CPU time). With the default
``serving.torch_threads`` of 1 the decoding thread does all of the forward passes' work.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kserve import Model

from mlops_model import FALLBACK_CHAT_TEMPLATE
from mlops_serving.errors import BadRequestError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sampling:
    """Validated decoding parameters of one request."""

    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()


@dataclass
class Generation:
    """What one generation produced so far (filled in as it streams)."""

    prompt_tokens: int
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None
    started: float = field(default_factory=time.perf_counter)
    ttft_s: float | None = None
    latency_s: float = 0.0
    decode_cpu_s: float | None = None
    """CPU seconds of the decoding thread from the first generated token to the end (``None``: one token or none)."""
    decode_steps: int = 0
    """Tokens the model generated after the first, in ``decode_cpu_s`` (a stop string's halt may add one that the
    answer does not keep, so this is not always ``len(token_ids) - 1``)."""


class _TokenStreamer:
    """A ``transformers`` streamer: skips the prompt, hands every new token id to the event loop's queue, and reads
    its own thread's CPU clock (``time.thread_time``) at the first generated token and at the end."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[int | None]) -> None:
        self._loop = loop
        self._queue = queue
        self._prompt_seen = False
        self.generated = 0
        self.first_cpu_s: float | None = None
        self.end_cpu_s: float | None = None

    def put(self, value: Any) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        if self.first_cpu_s is None:
            self.first_cpu_s = time.thread_time()
        for token in value.reshape(-1).tolist():
            self.generated += 1
            self._loop.call_soon_threadsafe(self._queue.put_nowait, int(token))

    def end(self) -> None:
        if self.end_cpu_s is None:
            self.end_cpu_s = time.thread_time()
        self._loop.call_soon_threadsafe(self._queue.put_nowait, None)

    def decode_cpu(self) -> tuple[float | None, int]:
        """``(CPU seconds, tokens)`` of the decode phase: after the first generated token, up to the end."""
        if self.first_cpu_s is None or self.end_cpu_s is None or self.generated < 2:
            return None, max(self.generated - 1, 0)
        return max(self.end_cpu_s - self.first_cpu_s, 0.0), self.generated - 1


class CausalLM(Model):
    """One Hugging Face causal LM, loaded from ``folder`` and labelled ``version``."""

    def __init__(self, name: str, folder: Path, version: str, check: Callable[[Path], object] | None = None) -> None:
        super().__init__(name)
        self.folder = folder
        self.version = version
        self.check = check
        """Verifies the folder's signature before anything in it is opened (:func:`mlops_model.model_verifier`)."""
        self.reason = "not loaded yet"
        self.tokenizer: Any = None
        self.model: Any = None
        self.context_length = 0
        self.created = int(time.time())
        self._pool: ThreadPoolExecutor | None = None

    def start_workers(self, workers: int, torch_threads: int) -> None:
        """One decoding thread per generation slot (the event loop's default pool is smaller than a large bound),
        each with ``torch_threads`` intra-op threads (torch's setting is per thread: a new one gets the default)."""
        import torch

        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="generate",
                                        initializer=torch.set_num_threads, initargs=(torch_threads,))

    @property
    def stable_version(self) -> str:
        return self.version

    def load(self) -> bool:
        """Verify the signature, open tokenizer and weights; on failure ``ready`` stays false with the reason."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from mlops_model import ExportedModelError

        if self.check is not None:
            try:
                self.check(self.folder)
            except ExportedModelError as exc:  # ModelSignatureError: changed / added / missing file, other key
                self.reason = f"version {self.version!r} of {self.name!r} refused: {exc}"
                log.error(self.reason)
                return False
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(self.folder))
            self.model = AutoModelForCausalLM.from_pretrained(str(self.folder), dtype=torch.float32).eval()
        except (OSError, ValueError) as exc:
            self.reason = f"cannot open {self.folder} as a Hugging Face causal LM: {exc}"
            log.error(self.reason)
            return False
        if self.tokenizer.chat_template is None:
            self.tokenizer.chat_template = FALLBACK_CHAT_TEMPLATE
        self.context_length = int(getattr(self.model.config, "max_position_embeddings", 0)
                                  or self.tokenizer.model_max_length)
        self.ready = True
        self.reason = ""
        log.info("loaded causal LM %s version %s from %s (context %d)", self.name, self.version, self.folder,
                 self.context_length)
        return True

    def close(self) -> None:
        self.ready = False
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "folder": str(self.folder), "ready": self.ready,
                "context_length": self.context_length, "kind": "hf_causal_lm"}

    def encode(self, prompt: str) -> list[int]:
        """Token ids of a completion prompt (with the tokenizer's own special tokens, as ``tokenizer(prompt)``)."""
        return list(self.tokenizer(prompt)["input_ids"])

    def encode_chat(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """Token ids of a chat: the tokenizer's chat template with the assistant's turn opened."""
        ids = self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return [int(i) for i in ids]

    def check_fits(self, prompt_tokens: int, max_tokens: int) -> None:
        """400 when the prompt plus ``max_tokens`` does not fit the context."""
        if prompt_tokens + max_tokens > self.context_length:
            raise BadRequestError(
                f"the prompt has {prompt_tokens} tokens and max_tokens is {max_tokens}: together "
                f"{prompt_tokens + max_tokens}, over this model's context length of {self.context_length} tokens"
            )

    async def stream(self, prompt_ids: list[int], sampling: Sampling, out: Generation) -> AsyncIterator[str]:
        """Text deltas as tokens arrive; ``out`` ends with the whole text, token ids, finish reason and timings."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[int | None] = asyncio.Queue()
        halt = threading.Event()
        streamer = _TokenStreamer(loop, queue)
        worker = loop.run_in_executor(self._pool, self._generate, prompt_ids, sampling, streamer, halt)
        emitted = 0
        hold = max((len(s) for s in sampling.stop), default=1) - 1
        eos = set(_as_list(self.model.generation_config.eos_token_id))
        stopped = False
        try:
            while True:
                token = await queue.get()
                if token is None:
                    break
                if out.ttft_s is None:
                    out.ttft_s = time.perf_counter() - out.started
                out.token_ids.append(token)
                if token in eos:
                    out.finish_reason = "stop"
                    continue
                text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
                if text.endswith("\ufffd"):
                    continue  # inside a multi-byte character
                cut = _first_stop(text, sampling.stop)
                if cut is not None:
                    out.text, out.finish_reason, stopped = text[:cut], "stop", True
                    halt.set()
                    break
                out.text = text
                safe = len(text) - hold
                if safe > emitted:
                    yield text[emitted:safe]
                    emitted = safe
            if not stopped:
                # the whole decode, with a trailing incomplete character as transformers' decode gives it
                text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
                cut = _first_stop(text, sampling.stop)
                out.text = text if cut is None else text[:cut]
                if cut is not None:
                    out.finish_reason = "stop"
            await worker
            out.decode_cpu_s, out.decode_steps = streamer.decode_cpu()
        finally:
            halt.set()
        if out.finish_reason is None:
            out.finish_reason = "length" if len(out.token_ids) >= sampling.max_tokens else "stop"
        if len(out.text) > emitted:
            yield out.text[emitted:]
        out.latency_s = time.perf_counter() - out.started

    def _generate(self, prompt_ids: list[int], sampling: Sampling, streamer: _TokenStreamer,
                  halt: threading.Event) -> None:
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        class Halt(StoppingCriteria):
            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
                return torch.full((input_ids.shape[0],), halt.is_set(), dtype=torch.bool)

        ids = torch.tensor([prompt_ids], dtype=torch.long)
        kwargs: dict[str, Any] = {"max_new_tokens": sampling.max_tokens, "streamer": streamer,
                                  "stopping_criteria": StoppingCriteriaList([Halt()]),
                                  "attention_mask": torch.ones_like(ids)}
        if sampling.temperature > 0:
            kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        try:
            with torch.inference_mode():
                self.model.generate(ids, **kwargs)
        except Exception:
            streamer.end()
            raise

    async def predict(self, payload: Any, headers: dict[str, str] | None = None) -> Any:
        raise BadRequestError("this model answers /openai/v1/completions, /openai/v1/chat/completions and "
                             f"/v2/models/{self.name}/generate")


def _first_stop(text: str, stops: Sequence[str]) -> int | None:
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(hits) if hits else None


def _as_list(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, list | tuple) else [int(value)]
