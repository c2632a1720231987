"""Who the client is behind proxies, and the ``X-Forwarded-*`` headers the gateway sends on.

The peer (the TCP connection's other end) is the client unless it is one of
``server.trusted_proxies``: then the ``X-Forwarded-For`` chain it sent is believed, read from
the right (the hop nearest the gateway) past every trusted address, and the first untrusted
address is the client (as nginx's ``real_ip_recursive`` and Envoy's ``xff_num_trusted_hops``
read it). Upstream, the chain is kept and the peer appended when the peer is trusted; from any
other peer, whatever ``X-Forwarded-For`` it sent is dropped and a new chain starts with the
peer, so that a client cannot pass off an address of its choosing.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Sequence

from gateway.incoming import ClientRequest

__all__ = ["client_address", "forwarded_headers", "trusted_networks"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@functools.lru_cache(maxsize=16)
def _networks(entries: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(e.strip(), strict=False) for e in entries)


def trusted_networks(entries: Sequence[str]) -> tuple[Network, ...]:
    """``server.trusted_proxies`` parsed (once per list: configs are immutable)."""
    return _networks(tuple(entries))


def _trusted(address: str, networks: tuple[Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address.strip())
    except ValueError:
        return False  # not an address (``unknown``, a host name, garbage): never trusted
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # a dual-stack socket's ``::ffff:10.0.0.1`` is 10.0.0.1
    return any(ip in n for n in networks)


def client_address(request: ClientRequest, trusted: Sequence[str]) -> str | None:
    """The client's address: the peer, or when the peer is a trusted proxy, the first address
    of its ``X-Forwarded-For`` chain (from the right) that is not a trusted proxy."""
    peer = request.remote
    if not trusted or peer is None:
        return peer
    networks = trusted_networks(trusted)
    if not _trusted(peer, networks):
        return peer
    hops = [h.strip() for h in ",".join(request.headers.getall("X-Forwarded-For", ()))
            .split(",") if h.strip()]
    for hop in reversed(hops):
        if not _trusted(hop, networks):
            return hop
    return hops[0] if hops else peer  # every hop a proxy of ours: the farthest is the client


def forwarded_headers(request: ClientRequest, trusted: Sequence[str]) -> dict[str, str]:
    """``X-Forwarded-For`` and ``X-Forwarded-Proto`` for the upstream request."""
    peer = request.remote or ""
    if trusted and peer and _trusted(peer, trusted_networks(trusted)):
        chain = ", ".join(request.headers.getall("X-Forwarded-For", ()))
        proto = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip()
        return {"X-Forwarded-For": f"{chain}, {peer}" if chain else peer,
                "X-Forwarded-Proto": proto or request.scheme}
    out = {"X-Forwarded-Proto": request.scheme}
    if peer:
        out["X-Forwarded-For"] = peer
    return out
