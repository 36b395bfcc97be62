"""Feast's Redis online store, with the password read from an env var when the client connects.

Feast's own Redis store takes the password inside ``connection_string``
(``host:port,db=0,password=...``), which it splits on ``,`` and ``=`` and then JSON-decodes value by value:
a password containing ``,`` is cut in two (the rest becomes a bogus host), ``123`` arrives as an int, and
with ``${VAR}`` in ``feature_store.yaml`` the secret is first expanded into the YAML text, where ``#``, ``{``
or ``: `` change what the file says. This store keeps the password out of every text: the config names the
env var (``password_env``) and the value goes straight to redis-py as a keyword argument.

Used as ``type: mlops_features.online_redis.SecretRedisOnlineStore`` (Feast finds a custom store by class
path and its config as ``<class>Config`` in the same module); needs ``mlops_features`` importable, as it is
wherever the platform runs, including the ``feast`` CLI in its venv.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from feast.infra.online_stores.redis import RedisOnlineStore, RedisOnlineStoreConfig
from pydantic import StrictStr

from mlops_features.errors import FeatureStoreError

STORE_TYPE = "mlops_features.online_redis.SecretRedisOnlineStore"


class SecretRedisOnlineStoreConfig(RedisOnlineStoreConfig):
    """Feast's Redis online store config plus the name of the env var that holds the password."""

    type: Literal["mlops_features.online_redis.SecretRedisOnlineStore"] = STORE_TYPE  # type: ignore[assignment, unused-ignore]
    """Online store type selector (this class's path)."""

    password_env: StrictStr | None = None
    """Name of the env var holding the Redis password; ``None``: no password."""


def password_from_env(config: Any) -> str | None:
    """The password named by ``config.password_env``, exactly as the environment holds it."""
    var = getattr(config, "password_env", None)
    if var is None:
        return None
    if var not in os.environ:
        raise FeatureStoreError(f"online_store.password_env names {var!r}, which is not set in the environment")
    return os.environ[var]


class SecretRedisOnlineStore(RedisOnlineStore):
    """:class:`RedisOnlineStore` that adds the password from the environment to the client's keywords."""

    _password: str | None = None

    def _get_client(self, online_store_config: Any) -> Any:
        self._password = password_from_env(online_store_config)
        return super()._get_client(online_store_config)

    async def _get_client_async(self, online_store_config: Any) -> Any:
        self._password = password_from_env(online_store_config)
        return await super()._get_client_async(online_store_config)

    def _parse_connection_string(self, connection_string: str) -> tuple[list[dict[str, str]], dict[str, Any]]:  # type: ignore[override, unused-ignore]
        nodes, kwargs = RedisOnlineStore._parse_connection_string(connection_string)
        if "password" in kwargs:
            raise FeatureStoreError("the connection_string carries a password: name its env var in password_env")
        if self._password is not None:
            kwargs["password"] = self._password
        return nodes, kwargs
