"""OpenAI's error shape, for the servers here that speak the OpenAI API (`dso proxy`, `dso llm serve`).

    {"error": {"message": "...", "type": "invalid_request_error", "param": "messages", "code": null}}

SDK clients raise these with our message and the field at fault (``param``), not a bare
'Error code: 400'. The guards of `dsonet.asgi` take `openai_error_body` as their ``error_body``.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

# OpenAI's (type, code) by status, where not (invalid_request_error, None); a caller may name a more precise
# code (model_not_found, context_length_exceeded)
ERROR_KINDS = {401: ("invalid_request_error", "invalid_api_key"), 413: ("invalid_request_error", "request_too_large"),
               500: ("server_error", None), 502: ("upstream_error", None), 504: ("upstream_error", "timeout")}


def openai_error(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    """OpenAI's error object; ``param`` names the request field at fault, ``code`` overrides the status's."""
    kind, default_code = ERROR_KINDS.get(status, ("invalid_request_error", None))
    return {"error": {"message": message, "type": kind, "param": param, "code": code or default_code}}


def openai_response(status: int, message: str, param: str | None = None, code: str | None = None) -> JSONResponse:
    return JSONResponse(openai_error(status, message, param, code), status_code=status)


def openai_error_body(status: int, message: str) -> bytes:
    """The token and body-size guards' refusals (`dsonet.asgi`), in OpenAI's shape."""
    return json.dumps(openai_error(status, message)).encode()


async def read_json_object(request: Request) -> dict[str, Any] | JSONResponse:
    """The request's body as a JSON object, or the 400 that says why it is not one."""
    try:
        body = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return openai_response(400, f"body is not JSON ({exc}); send the OpenAI request object")
    if not isinstance(body, dict):
        return openai_response(400, "body must be a JSON object (the OpenAI request)")
    return body
