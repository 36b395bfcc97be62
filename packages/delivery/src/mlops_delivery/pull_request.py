"""Opening a promotion pull request on GitHub (``delivery.commit_mode: pull_request``)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from mlops_delivery.errors import GitError

logger = logging.getLogger(__name__)

DEFAULT_API = "https://api.github.com"


def pull_request_endpoint(token_env: str, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The pulls API URL of ``$GITHUB_REPOSITORY`` and the token; raises before anything is pushed."""
    env = os.environ if environ is None else environ
    repo = env.get("GITHUB_REPOSITORY")
    token = env.get(token_env)
    if not repo or "/" not in repo:
        raise GitError(f"GITHUB_REPOSITORY is {repo!r}; expected 'owner/name' (set by GitHub Actions)")
    if not token:
        raise GitError(f"env var {token_env!r} (delivery.github_token_var) is not set; it must hold a token "
                       "allowed to open pull requests")
    return f"{env.get('GITHUB_API_URL', DEFAULT_API).rstrip('/')}/repos/{repo}/pulls", token


def open_pull_request(*, head: str, base: str, title: str, body: str, token_env: str,
                      environ: Mapping[str, str] | None = None) -> str:
    """Open a pull request ``head`` → ``base`` in ``$GITHUB_REPOSITORY``; return its URL.

    Args:
        head: Branch with the promotion commit (already pushed).
        base: Branch the promotion targets.
        title: Pull request title (the commit message).
        body: Pull request description (the diff).
        token_env: Name of the env var holding the token (``delivery.github_token_var``).
        environ: Environment to read (default: the process's); ``GITHUB_API_URL`` overrides the API root.
    """
    import httpx

    url, token = pull_request_endpoint(token_env, environ)
    try:
        response = httpx.post(url, json={"title": title, "head": head, "base": base, "body": body},
                              headers={"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json"},
                              timeout=30)
    except httpx.HTTPError as exc:
        raise GitError(f"cannot open a pull request at {url!r}: {exc}") from exc
    if response.status_code != 201:
        raise GitError(f"GitHub refused the pull request {head!r} → {base!r}: HTTP {response.status_code} "
                       f"{response.text[:300]!r}")
    link = str(response.json().get("html_url", ""))
    logger.info("opened %s", link)
    return link
