"""Credentials out of URLs before they are recorded: a ``user:password@`` in a URL (a Feast registry's
``postgresql://feast:pw@host/db``, a Redis URL with its password) must not reach MLflow params, a run's
``config.json`` or an error message, which far more people and processes can read than the Secret it came from."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# scheme://userinfo@ -- userinfo is whatever sits between "//" and the last "@" before the host part
_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/@\s?#]*)@")
REDACTED = "***"


def redact_credentials(text: str) -> str:
    """``text`` with the password (and, when there is no user name, the token) of every URL in it replaced by
    ``***``; the user name stays, so a reader can still tell which account a URL used."""

    def repl(m: re.Match[str]) -> str:
        user, sep, _ = m.group("userinfo").partition(":")
        return f"{m.group('scheme')}{user}:{REDACTED}@" if sep else f"{m.group('scheme')}{REDACTED}@"

    return _USERINFO.sub(repl, text)


def redact_tree(value: Any) -> Any:
    """A copy of a JSON-like value (mappings, lists, strings) with :func:`redact_credentials` on every string."""
    if isinstance(value, str):
        return redact_credentials(value)
    if isinstance(value, Mapping):
        return {k: redact_tree(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_tree(v) for v in value]
    return value
