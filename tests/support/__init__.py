"""What tests share to start real servers: free loopback ports, a redis-server of a test's own (TLS, ACL users) and
a Redis Cluster of three, a throwaway CA, a PostgreSQL database of a test's own and an ``mlflow server`` on it. The
fixtures over these live in ``fixtures.py`` (registered by tests/conftest.py); a test that needs the objects
themselves imports them from here."""

from .mlflow_server import start_mlflow_server
from .ports import free_port, wait_port
from .postgres import own_database
from .python_argv import python_module
from .redis_cluster import RedisClusterServers
from .redis_server import RedisServer
from .repo_copy import copy_repo
from .sample_time import sample_as_of
from .shared_redis import shared_redis_url
from .tls import TlsFiles, make_tls_files

__all__ = ["RedisClusterServers", "RedisServer", "TlsFiles", "copy_repo", "free_port", "make_tls_files",
           "own_database", "python_module", "sample_as_of", "shared_redis_url", "start_mlflow_server", "wait_port"]
