"""A PostgreSQL database of a test's own on the shared server, dropped afterwards (never a shared one)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def own_database(postgres_url: str, prefix: str = "t", owner: str | None = None) -> Iterator[str]:
    """Yield the name of a fresh database ``<prefix>_<random>`` on ``postgres_url``'s server; drop it on exit
    (``WITH (FORCE)``: a server the test started may still hold connections)."""
    import psycopg2

    db = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = psycopg2.connect(postgres_url)
    admin.autocommit = True
    try:
        with admin.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{db}"' + (f' OWNER "{owner}"' if owner else ""))
        yield db
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        admin.close()


def database_url(postgres_url: str, db: str, driver: str = "postgresql+psycopg2") -> str:
    """``postgres_url`` pointed at ``db`` with SQLAlchemy's ``driver`` (MLflow's server needs psycopg2 named)."""
    return f"{postgres_url.rsplit('/', 1)[0].replace('postgresql://', driver + '://', 1)}/{db}"
