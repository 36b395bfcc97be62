"""One HTTP POST of an alert, with a redirect policy that keeps the bearer token where it was sent.

A redirect is followed only when it keeps the method (307/308) *and* the origin (scheme, host, port):
a 301/302/303 would turn the POST into a GET and lose the alert, and a redirect to another host would
carry the ``Authorization`` header to a party the config never named. Both are refused with the URL
that was offered, so an operator can point ``monitoring.webhook_url`` at the final address.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from mlops_monitoring.errors import AlertDeliveryError, MonitoringError

log = logging.getLogger(__name__)

MAX_REDIRECTS = 3


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


def bearer_headers(token_env: str | None) -> dict[str, str]:
    """JSON headers, plus ``Authorization: Bearer`` from the env var ``token_env`` names.

    Raises:
        MonitoringError: ``token_env`` names an env var that is not set.
    """
    headers = {"Content-Type": "application/json", "User-Agent": "mlops-monitoring"}
    if token_env:
        token = os.environ.get(token_env)
        if not token:
            raise MonitoringError(f"webhook token env var {token_env!r} is not set; export it or unset it in config")
        headers["Authorization"] = f"Bearer {token}"
    return headers


def post_json(url: str, payload: Any, *, token_env: str | None, timeout_s: float) -> int:
    """POST ``payload`` as JSON to ``url``; returns the final HTTP status (2xx).

    Raises:
        MonitoringError: ``token_env`` is not set.
        AlertDeliveryError: unreachable, an HTTP error status, or a redirect that would change the method
            or the host (``.url`` and ``.status`` say which).
    """
    headers = bearer_headers(token_env)
    body = json.dumps(payload, default=str).encode("utf-8")
    target = url
    for _ in range(MAX_REDIRECTS + 1):
        try:
            response = httpx.post(target, content=body, headers=headers, timeout=timeout_s, follow_redirects=False)
        except httpx.HTTPError as exc:
            raise AlertDeliveryError(f"webhook {url!r} is unreachable: {exc}", url=url) from None
        status = response.status_code
        if response.is_redirect:
            location = urljoin(target, response.headers.get("location", ""))
            if status not in (307, 308):
                raise AlertDeliveryError(
                    f"webhook {url!r} answered HTTP {status} redirecting to {location!r}; a {status} turns the POST "
                    f"into a GET and the alert would be lost: set monitoring.webhook_url to the final URL",
                    url=url, status=status)
            if _origin(location) != _origin(target):
                raise AlertDeliveryError(
                    f"webhook {url!r} answered HTTP {status} redirecting to another host {location!r}; refused so "
                    f"the bearer token is not sent there: set monitoring.webhook_url to the final URL",
                    url=url, status=status)
            log.info("webhook %s redirected (HTTP %d) to %s on the same host", target, status, location)
            target = location
            continue
        if status >= 400:
            detail = response.text.strip().replace("\n", " ")[:200]
            raise AlertDeliveryError(f"webhook {url!r} answered HTTP {status}: {detail or response.reason_phrase}",
                                     url=url, status=status)
        return status
    raise AlertDeliveryError(f"webhook {url!r} redirected more than {MAX_REDIRECTS} times; last to {target!r}",
                             url=url)
