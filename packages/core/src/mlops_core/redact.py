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
# Schemes whose bare ``userinfo@`` (no ``:``) is a user name (``postgresql://postgres@db/x``, ``redis://app@r``),
# not a token: it stays. Anywhere else (``https://ghp_token@github.com``) a bare userinfo is taken for a token.
_USER_NAME_SCHEMES = re.compile(r"^(postgres(ql)?|mysql|mariadb|redis|rediss|mongodb|amqps?|mssql)(\+[a-z0-9]+)?://$",
                                re.IGNORECASE)


def redact_credentials(text: str) -> str:
    """``text`` with the password (and, when there is no user name, the token) of every URL in it replaced by
    ``***``; the user name stays, so a reader can still tell which account a URL used."""

    def repl(m: re.Match[str]) -> str:
        scheme, userinfo = m.group("scheme"), m.group("userinfo")
        user, sep, _ = userinfo.partition(":")
        if sep:
            return f"{scheme}{user}:{REDACTED}@"
        return f"{scheme}{userinfo}@" if _USER_NAME_SCHEMES.match(scheme) else f"{scheme}{REDACTED}@"

    return _USERINFO.sub(repl, text)


def restore_credentials(recorded: Any, live: Any, where: str = "") -> Any:
    """``recorded`` (a config recorded through :func:`redact_tree`) with every string whose credentials were
    redacted taken from ``live`` (the config this process runs with) at the same place, when the live value
    redacts to exactly the recorded one: only the password comes back, and only the same URL's.

    A re-run of a recorded training needs the database and Redis URLs it read through; what was recorded is
    the URL without its password. Places ``live`` does not hold are left as recorded.

    Raises:
        ValueError: a recorded value lost its credentials and the live value at that place is another URL (the
            message names the place and both redacted forms): the re-run cannot reach what the run read.
    """
    if isinstance(recorded, str):
        if not isinstance(live, str) or live == recorded:
            return recorded
        if redact_credentials(live) == recorded:
            return live
        if f"{REDACTED}@" in recorded and redact_credentials(recorded) == recorded:
            raise ValueError(f"{where or 'value'}: recorded as {recorded!r} (credentials redacted), but this "
                             f"process's config has {redact_credentials(live)!r} there: run the re-run with the "
                             "config that points at the recorded store")
        return recorded
    if isinstance(recorded, Mapping):
        return {k: restore_credentials(v, live.get(k) if isinstance(live, Mapping) else None,
                                       f"{where}.{k}" if where else str(k)) for k, v in recorded.items()}
    if isinstance(recorded, list | tuple):
        items = list(live) if isinstance(live, list | tuple) and len(live) == len(recorded) else [None] * len(recorded)
        pairs = enumerate(zip(recorded, items, strict=True))
        return [restore_credentials(v, w, f"{where}[{i}]") for i, (v, w) in pairs]
    return recorded


def redact_tree(value: Any) -> Any:
    """A copy of a JSON-like value (mappings, lists, strings) with :func:`redact_credentials` on every string."""
    if isinstance(value, str):
        return redact_credentials(value)
    if isinstance(value, Mapping):
        return {k: redact_tree(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_tree(v) for v in value]
    return value
