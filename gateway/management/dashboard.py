"""The web dashboard: static files (``gateway/management/dashboard/``) under ``/dashboard/``.

The page is plain HTML, CSS and JavaScript modules with no build step and nothing fetched from
elsewhere; it reads and changes the broker only through the management API (``/api/``), with
the HTTP basic credentials the user types into its login form. ``/`` redirects here.
"""
from __future__ import annotations

from importlib import resources

from twisted.web import resource, util

CONTENT_TYPES = {
    ".html": b"text/html; charset=utf-8",
    ".js": b"text/javascript; charset=utf-8",
    ".css": b"text/css; charset=utf-8",
    ".svg": b"image/svg+xml",
    ".png": b"image/png",
    ".ico": b"image/x-icon",
}
# Everything the page loads comes from this origin; no inline scripts, no framing.
CSP = (b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")


def static_dir():
    """The folder of the dashboard's files, inside the installed package."""
    return resources.files("gateway.management") / "dashboard"


class Dashboard(resource.Resource):
    """``GET /dashboard/<file>``: the files of :func:`static_dir`, ``index.html`` for the folder."""

    isLeaf = True

    def render_GET(self, request):
        if not request.path.endswith(b"/") and not request.postpath:  # /dashboard -> /dashboard/
            return util.redirectTo(b"/dashboard/", request)
        name = b"/".join(request.postpath).decode("utf-8", "replace") or "index.html"
        suffix = name[name.rfind("."):] if "." in name else ""
        # one level of plain file names only: nothing can walk out of the folder
        if "/" in name or "\\" in name or name.startswith(".") or suffix not in CONTENT_TYPES:
            return self._missing(request)
        entry = static_dir() / name
        try:
            body = entry.read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return self._missing(request)
        request.setHeader(b"content-type", CONTENT_TYPES[suffix])
        request.setHeader(b"cache-control", b"no-cache")  # revalidate: a newer broker serves newer files
        request.setHeader(b"x-content-type-options", b"nosniff")
        request.setHeader(b"content-security-policy", CSP)
        request.setHeader(b"referrer-policy", b"no-referrer")
        return body

    @staticmethod
    def _missing(request) -> bytes:
        request.setResponseCode(404)
        request.setHeader(b"content-type", b"text/plain; charset=utf-8")
        return b"not found\n"


class RootRedirect(resource.Resource):
    """``GET /``: to the dashboard."""

    isLeaf = True

    def render(self, request):
        return util.redirectTo(b"/dashboard/", request)
