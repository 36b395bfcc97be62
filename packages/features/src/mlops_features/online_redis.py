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

    username_env: StrictStr | None = None
    """Name of the env var holding the Redis ACL user (it wins over ``username``); ``None``: ``username``."""

    username: StrictStr | None = None
    """Redis ACL user (``None``: ``default``); passed to redis-py as is, not through ``connection_string``."""

    ssl_ca_certs: StrictStr | None = None
    """PEM file of the CAs a TLS (``ssl=true``) server's certificate is verified against; ``None``: the system's."""


def password_from_env(config: Any) -> str | None:
    """The password named by ``config.password_env``, exactly as the environment holds it."""
    var = getattr(config, "password_env", None)
    if var is None:
        return None
    if var not in os.environ:
        raise FeatureStoreError(f"online_store.password_env names {var!r}, which is not set in the environment")
    return os.environ[var]


def username_from_env(config: Any) -> str | None:
    """The ACL user named by ``config.username_env`` (``None`` when it names none)."""
    var = getattr(config, "username_env", None)
    if var is None:
        return None
    if not os.environ.get(var):
        raise FeatureStoreError(f"online_store.username_env names {var!r}, which is not set in the environment")
    return os.environ[var]


class SecretRedisOnlineStore(RedisOnlineStore):
    """:class:`RedisOnlineStore` that adds the password from the environment to the client's keywords."""

    _keywords: dict[str, Any] = {}  # noqa: RUF012 - replaced, never mutated

    def _get_client(self, online_store_config: Any) -> Any:
        self._keywords = client_keywords(online_store_config)
        return super()._get_client(online_store_config)

    async def _get_client_async(self, online_store_config: Any) -> Any:
        self._keywords = client_keywords(online_store_config)
        return await super()._get_client_async(online_store_config)

    def _parse_connection_string(self, connection_string: str) -> tuple[list[dict[str, str]], dict[str, Any]]:  # type: ignore[override, unused-ignore]
        nodes, kwargs = RedisOnlineStore._parse_connection_string(connection_string)
        if "password" in kwargs:
            raise FeatureStoreError("the connection_string carries a password: name its env var in password_env")
        return nodes, {**kwargs, **self._keywords}


def client_keywords(config: Any) -> dict[str, Any]:
    """The redis-py keywords kept out of ``connection_string`` (whose values Feast splits on ``,`` and ``=`` and
    JSON-decodes): the password from its env var, the ACL user (``username_env``, else ``username``), the CA file."""
    keywords: dict[str, Any] = {}
    password = password_from_env(config)
    if password is not None:
        keywords["password"] = password
    username = username_from_env(config)
    if username is None:
        username = getattr(config, "username", None)
    if username is not None:
        keywords["username"] = username
    if getattr(config, "ssl_ca_certs", None) is not None:
        keywords["ssl_ca_certs"] = config.ssl_ca_certs
    return keywords
