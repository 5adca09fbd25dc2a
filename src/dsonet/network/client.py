"""A node's HTTP API as an experience store: what an agent in another process uses.

`NodeClient` is a `dsonet.library.contract.LessonStore` (add, search, outcome, delete, stats; get,
update, all), so `dso learn`, MCP and the proxy run unchanged against a remote node.
"""

from __future__ import annotations

import httpx

from dsonet.errors import DsoError
from dsonet.experience import Experience
from dsonet.library import Hit, Hits
from dsonet.library.hits import HeldBack
from dsonet.library.policy import MAX_TOKENS, K
from dsonet.library.retrievals import check_outcome
from dsonet.scope import Scope


class NodeClientError(DsoError):
    """The node answered with an error, or could not be reached."""


class NodeClient:
    def __init__(self, url: str, token: str | None = None, timeout_s: float = 60.0):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=url, headers=headers, timeout=timeout_s)

    def _call(self, method: str, path: str, **kwargs) -> dict:
        try:
            reply = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise NodeClientError(f"{method} {self.http.base_url}{path}: {exc}") from None
        if reply.status_code == 404:
            return {}
        if reply.status_code >= 400:
            raise NodeClientError(f"{method} {path}: {reply.status_code} {reply.text[:300]}")
        return reply.json()

    def add(self, text: str, domain: str = "general", confidence: float = 0.5, tags: tuple[str, ...] = (),
            scope: Scope = Scope(), provenance=None) -> Experience:
        """The node records itself as the provenance; ``provenance`` is accepted for the store protocol.
        ``tags`` and ``scope`` go only where given (a node older than them refuses the field)."""
        body = {"text": text, "domain": domain, "confidence": confidence, **({"tags": list(tags)} if tags else {}),
                **({"scope": scope.strings()} if scope else {})}
        return Experience.from_dict(self._call("POST", "/experiences", json=body))

    def all(self, domain: str | None = None) -> list[Experience]:
        """The node's experiences (one per id, at most 10,000), of one domain or all."""
        params = {"limit": 10_000, **({"domain": domain} if domain else {})}
        return [Experience.from_dict(e) for e in self._call("GET", "/experiences", params=params).get("experiences", [])]

    def listing(self, domain: str | None = None, signer: str | None = None, limit: int = 50,
                offset: int = 0) -> tuple[int, list[Experience]]:
        """`Library.listing` on the node: a page of its lessons, newest first, and how many match."""
        params = {"limit": limit, "offset": offset, **({"domain": domain} if domain else {}),
                  **({"signer": signer} if signer else {})}
        reply = self._call("GET", "/experiences", params=params)
        return int(reply.get("total", 0)), [Experience.from_dict(e) for e in reply.get("experiences", [])]

    def get(self, exp_id: str) -> Experience | None:
        data = self._call("GET", f"/experiences/{exp_id}")
        return Experience.from_dict(data) if data else None

    def add_evidence(self, exp_id: str, episodes: int = 1, agents: int = 0) -> Experience | None:
        """`Library.add_evidence` on the node, which publishes the lesson again; None where it holds no own copy."""
        data = self._call("POST", f"/experiences/{exp_id}/evidence", json={"episodes": episodes, "agents": agents})
        return Experience.from_dict(data) if data else None

    def delete(self, exp_id: str) -> bool:
        return bool(self._call("DELETE", f"/experiences/{exp_id}"))

    def update(self, exp_id: str, text: str) -> Experience:
        """The API has no update: a signed delete, then an add with the old domain and confidence."""
        old = self.get(exp_id)
        if old is None:
            raise NodeClientError(f"update: no experience {exp_id[:16]} on this node")
        self.delete(exp_id)
        return self.add(text, old.domain, old.confidence, scope=old.scope)

    def search(self, query: str, k: int = K, min_similarity: float | None = None, max_tokens: int = MAX_TOKENS,
               domain: str | None = None, tags: tuple[str, ...] = (), environment: Scope | None = None) -> Hits:
        """The node's hits, with the retrieval id it issued for them in ``hits.retrieval_id``: it names
        this search when its outcome is reported (`outcome`); None when nothing was found (there is
        nothing to judge). ``min_similarity`` None: the node's calibrated threshold, which the hits
        carry back with the best score it saw."""
        body = {"query": query, "k": k, "max_tokens": max_tokens, "domain": domain,
                **({} if min_similarity is None else {"min_similarity": min_similarity}),
                **({"tags": list(tags)} if tags else {}),
                **({} if environment is None else {"environment": environment.strings()})}
        reply = self._call("POST", "/search", json=body)
        hits = Hits([Hit.from_json(h) for h in reply.get("hits", [])],
                    reply.get("threshold", min_similarity), reply.get("best_score"), environment=environment,
                    held_back=tuple(HeldBack(**b) for b in reply.get("held_back", ())))
        hits.retrieval_id = reply.get("retrieval_id")
        return hits

    def outcome(self, retrieval_id: str, helped: bool | None = None, lessons: dict[str, bool] | None = None,
                environment: Scope | None = None) -> int:
        """Report whether the lessons of a search helped, all together or each (``lessons``: id -> helped);
        returns how many lessons were judged."""
        check_outcome(helped, lessons)
        body = {"retrieval_id": retrieval_id} | ({"helped": bool(helped)} if lessons is None else {"lessons": lessons}) \
            | ({} if environment is None else {"environment": environment.strings()})
        reply = self._call("POST", "/outcomes", json=body)
        if not reply:
            raise NodeClientError(f"outcome: the node did not issue retrieval {retrieval_id[:40]!r}, or its outcome "
                                  "is in already; report the id its search returned, once")
        return int(reply["recorded"])

    def stats(self) -> dict:
        return self._call("GET", "/stats")

    def peers(self) -> list[dict]:
        return self._call("GET", "/peers").get("peers", [])

    def close(self) -> None:
        self.http.close()
