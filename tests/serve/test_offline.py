"""Every page the server offers works offline: no served HTML, script or style loads anything from
another host (FastAPI's CDN-based /docs and /redoc are replaced by a local /docs)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from attnlab.serve.routes.pages import STATIC_DIR

# Tags whose src/href the browser fetches as part of the page; <a href> is a link the reader may follow.
_FETCHED = {"script", "img", "link", "iframe", "source", "video", "audio", "embed", "object", "image", "use"}
_OUTSIDE = re.compile(r"^\s*(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)
_OUTSIDE_IN_CODE = re.compile(
    r"""(?:url\(\s*['"]?|@import\s+['"]?|\bfrom\s+['"]|\bimport\(\s*['"]|fetch\(\s*['"])(?:https?:)?//""",
    re.IGNORECASE,
)


class _Assets(HTMLParser):
    def __init__(self):
        super().__init__()
        self.urls: list[str] = []
        self.inline: list[str] = []  # <style> and <script> bodies
        self._tag = ""

    def handle_starttag(self, tag, attrs):
        self._tag = tag
        if tag in _FETCHED:
            self.urls += [v or "" for k, v in attrs if k in ("src", "href", "srcset", "data", "xlink:href")]
        self.urls += [v or "" for k, v in attrs if k == "style"]

    def handle_data(self, data):
        if self._tag in ("style", "script"):
            self.inline.append(data)


def _outside_refs(html: str) -> list[str]:
    p = _Assets()
    p.feed(html)
    inline = [m.group(0) for t in p.inline for m in _OUTSIDE_IN_CODE.finditer(t)]
    return [u for u in p.urls if _OUTSIDE.match(u)] + inline


def test_outside_refs_are_found():  # the checker itself: a CDN page is caught, a plain link is not
    cdn = '<link rel="stylesheet" href="https://cdn.jsdelivr.net/x.css"><script src="//unpkg.com/y.js"></script>'
    assert len(_outside_refs(cdn)) == 2
    assert _outside_refs('<style>a { background: url("https://x.org/a.png") }</style>')
    assert not _outside_refs('<a href="https://www.manythings.org/anki/">data</a><script src="/static/app.js">')


def _get_paths(routes) -> list[str]:
    """Every GET path, routers included (they keep their own route lists; no prefixes here)."""
    paths = []
    for r in routes:
        inner = getattr(getattr(r, "original_router", None), "routes", None)
        if inner is not None:
            paths += _get_paths(inner)
        elif "GET" in getattr(r, "methods", ()) and "{" not in r.path:
            paths.append(r.path)
    return paths


def test_no_served_page_loads_from_another_host(client):
    html_routes = _get_paths(client.app.routes)
    pages = {p: client.get(p) for p in html_routes}
    html = {p: r.text for p, r in pages.items() if r.headers.get("content-type", "").startswith("text/html")}
    assert {"/", "/docs"} <= set(html)
    for path, text in html.items():
        assert not _outside_refs(text), f"{path} loads {_outside_refs(text)}"
    for name in sorted(f.name for f in STATIC_DIR.iterdir()):
        text = client.get(f"/static/{name}").text
        refs = _outside_refs(text) if name.endswith(".html") else _OUTSIDE_IN_CODE.findall(text)
        assert not refs, f"/static/{name} loads {refs}"
    assert client.get("/redoc").status_code == 404  # FastAPI's CDN page is off


def test_docs_page_lists_every_operation(client):
    spec = client.get("/openapi.json").json()
    page = client.get("/docs").text
    for path in spec["paths"]:
        assert f"<code>{path}</code>" in page
    assert 'href="/openapi.json"' in page and 'id="TranslationsRequest"' in page and "503" in page
