"""The job's store as live mode reaches it: a client that connects again when its connection is lost
(``trainguard.pod.storelink``), which gives up with ``LiveError``.

``connect`` gives a ``torch.distributed.Store`` of the store at an address; all of this process's connections to
one address share a ``Link``, whose ``on_reconnect`` hooks the rounds use (``trainguard.sdk._roundstore``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from trainguard.pod import contract, storelink
from trainguard.pod.storelink import Connection, first_line

__all__ = ["STORE_TIMEOUT", "Connection", "Link", "LiveError", "connect"]

#: How long one store operation may wait for a key (the client's timeout), and the first connection's bound.
STORE_TIMEOUT = storelink.STORE_TIMEOUT


class LiveError(RuntimeError):
    """Live mode cannot go on: the store is unreachable, a round did not form in time, or the training
    function failed in ``trainguard.sdk._rounds.MAX_FAILED_FORMATIONS`` rounds of the same members in a row."""


class Link(storelink.Link):
    """A ``trainguard.pod.storelink.Link`` of live mode's: one it cannot make again raises ``LiveError``."""

    def __init__(
        self,
        address: str,
        open_: Callable[[float], Any],
        lost: tuple[type[BaseException], ...],
        **options: Any,
    ) -> None:
        options.setdefault("unreachable", LiveError)
        options.setdefault("who", "live mode")
        super().__init__(address, open_, lost, **options)


def connect(address: str) -> Any:
    """A client of the store at ``address`` (``host:port``) that reconnects: a ``torch.distributed.Store``
    whose ``link`` is this process's ``Link`` to that address."""
    link = _link(address)
    try:
        first = link.open_(STORE_TIMEOUT.total_seconds())
    except (RuntimeError, ValueError) as error:
        raise LiveError(
            f"live mode: cannot reach the store at {address} ({first_line(error)}); "
            f"set {contract.ENV_LIVE_STORE}=host:port"
        ) from error
    return storelink.store_class()(Connection(link, first))


_links: dict[str, Link] = {}
_links_lock = threading.Lock()


def _link(address: str) -> Link:
    import torch.distributed as dist

    with _links_lock:
        if address not in _links:
            _links[address] = Link(address, lambda seconds: _open(address, seconds), (dist.DistNetworkError,))
        return _links[address]


def _open(address: str, seconds: float) -> Any:
    return storelink.open_tcp(address, seconds, STORE_TIMEOUT)
