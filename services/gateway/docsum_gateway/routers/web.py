"""The web page: `/` (sign in, submit, your tasks) and `/tasks/{task_id}` (one task, live), static files
from docsum_gateway/static (plain HTML, CSS and JS: no build step).

The page talks to the same REST API as everyone else, with the API key its user typed in (kept in the
browser's localStorage), and follows a task over SSE with a ticket. Every response of the gateway says
`X-Content-Type-Options: nosniff`; the page and its files also carry a Content-Security-Policy that
allows scripts, styles and connections from the gateway itself only (no inline script, no eval), so
a summary or a file name — untrusted text, always rendered as text — could not run even if it were
ever put into the page as markup.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

STATIC = Path(__file__).resolve().parent.parent / "static"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self';"
    " font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _page() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)


class SecurityHeaders:
    """nosniff on every response; the page's policy on the page and its static files."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        page = scope["path"] in ("/", "/webhooks") or scope["path"].startswith(("/static/", "/tasks/"))

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                extra = {"X-Content-Type-Options": "nosniff", **(PAGE_HEADERS if page else {})}
                headers += [
                    (k.lower().encode(), v.encode()) for k, v in extra.items() if k.lower().encode() not in present
                ]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


def install(app: FastAPI) -> None:
    app.add_middleware(SecurityHeaders)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_api_route("/", _page, methods=["GET"], include_in_schema=False)
    app.add_api_route("/tasks/{task_id}", _page, methods=["GET"], include_in_schema=False)
    app.add_api_route("/webhooks", _page, methods=["GET"], include_in_schema=False)
