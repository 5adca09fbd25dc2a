"""``GET /``: the node's page, read-only: the library, the peers, the recent rounds, and what an agent
would get injected for a question.

Every part is read where it lives: the library's rows a page at a time from its file
(`dsonet.network.web.rows`), the peers' standing from the node (`Node.keys`, `Node.peer_list`),
their history and the rounds from the node's journal (`dsonet.network.journal`). The question goes
through `Node.search`, the code ``POST /search`` runs (without issuing a retrieval id: the page
reports no outcome), and the system text is written by ``system_text``, the learner's template
(`dsonet.learn.context.system_text`; a higher layer, so the caller passes it in: `dso node start`
does). The page sends no script and loads nothing from elsewhere (`dsonet.network.web.html.CSP`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from dsonet.errors import DsoError
from dsonet.network.node import Node
from dsonet.network.web import html
from dsonet.network.web.rows import Filters, FilterError, read_page

SystemText = Callable[[list[str], list[str]], str]  # (this node's lessons, peers' lessons) -> the system message
FIELDS = ("ask", "ask_domain", "text", "domain", "signer", "before", "after")
ROUNDS_SHOWN = 30
PEERS_SHOWN, PLOT_PEERS = 100, 10  # peers in the table, and in the plot, the most recently heard from
HEADERS = {"Content-Security-Policy": html.CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "Cache-Control": "no-store", "X-Frame-Options": "DENY"}


def page_routes(node: Node, system_text: SystemText | None = None) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/", response_class=HTMLResponse)
    async def page(request: Request) -> HTMLResponse:
        state = {k: request.query_params.get(k, "").strip() for k in FIELDS}
        now_ms = int(time.time() * 1000)
        answer, ask_error = await _ask(node, state, system_text)
        try:
            filters = Filters(state["text"], state["domain"], state["signer"])
            rows = await asyncio.to_thread(read_page, node.library.path, filters, _cursor(state, "before"),
                                           _cursor(state, "after"))
            library_error = ""
        except FilterError as exc:
            rows = await asyncio.to_thread(read_page, node.library.path)
            library_error = str(exc)
        peers, history, rounds = await _standing(node)
        reputation: dict[str, float | str] = {k["node_id"]: "banned" if k["banned"] else k["reputation"] for k in peers}
        reputation.update({r.signer: node.soup.reputation.get(r.signer) for r in rows.rows
                           if r.signer not in reputation})
        reputation[node.node_id] = "own"
        body = "".join([
            html.header(node.node_id, f"{node.profile.encoder_id}, d = {node.profile.dim}", rows.total, len(peers),
                        (now_ms - node.started_ms) / 1000),
            html.ask_section(state, answer, ask_error),
            html.library_section(state, rows, reputation, library_error, now_ms),
            html.peers_section(peers, history, node.soup.reputation.floor, now_ms, PEERS_SHOWN),
            html.rounds_section(rounds, now_ms),
        ])
        status = 400 if ask_error or library_error else 200
        return HTMLResponse(html.document(f"dsonet node {node.node_id[:12]}", body), status, headers=HEADERS)

    return router


async def _ask(node: Node, state: dict[str, str], system_text: SystemText | None) -> tuple[dict | None, str]:
    """What ``POST /search`` would answer for the question, and the system message an agent would get."""
    question = state["ask"]
    if not question:
        return None, ""
    if len(question) > 4096 or len(state["ask_domain"]) > 64:
        return None, "ask/ask_domain: at most 4,096 / 64 characters (what POST /search takes)"
    try:
        hits = await node.search(query=question, domain=state["ask_domain"] or None)
    except DsoError as exc:
        return None, str(exc)
    own = [h.experience.text for h in hits if h.experience.provenance.node_id == node.node_id]
    peers = [h.experience.text for h in hits if h.experience.provenance.node_id != node.node_id]
    text = system_text(own, peers) if system_text is not None else None
    return {"hits": list(hits), "threshold": hits.threshold, "best_score": hits.best_score, "system_text": text}, ""


async def _standing(node: Node) -> tuple[list[dict], dict, list]:
    """The peers most recently heard from (`PEERS_SHOWN`), known now or logged before (a restart empties
    the node's counters, not its journal), with their reputation points (the first `PLOT_PEERS` for
    the plot, the rest for their sparklines), and the latest rounds."""
    keys = {k["node_id"]: k for k in await node.keys()}
    seen = {p["node_id"]: p["last_seen_ms"] for p in node.peer_list()}
    journal = node.journal
    totals, rounds = await asyncio.to_thread(lambda: (journal.totals(PEERS_SHOWN), journal.rounds(ROUNDS_SHOWN)))
    recent = {k: max(seen.get(k, 0), totals.get(k, {}).get("last_ms", 0)) for k in set(keys) | set(totals)}
    shown = sorted((k for k in recent if k != node.node_id), key=lambda k: (-recent[k], k))[:PEERS_SHOWN]
    plotted, rest = shown[:PLOT_PEERS], shown[PLOT_PEERS:]
    history = await asyncio.to_thread(lambda: {**journal.history(plotted, latest=html.PLOT_POINTS),
                                               **journal.history(rest, latest=html.SPARK_POINTS)})
    peers = []
    for node_id in shown:
        known = keys.get(node_id, {"node_id": node_id, "reputation": round(node.soup.reputation.get(node_id), 4),
                                   "banned": False})
        total = totals.get(node_id, {})
        peers.append({**known, "last_seen_ms": recent[node_id], "admitted": total.get("admitted", 0),
                      "refused": total.get("refused", {}), "plotted": node_id in plotted})
    return peers, history, rounds


def _cursor(state: dict[str, str], name: str) -> int | None:
    value = state[name]
    if not value:
        return None
    if not value.isdigit():
        raise FilterError(f"{name}: {value[:20]!r} is not a row number; follow the page's older/newer links")
    return int(value)
