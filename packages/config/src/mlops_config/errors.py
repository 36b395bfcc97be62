"""Errors of the config layer.

``PlatformError`` is the root of every error the platform raises on purpose. It lives here, in the
left-most package, because ``mlops_config`` imports nothing of ours; ``mlops_core.errors`` re-exports
it as the canonical name for every other package.
"""

from __future__ import annotations


class PlatformError(Exception):
    """An error a person can act on. ``exit_code`` is what the CLI exits with."""

    exit_code: int = 2


class ConfigError(PlatformError):
    """A config file, env var or ``--set`` override is malformed or does not fit the schema."""
