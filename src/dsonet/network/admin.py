"""The operator's routes of the node's API (the token guards them as every route but /health):

    GET    /keys                   -> {"keys": [{node_id, reputation, banned, accepted, rejected, deferred,
                                                 last_error}]}
    POST   /keys/{node_id}/ban     -> its batches refused, its rows hidden, its held-back batches dropped
    POST   /keys/{node_id}/reset   -> the ban lifted, the initial reputation, its counts at zero
    GET    /quarantine             ?limit= -> {"count", "quarantined": [{seq, id, signer, text, why, quarantined_ms}]}
    DELETE /quarantine             ?seq=&seq= (none: all) -> {"dropped": n}

`dso node keys` and `dso node quarantine` call them.
"""

from __future__ import annotations

from fastapi import APIRouter, Query

from dsonet.network.node import Node


def admin_routes(node: Node) -> APIRouter:
    router = APIRouter(tags=["operator"])

    @router.get("/keys")
    async def keys() -> dict:
        return {"keys": await node.keys()}

    @router.post("/keys/{node_id}/ban")
    async def ban(node_id: str) -> dict:
        return await node.ban(node_id)

    @router.post("/keys/{node_id}/reset")
    async def reset(node_id: str) -> dict:
        return await node.reset(node_id)

    @router.get("/quarantine")
    async def quarantined(limit: int = Query(1000, ge=1, le=100_000)) -> dict:
        return {"count": node.library.quarantined, "quarantined": await node.quarantined(limit)}

    @router.delete("/quarantine")
    async def drop(seq: list[int] | None = Query(None, description="Rows to forget; none: all")) -> dict:
        return {"dropped": await node.drop_quarantined(seq)}

    return router
