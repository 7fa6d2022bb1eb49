"""Claude Code's WebFetch and WebSearch.

``WebFetch`` fetches a web page as text in the child itself, through the parent's
egress proxy (``--child-network on``) or directly (``host``); a child started with
``--child-network off`` has no network, and the tool says so rather than failing on a
socket error. ``WebSearch`` is the Messages API's own web search tool: the API runs it
(through the parent's gateway, like every model call), so the child needs no network.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from isoagent.child.agent.tools.base import Tool, ToolError
from isoagent.protocol import SandboxPolicy, ToolSpec

if TYPE_CHECKING:
    from ipaddress import IPv4Address, IPv6Address, IPv6Network

MAX_BYTES = 5_000_000
TIMEOUT = 30.0


class WebFetchInput(msgspec.Struct, forbid_unknown_fields=True):
    """Claude Code's WebFetch input; ``prompt`` is kept for the model's own reading (no
    second model reads the page for it)."""

    url: Annotated[str, msgspec.Meta(description="The http(s) URL to fetch.")]
    prompt: Annotated[str, msgspec.Meta(description="What you want from the page.")]
    offset: Annotated[
        int, msgspec.Meta(ge=0, description="Character of the page's text to start from.")
    ] = 0


class WebFetch(Tool[WebFetchInput]):
    name = "WebFetch"
    description = (
        "Fetch a web page (http or https) and return its text (HTML reduced to text, "
        "scripts and styles dropped). Long pages are truncated: read on with `offset`."
    )
    Input = WebFetchInput

    def execute(self, inp: WebFetchInput) -> str:
        sandbox = self.ctx.sandbox
        if not sandbox.network and not sandbox.proxy:
            raise ToolError(
                "WebFetch is not available: this agent runs without network (--child-network off)"
            )
        import urllib.error
        import urllib.request

        # through the egress proxy (HTTP_PROXY) the proxy checks each request, redirects
        # included: the child cannot even resolve a name
        direct = not sandbox.proxy
        check_destination(inp.url, sandbox, resolve=direct)

        class Redirects(urllib.request.HTTPRedirectHandler):
            def redirect_request(
                self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str
            ) -> Any:
                check_destination(newurl, sandbox, resolve=direct)  # each hop, as the first
                return super().redirect_request(req, fp, code, msg, headers, newurl)

        request = urllib.request.Request(inp.url, headers={"User-Agent": "isoagent-web-fetch"})
        try:
            with urllib.request.build_opener(Redirects).open(request, timeout=TIMEOUT) as response:
                body = response.read(MAX_BYTES + 1)
                kind = response.headers.get_content_type()
                charset = response.headers.get_content_charset() or "utf-8"
        except urllib.error.HTTPError as exc:
            raise ToolError(f"{inp.url}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise ToolError(f"cannot fetch {inp.url}: {getattr(exc, 'reason', exc)}") from None
        text = body[:MAX_BYTES].decode(charset, errors="replace")
        if kind in ("text/html", "application/xhtml+xml"):
            from isoagent.child.agent.tools.html_text import html_text

            text = html_text(text)
        text = text.strip()
        cut = " (first 5 MB)" if len(body) > MAX_BYTES else ""
        if inp.offset:
            cut += f" from character {inp.offset} of {len(text)}"
        return f"{inp.url} ({kind}){cut}:\n\n{text[inp.offset :]}"


def check_destination(url: str, policy: SandboxPolicy, resolve: bool = True) -> None:
    """Refuse (``ToolError``) a URL that is not http(s), or (``resolve``) whose host the
    policy does not let out (``allowed_address``)."""
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ToolError(f"only http:// and https:// URLs can be fetched: {url}")
    if not resolve:
        return
    try:
        allowed_address(
            parts.hostname, parts.port or 443, policy.allowed_domains, policy.local_fetch_hosts
        )
    except NotAllowed as exc:
        raise ToolError(f"WebFetch refused: {exc}") from None
    except (OSError, UnicodeError) as exc:
        raise ToolError(f"cannot fetch {url}: {exc}") from None


class NotAllowed(Exception):
    """A destination the network policy refuses; its text says why."""


def allowed_address(
    host: str, port: int, allowed_domains: Sequence[str], local_hosts: Sequence[str]
) -> tuple[Any, ...]:
    """Where to connect to reach ``host``: its first address (``getaddrinfo``'s family,
    type, proto, name, sockaddr). ``NotAllowed`` when ``allowed_domains`` (unless empty)
    does not name it, or when any of its addresses is not public (a metadata service,
    the user's router, a service on their machine) unless ``local_hosts`` names it;
    ``OSError`` when it does not resolve."""
    import ipaddress
    import socket

    if allowed_domains and not domain_allowed(host, allowed_domains):
        raise NotAllowed(f"{host} is not in --allowed-domains")
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    if host not in local_hosts:
        for info in infos:
            address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
            if not public(address):
                raise NotAllowed(
                    f"{host} is at {address}, not a public address "
                    f"(--allow-local-fetch {host} allows it)"
                )
    return infos[0]


def public(address: IPv4Address | IPv6Address) -> bool:
    """Whether ``address`` is public: global and not multicast and, for an IPv6 address
    that carries an IPv4 one, that one public too, since it is where a gateway (NAT64,
    6to4, Teredo) or the host's own stack (mapped, compatible) delivers it. The
    local-use NAT64 prefix ``64:ff9b:1::/48`` is never public: where it carries its IPv4
    address is its network's choice."""
    if not address.is_global or address.is_multicast:
        return False
    if address.version == 4:
        return True
    local_nat64, carriers = _ipv6_prefixes()
    return address not in local_nat64 and all(
        public(inner) for inner in _carried_ipv4(address, carriers)
    )


def _carried_ipv4(address: IPv6Address, carriers: Sequence[IPv6Network]) -> list[IPv4Address]:
    """The IPv4 addresses ``address`` carries: 6to4's (``2002::/16``), Teredo's server
    and client (``2001::/32``), or the last 32 bits in ``carriers``."""
    from ipaddress import IPv4Address

    if address.sixtofour is not None:
        return [address.sixtofour]
    if address.teredo is not None:
        return list(address.teredo)
    if any(address in prefix for prefix in carriers):
        return [IPv4Address(int(address) & 0xFFFFFFFF)]
    return []


@functools.cache
def _ipv6_prefixes() -> tuple[IPv6Network, tuple[IPv6Network, ...]]:
    """The local-use NAT64 prefix, and the prefixes whose last 32 bits are an IPv4
    address: IPv4-mapped, SIIT's IPv4-translated, IPv4-compatible, NAT64's well-known."""
    from ipaddress import IPv6Network

    carriers = ("::ffff:0:0/96", "::ffff:0:0:0/96", "::/96", "64:ff9b::/96")
    return IPv6Network("64:ff9b:1::/48"), tuple(IPv6Network(n) for n in carriers)


def domain_allowed(host: str, patterns: Sequence[str]) -> bool:
    """Whether ``patterns`` name ``host``: exactly, or as ``*.domain`` for its subdomains
    (not the domain itself, as in Claude Code)."""
    host = host.lower().rstrip(".")
    for pattern in patterns:
        pattern = pattern.lower().rstrip(".")
        if host == pattern or (pattern.startswith("*.") and host.endswith(pattern[1:])):
            return True
    return False


class WebSearchInput(msgspec.Struct):
    query: str


class WebSearch(Tool[WebSearchInput]):
    """Claude Code's WebSearch is the API's server tool, whose name the API fixes: the model
    sees (and its answers name) ``web_search``; agent files, rules and hooks say WebSearch."""

    name = "WebSearch"
    description = "The Messages API's web search, run by the API."
    Input = WebSearchInput
    MAX_USES = 5

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec("web_search", type="web_search_20250305", max_uses=self.MAX_USES)

    def execute(self, inp: WebSearchInput) -> str:
        raise ToolError("WebSearch runs on the API's side; it cannot be called here")
