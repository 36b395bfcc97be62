"""The request parameters the language-model routes implement, and the refusal of every other one.

A parameter this server does not implement is refused with a 400 naming it (OpenAI's error shape, ``param`` set),
never ignored: a client asking for ``n=3``, ``logprobs`` or a ``presence_penalty`` would otherwise get an answer
that silently lacks what it asked for. A parameter is accepted when it is implemented (``IMPLEMENTED``), or when
its value is the one that asks for nothing (``NEUTRAL``: ``null``, ``n=1``, ``logprobs=false``, a zero penalty,
an empty ``logit_bias``; clients such as LangChain send these defaults explicitly). ``user`` is an opaque caller
id in OpenAI's API (abuse monitoring); it changes no output and is accepted. ``seed`` is accepted with greedy
decoding (``temperature=0``), where there is nothing to seed, and refused with sampling: decoding threads share
torch's generator, so a seed could not make a sampled answer reproducible.
"""

from __future__ import annotations

from typing import Any

from mlops_config import LLMServingConfig
from mlops_serving.errors import BadRequestError
from mlops_serving.lm import Sampling

MAX_STOP = 4

_COMMON = {"model", "max_tokens", "temperature", "top_p", "stop", "n", "stream", "stream_options", "user", "seed"}
IMPLEMENTED = {"completions": _COMMON | {"prompt"},
               "chat": _COMMON | {"messages", "max_completion_tokens"},
               "v2_generate": {"max_tokens", "temperature", "top_p", "stop"}}
"""Parameters each route reads (``v2_generate``: the keys of its ``parameters`` object)."""

_NEUTRAL_COMMON: dict[str, tuple[Any, ...]] = {
    "presence_penalty": (0, 0.0), "frequency_penalty": (0, 0.0), "logit_bias": ({},)}
NEUTRAL: dict[str, dict[str, tuple[Any, ...]]] = {
    "completions": {**_NEUTRAL_COMMON, "logprobs": (), "echo": (False,), "best_of": (1,), "suffix": ("",)},
    "chat": {**_NEUTRAL_COMMON, "logprobs": (False,), "top_logprobs": (0,), "tools": ([],), "tool_choice": ("none",),
             "functions": ([],), "function_call": ("none",), "response_format": ({"type": "text"},),
             "modalities": (["text"],), "parallel_tool_calls": (False,), "store": (False,)},
    "v2_generate": {},
}
"""Parameters this server does not implement, with the values that ask for nothing (``None`` always does)."""


class UnsupportedParameterError(BadRequestError):
    """A request parameter this server does not implement (``param`` names it)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def check_supported(body: dict[str, Any], route: str) -> None:
    """Refuse (400) the first parameter of ``body`` that ``route`` does not implement, unless its value asks for
    nothing (see the module doc)."""
    for name, value in body.items():
        if name in IMPLEMENTED[route] or value is None:
            continue
        neutral = NEUTRAL[route].get(name)
        if neutral is not None and any(_same(value, v) for v in neutral):
            continue
        if neutral is None:
            raise UnsupportedParameterError(
                f"{name} is not a parameter of this server's {route} route; it accepts "
                f"{', '.join(sorted(IMPLEMENTED[route]))}", name)
        shown = "".join(f"{v!r} or " for v in neutral)
        raise UnsupportedParameterError(
            f"{name}={value!r:.60} is not supported by this server (only {shown}null, which ask for nothing); "
            "remove it from the request", name)
    if route != "v2_generate" and body.get("seed") is not None and _number(body, "temperature", 1.0) != 0.0:
        raise UnsupportedParameterError(
            f"seed={body['seed']!r:.40} is not supported with sampling (temperature="
            f"{_number(body, 'temperature', 1.0)!r}): this server cannot make a sampled answer reproducible; "
            "use temperature=0 (greedy, deterministic) or drop seed", "seed")


def _same(value: Any, neutral: Any) -> bool:
    """``value == neutral`` without ``True == 1`` / ``False == 0`` passing for one another."""
    return (type(value) is type(neutral) and value == neutral) or (
        isinstance(neutral, float) and isinstance(value, int) and not isinstance(value, bool) and value == neutral)


def parse_sampling(body: dict[str, Any], cfg: LLMServingConfig, *, chat: bool) -> Sampling:
    """The request's decoding parameters, or a 400 naming the bad value and the limit."""
    key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = body.get(key)
    if max_tokens is None:
        max_tokens = cfg.default_max_tokens
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 0 < max_tokens <= cfg.max_tokens:
        raise BadRequestError(f"{key}={max_tokens!r:.40} is invalid: it must be an integer from 1 to {cfg.max_tokens}")
    temperature = _number(body, "temperature", 1.0)
    if not 0.0 <= temperature <= 2.0:
        raise BadRequestError(f"temperature={temperature!r} is invalid: it must be between 0 and 2")
    top_p = _number(body, "top_p", 1.0)
    if not 0.0 < top_p <= 1.0:
        raise BadRequestError(f"top_p={top_p!r} is invalid: it must be greater than 0 and at most 1")
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or n != 1):
        raise UnsupportedParameterError(f"n={n!r:.40} is not supported: this server returns exactly 1 choice (n=1)",
                                        "n")
    stop = body.get("stop")
    stops: tuple[str, ...]
    if stop is None:
        stops = ()
    elif isinstance(stop, str):
        stops = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= MAX_STOP:
        stops = tuple(stop)
    else:
        raise BadRequestError(f"stop={stop!r:.80} is invalid: it must be a string or a list of at most {MAX_STOP} "
                              "strings")
    if any(s == "" for s in stops):
        raise BadRequestError("stop contains an empty string; every stop sequence needs at least one character")
    return Sampling(max_tokens=max_tokens, temperature=temperature, top_p=top_p, stop=stops)


def _number(body: dict[str, Any], name: str, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequestError(f"{name}={value!r:.40} is invalid: it must be a number")
    return float(value)
