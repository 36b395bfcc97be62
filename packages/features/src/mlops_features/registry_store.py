"""Feast's file registry, written atomically.

Feast's ``FileRegistryStore`` rewrites ``registry.db`` in place (``open(path, "wb")``, then the bytes): between
the truncation and the last byte the file is empty or torn. A process killed there (a materialization, which
rewrites the registry once per view) leaves a registry that no longer parses, or parses as an empty one, and
every later ``feast``/platform call fails until someone runs ``feast apply`` again; a server refreshing its
registry cache at that moment (``registry.cache_ttl_seconds``) reads the torn file while serving.

This store writes a temporary sibling, fsyncs it and renames it over ``registry.db``
(``mlops_core.atomic_write_bytes``): readers see the previous registry or the new one, never a torn one.
Used as ``registry_store_type: mlops_features.registry_store.AtomicFileRegistryStore`` for the file registry
(``mlops_features.store.repo_config_dict`` sets it); needs ``mlops_features`` importable, as it is wherever
the platform runs, including the ``feast`` CLI in its venv.
"""

from __future__ import annotations

import uuid
from typing import Any

from feast.infra.registry.file import FileRegistryStore

from mlops_core import atomic_write_bytes

STORE_TYPE = "mlops_features.registry_store.AtomicFileRegistryStore"


class AtomicFileRegistryStore(FileRegistryStore):
    """Feast's local file registry store, each write a temporary file renamed over ``registry.db``."""

    def _write_registry(self, registry_proto: Any) -> None:
        from feast.utils import _utc_now

        registry_proto.version_id = str(uuid.uuid4())
        registry_proto.last_updated.FromDatetime(_utc_now())
        atomic_write_bytes(self._filepath, registry_proto.SerializeToString())
