"""Claude Code's WebFetch and WebSearch.

``web_fetch`` fetches a web page as text in the child itself; a child started with
``--child-network off`` has no network, and the tool says so rather than failing on a
socket error. ``web_search`` is the Messages API's own web search tool: the API runs it
(through the parent's gateway, like every model call), so the child needs no network.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from isoagent.child.agent.tools.base import Tool, ToolError
from isoagent.protocol import ToolSpec

MAX_BYTES = 5_000_000
TIMEOUT = 30.0


class WebFetchInput(msgspec.Struct, forbid_unknown_fields=True):
    url: Annotated[str, msgspec.Meta(description="The http(s) URL to fetch.")]
    prompt: Annotated[
        str, msgspec.Meta(description="What you want from the page (for your own reading).")
    ] = ""


class WebFetch(Tool[WebFetchInput]):
    name = "web_fetch"
    description = (
        "Fetch a web page (http or https) and return its text (HTML reduced to text, "
        "scripts and styles dropped). Long pages are truncated."
    )
    Input = WebFetchInput

    def execute(self, inp: WebFetchInput) -> str:
        if not self.ctx.sandbox.network:
            raise ToolError(
                "web_fetch is not available: this agent runs without network (--child-network off)"
            )
        import urllib.error
        import urllib.request

        allowed = self.ctx.sandbox.local_fetch_hosts
        check_destination(inp.url, allowed)

        class Redirects(urllib.request.HTTPRedirectHandler):
            def redirect_request(
                self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str
            ) -> Any:
                check_destination(newurl, allowed)  # each hop, as the first
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
        cut = " (first 5 MB)" if len(body) > MAX_BYTES else ""
        return f"{inp.url} ({kind}){cut}:\n\n{text.strip()}"


def check_destination(url: str, local_hosts: tuple[str, ...]) -> None:
    """Refuse (``ToolError``) a URL that is not http(s), or whose host resolves to a
    private, loopback, link-local or otherwise non-public address (a metadata service, the
    user's router, a service on their machine) unless ``local_hosts`` names the host."""
    import ipaddress
    import socket
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ToolError(f"only http:// and https:// URLs can be fetched: {url}")
    host = parts.hostname
    if host in local_hosts:
        return
    try:
        infos = socket.getaddrinfo(host, parts.port or 443, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise ToolError(f"cannot fetch {url}: {exc}") from None
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if not address.is_global or address.is_multicast:
            raise ToolError(
                f"{host} is at {address}, not a public address: web_fetch does not reach "
                f"local networks (--allow-local-fetch {host} allows it)"
            )


class WebSearchInput(msgspec.Struct):
    query: str


class WebSearch(Tool[WebSearchInput]):
    name = "web_search"
    description = "The Messages API's web search, run by the API."
    Input = WebSearchInput
    MAX_USES = 5

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, type="web_search_20250305", max_uses=self.MAX_USES)

    def execute(self, inp: WebSearchInput) -> str:
        raise ToolError("web_search runs on the API's side; it cannot be called here")
