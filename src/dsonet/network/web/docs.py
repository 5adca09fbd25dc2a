"""``GET /docs``: the API's description for people, offline. FastAPI's Swagger UI loads its script and
style from a CDN, which a node without internet (or behind a strict network) never reaches, and the
page's policy runs no script anyway; so this page lists every route of the OpenAPI document, with
each request body's fields, in the node page's own markup, and links the document (``/openapi.json``)
for tools that read it. Both sit behind the page's login (`dsonet.network.web.gate`).
"""

from __future__ import annotations

from typing import Callable

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from dsonet.network.web import html
from dsonet.network.web.html import e

METHODS = ("get", "post", "put", "patch", "delete")


def docs_routes(openapi: Callable[[], dict], headers: dict[str, str]) -> APIRouter:
    """``openapi``: the app's own document builder (`FastAPI.openapi`), read at the first request."""
    router = APIRouter(include_in_schema=False)

    @router.get("/docs", response_class=HTMLResponse)
    async def docs() -> HTMLResponse:
        spec = openapi()
        return HTMLResponse(html.document(f"{spec['info']['title']} API", render(spec)), headers=headers)

    return router


def render(spec: dict) -> str:
    """The routes of an OpenAPI document as a table: method, path, what it does, the body's fields."""
    info, schemas = spec["info"], spec.get("components", {}).get("schemas", {})
    rows = []
    for path, item in spec["paths"].items():
        for method in METHODS:
            op = item.get(method)
            if op is None:
                continue
            params = [f"{p['name']} ({p['in']})" for p in op.get("parameters", [])]
            about = op.get("description") or op.get("summary") or ""
            rows.append(f'<tr><td><code>{method.upper()}</code></td><td><code>{e(path)}</code></td>'
                        f'<td>{e(about)}</td><td>{e(", ".join(params))}{_body(op, schemas)}</td></tr>')
    return (f'<header><h1>{e(info["title"])} API <span class="muted">{e(info.get("version", ""))}</span></h1>'
            f'<p>{e(info.get("description", ""))} The machine-readable description: '
            f'<a href="/openapi.json">/openapi.json</a> (OpenAPI {e(spec.get("openapi", ""))}). '
            f'Every route but <code>/health</code> needs <code>Authorization: Bearer &lt;token&gt;</code> '
            f'when the node has one.</p></header>'
            '<table><tr><th>method</th><th>path</th><th>what it does</th><th>parameters, body fields</th></tr>'
            + "".join(rows) + "</table>")


def _body(op: dict, schemas: dict) -> str:
    """A JSON body's fields, with their types and descriptions, from the schema it references."""
    ref = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {}).get("$ref", "")
    schema = schemas.get(ref.rsplit("/", 1)[-1], {})
    required = set(schema.get("required", []))
    fields = []
    for name, prop in schema.get("properties", {}).items():
        kind = prop.get("type") or " | ".join(p.get("type", "?") for p in prop.get("anyOf", []))
        note = f": {prop['description']}" if prop.get("description") else ""
        fields.append(f"<li><code>{e(name)}</code> {e(kind)}{' (required)' if name in required else ''}{e(note)}</li>")
    return f"<ul>{''.join(fields)}</ul>" if fields else ""
