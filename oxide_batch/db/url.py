"""``DATABASE_URL`` as libpq reads it, several hosts included.

A highly available PostgreSQL is reached by naming every server and the kind of
session wanted — ``postgres://u@h1:5432,h2:5433/db?target_session_attrs=read-write``
— and libpq tries them in order until one accepts a read-write session (the
primary, wherever a failover put it). psycopg passes ``host`` and ``port`` to
libpq as they are, comma-separated lists included, and Django passes
``HOST``/``PORT`` and ``OPTIONS`` to psycopg; only the URL parser
(``dj-database-url``, like Python's ``urlsplit``) refuses a list of hosts. So
this module reads the host list itself and lets ``dj-database-url`` read the
rest, as for one host:

- ``HOST``: the hosts, comma-separated (``h1,h2``; an IPv6 address without its
  brackets, as libpq wants it in a list);
- ``PORT``: the ports, comma-separated, one per host (a host without a port
  gets the port of the URL's scheme, 5432), or empty when no host gave one;
- the query's parameters (``target_session_attrs``, ``connect_timeout``, …) in
  ``OPTIONS``, as ``dj-database-url`` does for one host.

A host project writes the same in ``DATABASES`` (docs/deployment.md).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

DEFAULT_PORT = 5432
# A stand-in for the host list while dj-database-url reads the rest of the URL.
_PLACEHOLDER = "oxide-batch-hosts.invalid"


def parse_database_url(url: str, **options: Any) -> dict[str, Any]:
    """Django's ``DATABASES`` entry for ``url`` (``options`` go to
    ``dj_database_url.parse``: ``conn_max_age``, ``conn_health_checks``…).
    ``ImproperlyConfigured`` names what is wrong with a host list."""
    parts = urlsplit(url)
    userinfo, at, hostlist = parts.netloc.rpartition("@")
    if "," not in hostlist:
        try:
            return dict(dj_database_url.parse(url, **options))
        except ValueError as error:  # dj_database_url.ParseError is one
            raise ImproperlyConfigured(f"DATABASE_URL cannot be read: {error}") from None
    hosts, ports = _hosts(hostlist)
    single = urlunsplit(parts._replace(netloc=f"{userinfo}{at}{_PLACEHOLDER}"))
    config = dict(dj_database_url.parse(single, **options))
    config["HOST"] = ",".join(hosts)
    config["PORT"] = ",".join(port or str(DEFAULT_PORT) for port in ports) if any(ports) else ""
    return config


def _hosts(hostlist: str) -> tuple[list[str], list[str]]:
    hosts: list[str] = []
    ports: list[str] = []
    for entry in hostlist.split(","):
        if not entry:
            raise ImproperlyConfigured(
                "DATABASE_URL: an empty host in the host list (h1:5432,h2:5433)"
            )
        try:
            one = urlsplit(f"//{entry}")
            port = one.port
        except ValueError:
            raise ImproperlyConfigured(
                f"DATABASE_URL: {entry!r} in the host list is not host[:port]"
            ) from None
        host = unquote(one.hostname or "")
        if not host or one.username is not None:
            raise ImproperlyConfigured(
                f"DATABASE_URL: {entry!r} in the host list is not host[:port]"
            )
        hosts.append(host)
        ports.append("" if port is None else str(port))
    return hosts, ports
