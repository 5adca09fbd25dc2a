"""The node's page as HTML: pure functions from what the node holds to escaped markup.

Lesson texts, domains and reasons come from peers, and any peer can publish anything: every such
string goes through `e` (``html.escape`` with quotes), in element text and attribute values alike;
nothing from a peer is ever placed in a URL scheme, a tag name, a script or a style. Links are built
with ``urlencode``. The style sheet is one constant whose hash the Content-Security-Policy names
(`CSP`): the page runs no script at all and loads nothing from anywhere.
"""

from __future__ import annotations

import base64
import hashlib
import time
from html import escape
from typing import Sequence
from urllib.parse import urlencode

from dsonet.network.web import svg
from dsonet.network.web.rows import Page

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:0 16px;color:#222}
header{border-bottom:1px solid #ddd;margin-bottom:8px}
h1{font-size:20px;margin:12px 0 4px}h2{font-size:17px;margin:20px 0 6px;border-bottom:1px solid #eee}
nav a{margin-right:12px}code,pre{font:12px/1.4 ui-monospace,monospace}
pre{background:#f5f5f5;padding:8px;white-space:pre-wrap;word-break:break-word;border:1px solid #ddd}
table{border-collapse:collapse;width:100%;margin:6px 0}th,td{border-bottom:1px solid #eee;padding:3px 6px;
text-align:left;vertical-align:top}th{background:#f7f7f7;font-weight:600}td.n{text-align:right}
td.text{max-width:520px;word-break:break-word}form{margin:6px 0}input[type=text]{width:180px}
input[name=ask]{width:480px}.muted{color:#777}.bad{color:#b00}.own{color:#2a7}.error{color:#b00;font-weight:600}
.legend span{margin-right:10px}.legend b{display:inline-block;width:10px;height:10px;margin-right:3px}
"""
PLOT_POINTS, SPARK_POINTS = 200, 60  # per peer, the latest: a line plot 640 px wide, a sparkline 120 px
CSS_HASH = base64.b64encode(hashlib.sha256(CSS.encode()).digest()).decode()
# Nothing but the page's own style sheet, data: images, and forms back to this node.
CSP = (f"default-src 'none'; style-src 'sha256-{CSS_HASH}'; img-src data:; form-action 'self'; "
       "base-uri 'none'; frame-ancestors 'none'")


def e(value: object) -> str:
    return escape(str(value), quote=True)


def short(node_id: str) -> str:
    return node_id[:12]


def when(ms: int, now_ms: int | None = None) -> str:
    """How long ago, in the largest unit that says it ("3 min", "2 h", "5 d")."""
    if not ms:
        return "never"
    return svg.span(max(0.0, (now_ms if now_ms is not None else time.time() * 1000) - ms))


def stamp(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000)) if ms else ""


def document(title: str, body: str) -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{e(title)}</title>'
            f'<style>{CSS}</style></head><body>{body}</body></html>')


def header(node_id: str, profile: str, rows: int, peers: int, uptime_s: float) -> str:
    return (f'<header><h1>dsonet node <code id="node-id" title="{e(node_id)}">{e(short(node_id))}</code></h1>'
            f'<p class="muted">profile {e(profile)} · {rows:,} rows held · {peers} peers · '
            f'up {uptime_s / 60:.0f} min · read-only</p>'
            f'<nav><a href="#ask">Ask</a><a href="#library">Library</a><a href="#peers">Peers</a>'
            f'<a href="#rounds">Rounds</a></nav></header>')


def hidden(state: dict[str, str], keep: Sequence[str]) -> str:
    """The other forms' fields, so that one form's search keeps the rest of the page as it was."""
    return "".join(f'<input type="hidden" name="{e(k)}" value="{e(state[k])}">' for k in keep if state.get(k))


def ask_section(state: dict[str, str], answer: dict | None, error: str = "") -> str:
    form = (f'<form id="ask-form" method="get" action="/#ask"><label>Question <input type="text" name="ask" '
            f'value="{e(state.get("ask", ""))}" maxlength="4096"></label> <label>domain <input type="text" '
            f'name="ask_domain" value="{e(state.get("ask_domain", ""))}" maxlength="64"></label> '
            f'{hidden(state, ("text", "domain", "signer"))}<button>Show what an agent gets</button></form>')
    out = [f'<section id="ask"><h2>What an agent would get</h2>{form}']
    if error:
        out.append(f'<p class="error" id="ask-error">{e(error)}</p>')
    if answer is not None:
        hits, threshold, best = answer["hits"], answer["threshold"], answer["best_score"]
        out.append(f'<p id="ask-summary">{len(hits)} lesson(s) passed the threshold '
                   f'<b id="threshold">{_num(threshold)}</b>; best score <b>{_num(best)}</b>.</p>')
        if hits:
            out.append('<table id="ask-hits"><tr><th>score</th><th>domain</th><th>scope</th><th>signer</th>'
                       '<th>lesson</th></tr>')
            out += [f'<tr data-lesson-id="{e(h.experience.id)}"><td class="n">{h.score:.3f}</td>'
                    f'<td>{e(h.experience.domain)}</td><td class="scope">{e(str(h.experience.scope))}</td>'
                    f'<td><code>{e(short(h.experience.provenance.node_id))}</code>'
                    f'</td><td class="text">{e(h.experience.text)}</td></tr>' for h in hits]
            out.append("</table>")
        system = answer["system_text"]
        out.append('<p>The final system text:</p>' + (f'<pre id="system-text">{e(system)}</pre>' if system is not None
                   else '<p class="muted" id="system-text">not shown: this node was started without the learner\'s '
                        'injection template (`dso node start` passes it)</p>'))
    out.append("</section>")
    return "".join(out)


def library_section(state: dict[str, str], page: Page, reputation: dict[str, float | str], error: str = "",
                    now_ms: int | None = None) -> str:
    form = (f'<form id="library-form" method="get" action="/#library"><label>text <input type="text" name="text" '
            f'value="{e(state.get("text", ""))}"></label> <label>domain <input type="text" name="domain" '
            f'value="{e(state.get("domain", ""))}"></label> <label>signer <input type="text" name="signer" '
            f'value="{e(state.get("signer", ""))}" placeholder="hex prefix"></label> '
            f'{hidden(state, ("ask", "ask_domain"))}<button>Filter</button></form>')
    out = [f'<section id="library"><h2>Library</h2>{form}']
    if error:
        out.append(f'<p class="error" id="library-error">{e(error)}</p>')
    out.append(f'<p class="muted">{page.total:,} rows in all, newest first; {len(page.rows)} on this page.</p>')
    out.append('<table id="lessons"><tr><th>lesson</th><th>domain</th><th>scope</th><th>signer</th><th>copies</th>'
               '<th>signer rep.</th><th>helped</th><th>harmed</th><th>age</th></tr>')
    for r in page.rows:
        rep = reputation.get(r.signer, "")
        rep_cell = '<span class="own">own</span>' if rep == "own" else (
            f'<span class="bad">{e(rep)}</span>' if isinstance(rep, str) else _num(rep))
        out.append(f'<tr class="lesson" data-lesson-id="{e(r.id)}" data-seq="{r.seq}"><td class="text">{e(r.text)}</td>'
                   f'<td>{e(r.domain)}</td><td class="scope">{e(r.scope)}</td>'
                   f'<td><code title="{e(r.signer)}">{e(short(r.signer))}</code></td>'
                   f'<td class="n">{r.copies}</td><td class="n">{rep_cell}</td><td class="n">{r.helped}</td>'
                   f'<td class="n">{r.harmed}</td><td title="authored {e(stamp(r.authored_ms))}">'
                   f'{when(r.added_ms, now_ms)}</td></tr>')
    out.append("</table>")
    if page.window is not None:
        more = " older → looks on below them" if page.older is not None else " that is every row"
        out.append(f'<p class="muted" id="window">This page looked through rows {page.window[0]:,} to '
                   f'{page.window[1]:,} (by row number) for the filter;{more}.</p>')
    out.append('<p id="pager">')
    base = {k: v for k, v in state.items() if k in ("text", "domain", "signer", "ask", "ask_domain") and v}
    if page.newer is not None:
        out.append(f'<a id="newer" href="/?{e(urlencode({**base, "after": page.newer}))}#library">← newer</a> ')
    if page.older is not None:
        out.append(f'<a id="older" href="/?{e(urlencode({**base, "before": page.older}))}#library">older →</a>')
    out.append("</p></section>")
    return "".join(out)


def peers_section(peers: list[dict], history: dict[str, list], floor: float, now_ms: int | None = None,
                  most: int | None = None) -> str:
    """``peers``: node_id, reputation, banned, accepted, rejected, deferred, last_error, last_seen_ms,
    plotted, and since the journal began: admitted (rows), refused {reason: rows}. ``history``: their
    reputation points; ``most``: how many a page shows (said when reached)."""
    out = ['<section id="peers"><h2>Peers</h2>']
    if most is not None and len(peers) >= most:
        out.append(f'<p class="muted">The {most} peers most recently heard from.</p>')
    plotted = [p["node_id"] for p in peers if p.get("plotted") and history.get(p["node_id"])]
    if plotted:
        series = {short(k): [(p.at_ms, p.reputation) for p in history[k]] for k in plotted}
        out.append(f'<p class="muted">Reputation of the {len(plotted)} peers most recently heard from, each one\'s '
                   f'latest {PLOT_POINTS} moves (after rounds and reported outcomes); the dashed line is the floor '
                   f'under which a peer\'s lessons are hidden.</p>')
        out.append(svg.line_plot(series, floor=floor))
        out.append('<p class="legend">' + "".join(f'<span><b>{_swatch(i)}</b>{e(name)}</span>'
                                                   for i, name in enumerate(series)) + "</p>")
    else:
        out.append('<p class="muted">No reputation history yet: points are logged after each round and outcome.</p>')
    out.append('<table id="peer-table"><tr><th>peer</th><th>reputation</th><th>history</th><th>batches admitted</th>'
               '<th>rows admitted</th><th>deferred</th><th>rejected batches</th><th>refused rows, why</th>'
               '<th>last seen</th></tr>')
    for p in peers:
        colour = svg.colour(plotted.index(p["node_id"])) if p["node_id"] in plotted else "#999"
        spark = svg.sparkline([pt.reputation for pt in history.get(p["node_id"], [])[-SPARK_POINTS:]], colour_=colour)
        why = "; ".join(f"{e(reason)} ×{n}" for reason, n in sorted(p.get("refused", {}).items()))
        last = f'<br><span class="muted">last: {e(p["last_error"])}</span>' if p.get("last_error") else ""
        banned = ' <span class="bad">banned</span>' if p.get("banned") else ""
        out.append(f'<tr class="peer" data-node-id="{e(p["node_id"])}"><td><code title="{e(p["node_id"])}">'
                   f'{e(short(p["node_id"]))}</code>{banned}</td><td class="n">{_num(p["reputation"])}</td>'
                   f'<td>{spark}</td><td class="n">{p.get("accepted", 0)}</td><td class="n">{p.get("admitted", 0)}</td>'
                   f'<td class="n">{p.get("deferred", 0)}</td><td class="n">{p.get("rejected", 0)}</td>'
                   f'<td>{why}{last}</td><td>{when(p.get("last_seen_ms", 0), now_ms)}</td></tr>')
    out.append("</table></section>")
    return "".join(out)


def rounds_section(rounds: list, now_ms: int | None = None) -> str:
    out = ['<section id="rounds"><h2>Recent rounds</h2>']
    if not rounds:
        out.append('<p class="muted">No round logged yet.</p></section>')
        return "".join(out)
    out.append(svg.bars([(f"round {r.seq}", r.admitted, sum(r.refused.values())) for r in reversed(rounds)]))
    out.append('<table id="round-table"><tr><th>round</th><th>when</th><th>batches</th><th>rows</th><th>admitted '
               '(new / held already)</th><th>refused, by rule</th><th>senders</th></tr>')
    for r in rounds:
        refused = "; ".join(f"{e(reason)} ×{n}" for reason, n in sorted(r.refused.items())) or "none"
        senders = ", ".join(f'<code title="{e(k)}">{e(short(k))}</code>' for k in sorted(r.senders))
        out.append(f'<tr class="round" data-seq="{r.seq}"><td class="n">{r.seq}</td><td title="{e(stamp(r.at_ms))}">'
                   f'{when(r.at_ms, now_ms)} ago</td><td class="n">{r.batches}</td><td class="n">{r.rows}</td>'
                   f'<td class="n">{r.admitted} ({r.new} / {r.held})</td><td>{refused}</td><td>{senders}</td></tr>')
    out.append("</table></section>")
    return "".join(out)


def refusal(status: int, message: str) -> str:
    """The page a browser gets instead of the node's (no token, a wrong one)."""
    return document("dsonet node: token needed", f"<h1>{status}</h1><p>{e(message)}</p>")


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _swatch(i: int) -> str:
    return (f'<svg width="10" height="10" xmlns="http://www.w3.org/2000/svg"><rect width="10" height="10" '
            f'fill="{svg.colour(i)}"/></svg>')
