"""The node's HTTP API for agents (FastAPI; its routes listed at /docs, offline).

    POST   /experiences        {text, domain?, confidence?, vector?, tags?, scope?}  -> 201 the stored experience
    GET    /experiences        ?domain=&limit= -> {"experiences": [...]} (one per id, sorted by id);
                               &offset=&signer= -> a page, newest first, and "total"
    GET    /experiences/{id}   -> the experience, or 404
    DELETE /experiences/{id}   -> {"deleted": true} (a signed tombstone is published), or 404
    POST   /experiences/{id}/evidence  {episodes?, agents?} -> the lesson, its evidence grown by them (learned
                               from agents' traffic; published again), or 404 where the node holds no own copy
    POST   /search             {query | vector, k?, min_similarity?, max_tokens?, domain?, tags?, environment?}
                               -> {"retrieval_id", "hits": [...], "threshold", "best_score", "held_back"}
                               (a hit: the experience's fields, score, members, sources, fit; `Hit.to_json`)
                               (environment: the asker's pins; lessons whose scope contradicts it are
                               held back, each {id, text, reason}; `dsonet.scope`)
                               (min_similarity omitted: the library's calibrated threshold; an empty
                               search has retrieval_id null, and best_score says how near it came)
    POST   /outcomes           {retrieval_id, helped | lessons: {id: helped}, environment?} -> {"recorded": n}
                               (ids this node issued, once)
    GET    /stats  /peers  /metrics (Prometheus text)  /health (no token needed; counts quarantined rows)
    GET    /keys, POST /keys/{id}/ban|reset, GET|DELETE /quarantine: the operator's (`dsonet.network.admin`)
    GET    /                   the node's page for people, read-only (`dsonet.network.web`): a browser
                               opens /?token=<token> once and reads it on a page-only cookie

``/docs`` is a page listing every route, offline (no CDN), beside ``/openapi.json``; a browser opens both
with the page's login. Every request except /health needs ``Authorization: Bearer <token>`` (or, for the
page and the docs, the page's cookie) when the node was given a token (mandatory when it listens beyond
loopback). Bodies over ``max_body_bytes`` are refused with 413 before they are read; bad input gets a 4xx
whose ``detail`` names the field and what to send instead; nothing is stored.
"""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from dsonet import __version__
from dsonet.asgi import BearerToken, BodyLimit
from dsonet.errors import DsoError
from dsonet.experience import MAX_EVIDENCE
from dsonet.library import StorageError
from dsonet.library.errors import DamagedFile
from dsonet.library.policy import MAX_TOKENS, K
from dsonet.library.retrievals import UnknownRetrieval
from dsonet.network.admin import admin_routes
from dsonet.network.node import Node, NodeError
from dsonet.network.transport import TransportError
from dsonet.network.web import PageGate, SystemText, page_routes
from dsonet.network.web.docs import docs_routes
from dsonet.network.web.page import HEADERS as PAGE_HEADERS
from dsonet.scope import MAX_ENVIRONMENT_PINS, MAX_LESSON_PINS, Scope

DEFAULT_MAX_BODY = 1024 * 1024  # a 7680-dim vector as JSON is ~150 KB; 1 MiB leaves room, refuses floods


class SubmitRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    text: str = Field(min_length=1, max_length=512, description="One experience, at most 32 words: 'When X, do Y'")
    domain: str = Field("general", max_length=64, description="Dotted lower-case tag, e.g. math.geometry")
    confidence: float = Field(0.5, ge=0.0, le=1.0)
    vector: list[float] | None = Field(None, description="The text's embedding in the network profile's space; "
                                                         "omit it to let the node encode the text")
    tags: list[str] = Field(default_factory=list, max_length=8, description="This node's scopes for the lesson, "
                            "e.g. agent:reviewer, project:billing (kept here, never sent to peers)")
    scope: list[str] = Field(default_factory=list, max_length=MAX_LESSON_PINS, description="Where the lesson "
                             "holds: pins name==version of the packages it names and of python, e.g. numpy==2.4.6 "
                             "(signed with it); none: everywhere")


class EvidenceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    episodes: int = Field(1, ge=0, le=MAX_EVIDENCE, strict=True, description="More episodes of agents' traffic "
                          "that gave the lesson")
    agents: int = Field(0, ge=0, le=MAX_EVIDENCE, strict=True, description="More distinct agents among them")


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    query: str | None = Field(None, min_length=1, max_length=4096)
    vector: list[float] | None = None
    k: int = Field(K, ge=1, le=100)
    min_similarity: float | None = Field(None, ge=-1.0, le=1.0, description="Cosine a hit must reach; omit it "
                                         "for the threshold calibrated for the node's space")
    max_tokens: int = Field(MAX_TOKENS, ge=1, le=1_000_000)
    domain: str | None = Field(None, max_length=64)
    tags: list[str] = Field(default_factory=list, max_length=8, description="Only lessons carrying every one")
    environment: list[str] | None = Field(None, max_length=MAX_ENVIRONMENT_PINS, description="The asker's "
                                          "environment, pins name==version (e.g. numpy==1.26.4, python==3.11.9): "
                                          "lessons whose scope contradicts it are held back, those that fit first")


class OutcomeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    retrieval_id: str = Field(min_length=1, max_length=64, description="The id a search returned with its hits")
    helped: bool | None = Field(None, description="Whether the task the lessons were retrieved for succeeded "
                                                  "(every lesson of the retrieval); or give lessons")
    lessons: dict[str, bool] | None = Field(None, max_length=100, description="Experience id -> whether that lesson "
                                            "helped; lessons not named get no outcome")
    environment: list[str] | None = Field(None, max_length=MAX_ENVIRONMENT_PINS, description="Where the lessons "
                                          "were used (pins name==version), for a search made without one: harm "
                                          "moves only signers whose lessons' scope holds there")


def create_app(node: Node, token: str | None = None, max_body_bytes: int = DEFAULT_MAX_BODY,
               manage_node: bool = True, system_text: SystemText | None = None) -> FastAPI:
    """The API over one node. ``manage_node``: start the node with the app and close it
    (flushing what is pending) when the server shuts down. ``system_text``: the learner's injection
    template, for the page to show what an agent would get (`dsonet.network.web.page`)."""

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        if manage_node:
            await node.start()
        try:
            yield
        finally:
            if manage_node:
                await node.close()

    # /docs is the node's own offline page (`dsonet.network.web.docs`): Swagger UI's assets come from a CDN
    app = FastAPI(title="dsonet node", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Submit and search experiences; the node shares them with its network.")
    @app.exception_handler(DsoError)
    async def refused(_: Request, exc: DsoError) -> JSONResponse:
        # the network or the disk failing is the node's trouble (503: retry), anything else the caller's (400)
        trouble = isinstance(exc, (TransportError, StorageError, DamagedFile))
        return JSONResponse({"detail": str(exc)}, status_code=503 if trouble else 400)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        # one readable line per problem, without echoing the input (it may hold NaN, which JSON cannot carry)
        problems = ["{}: {}".format(".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body", e.get("msg"))
                    for e in exc.errors()]
        return JSONResponse({"detail": "; ".join(problems)}, status_code=422)

    @app.post("/experiences", status_code=201)
    async def submit(req: SubmitRequest) -> dict:
        exp = await node.submit(req.text, req.domain, req.confidence, req.vector, tuple(req.tags),
                                Scope.parse(req.scope))
        return exp.to_dict()

    @app.get("/experiences")
    async def listing(domain: str | None = None, limit: int = Query(1000, ge=1, le=10_000),
                      signer: str | None = Query(None, max_length=64), offset: int | None = Query(None, ge=0)) -> dict:
        """Experiences held (one per id, sorted by id), of one domain or all: what a learner compares
        its proposals with. With ``offset`` or ``signer`` (a prefix of its id): a page, newest first, and
        ``total``, how many match (`dso list --node`)."""
        if offset is None and signer is None:
            exps = [e for e in await node.all() if domain is None or e.domain == domain][:limit]
            return {"experiences": [e.to_dict() for e in exps]}
        total, page = await node.listing(domain, signer, limit, offset or 0)
        return {"experiences": [e.to_dict() for e in page], "total": total}

    @app.get("/experiences/{exp_id}")
    async def get(exp_id: str) -> dict:
        exp = await node.get(exp_id)
        if exp is None:
            raise HTTPException(404, f"no experience {exp_id[:80]!r} in this node's library")
        return exp.to_dict()

    @app.post("/experiences/{exp_id}/evidence")
    async def evidence(exp_id: str, req: EvidenceRequest) -> dict:
        """More evidence for a lesson this node holds as its own, learned from agents' traffic (`dso proxy
        --learn`): its counts grow, and it is published again with them."""
        exp = await node.add_evidence(exp_id, req.episodes, req.agents)
        if exp is None:
            raise HTTPException(404, f"no lesson {exp_id[:80]!r} of this node's own in its library")
        return exp.to_dict()

    @app.delete("/experiences/{exp_id}")
    async def delete(exp_id: str) -> dict:
        if not await node.delete(exp_id):
            raise HTTPException(404, f"no experience {exp_id[:80]!r} in this node's library")
        return {"deleted": True, "id": exp_id}

    @app.post("/search")
    async def search(req: SearchRequest) -> dict:
        env = None if req.environment is None else Scope.parse(req.environment, limit=MAX_ENVIRONMENT_PINS)
        hits = await node.recall(req.query, req.vector, req.k, req.min_similarity, req.max_tokens, req.domain,
                                 tuple(req.tags), env)
        return {"retrieval_id": hits.retrieval_id, "hits": [h.to_json() for h in hits], "threshold": hits.threshold,
                "best_score": hits.best_score, "held_back": [b.to_dict() for b in hits.held_back]}

    @app.post("/outcomes")
    async def outcome(req: OutcomeRequest) -> dict:
        """Report whether the lessons of one search helped: counted on each lesson (eviction by
        usefulness) and on each source peer's reputation. Only ids this node issued count, once."""
        try:
            env = None if req.environment is None else Scope.parse(req.environment, limit=MAX_ENVIRONMENT_PINS)
            return {"recorded": await node.outcome(req.retrieval_id, req.helped, req.lessons, env)}
        except UnknownRetrieval as exc:
            raise HTTPException(404, str(exc)) from None
        except NodeError as exc:
            raise HTTPException(422, str(exc)) from None

    @app.get("/stats")
    async def stats() -> dict:
        return await node.stats()

    @app.get("/peers")
    async def peers() -> dict:
        return {"peers": node.peer_list()}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(node.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/health")
    async def health() -> dict:
        damage = node.library.damage if node.library else None  # a page found broken while serving
        problem = str(damage or "") or node.transport.problem  # or the stream deleted and made again
        status = "closing" if node.closed else "damaged" if damage else "degraded" if problem else "ok"
        return {"status": status, "node_id": node.node_id,
                "quarantined_rows": node.library.quarantined if node.library else 0,  # damaged, set aside
                **({"problem": problem} if problem else {})}

    app.include_router(admin_routes(node))
    app.include_router(page_routes(node, system_text))
    app.include_router(docs_routes(app.openapi, PAGE_HEADERS))

    # the token is checked, then the body's size, before the app reads a byte of the body; the page
    # alone may also be read on its cookie (`dsonet.network.web.gate`)
    limited = BodyLimit(app, max_body_bytes)
    return PageGate(BearerToken(limited, token), limited, token)

