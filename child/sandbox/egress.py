"""A child's way out with ``--child-network on``: the parent's egress proxy.

The child's network namespace holds only loopback. Before it confines itself, the child
listens on 127.0.0.1 there and hands the listening socket to the parent's proxy over
the Unix socket the policy names (``hand_over``); the proxy accepts the connections
in the child's namespace and relays only what its allow-list lets out
(``parent/children/egress_proxy.py``). Commands find it through ``HTTP_PROXY`` and
``HTTPS_PROXY``; anything that ignores them has nowhere to go.

The hand-over link stays open while this process lives (and, across ``exec``, while
the command it became does): its end tells the proxy to close the listener.
"""

from __future__ import annotations

import os
import socket

_links: list[socket.socket] = []  # held for the process's lifetime, on purpose
LOCAL = "localhost,127.0.0.1,::1"  # what the namespace itself serves: not through the proxy


def hand_over(proxy: str) -> dict[str, str]:
    """Listen on loopback, give the listener to the proxy at ``proxy`` (a Unix socket
    path) and return the variables that point commands at it. Call it inside the new
    network namespace, before the seccomp filter refuses Unix sockets."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        port = listener.getsockname()[1]
        link = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            link.connect(proxy)
            socket.send_fds(link, [b"L"], [listener.fileno()])
        except OSError:
            link.close()
            raise
    _links.append(link)
    url = f"http://127.0.0.1:{port}"
    names = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
    return {**dict.fromkeys(names, url), "NO_PROXY": LOCAL, "no_proxy": LOCAL}


def keep_across_exec() -> None:
    """Let the command this process becomes hold the link (``confine_command``)."""
    for link in _links:
        os.set_inheritable(link.fileno(), True)
