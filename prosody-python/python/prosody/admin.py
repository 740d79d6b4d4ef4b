"""Topic administration, for tests and one-off operations."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from . import _prosody

__all__ = ["AdminClient"]


def _servers(bootstrap_servers: str | Iterable[str] | None) -> list[str] | None:
    if bootstrap_servers is None:
        return None
    if isinstance(bootstrap_servers, str):
        return [server.strip() for server in bootstrap_servers.split(",") if server.strip()]
    servers = list(bootstrap_servers)
    for server in servers:
        if not isinstance(server, str):
            raise TypeError(f"bootstrap_servers holds strings, not {server!r}")
    return servers


class AdminClient:
    """Creates and deletes Kafka topics.

    Without `bootstrap_servers`, the servers come from
    `PROSODY_BOOTSTRAP_SERVERS`. A string may list several, comma-separated.
    """

    __slots__ = ("_native",)

    def __init__(self, bootstrap_servers: str | Iterable[str] | None = None) -> None:
        self._native = _prosody.NativeAdmin(_servers(bootstrap_servers))

    async def create_topic(
        self,
        name: str,
        *,
        partition_count: int | None = None,
        replication_factor: int | None = None,
        cleanup_policy: str | None = None,
        retention: timedelta | float | None = None,
    ) -> None:
        """Create a topic. An option left out comes from its `PROSODY_TOPIC_*`
        environment variable, then the broker's default."""
        if isinstance(retention, timedelta):
            seconds: float | None = retention.total_seconds()
        elif retention is None:
            seconds = None
        elif isinstance(retention, (int, float)) and not isinstance(retention, bool):
            seconds = float(retention)
        else:
            raise TypeError(f"retention is a timedelta or seconds, not {retention!r}")
        await self._native.create_topic(
            name, partition_count, replication_factor, cleanup_policy, seconds
        )

    async def delete_topic(self, name: str) -> None:
        """Delete a topic."""
        await self._native.delete_topic(name)
