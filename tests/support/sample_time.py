"""The instant the synthetic sample is served at: the ``local`` profile's ``features.online_ttl_as_of``.

The generator's data has fixed dates (``data.start_date``), so a test that looks its entities up online with the
wall clock would find every value past its view's ttl. Tests that build their own ``FeaturesConfig`` pin the
same instant the demo does.
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from pathlib import Path

from mlops_config import load_config

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"


@cache
def sample_as_of() -> datetime:
    """``features.online_ttl_as_of`` of the ``local`` profile (no env overrides)."""
    pinned = load_config(profile="local", config_dir=CONFIG_DIR, environ={}, check_secrets=False
                         ).config.features.online_ttl_as_of
    assert pinned is not None, "configs/profiles/local.yaml no longer pins features.online_ttl_as_of"
    return pinned
