"""DeltaSoup: a node's Byzantine-robust aggregation of received batches (federated-agents §5).

    submit(payload)  phase 1, verify: size, hash, Ed25519 signature, freshness |t − now| ≤ T_max,
                     replay, rate limit, reputation floor; a rejected payload raises and is not kept
    round()          our defences (re-encode every row of a sender not yet trusted, a sample of a
                     trusted one's; see `defences`) → phase 2 decompress → phase 3 filter (the
                     chosen rule; "deltasoup" is the paper's MAD filter) → source-share cap
                     → reputation (below). The result says which rows were re-encoded and matched
                     (``verified``) and which keys a sample caught lying (``caught``): a receiver
                     keeps the rest as sampled only and sets a caught key's aside
                     (`dsonet.network.ingest`). It hands on the decoded ê too (``vectors``), so
                     the receiver's merge does not decode them again.
    settle(batches)  the receiver stored them: from now on their replays are refused
    release(batches) the receiver could not store them: a redelivery is admitted again

Phase 4, the dedup merge, is not here: the admitted rows go into the node's library, whose
merged view (`dsonet.library.view.merge`) is the one merge rule, with this soup's reputation as trust.

Reputation (rep ← 0.9·rep + 0.1·r, one model for every caller: `Reputation`): `record_outcome`
(an agent's verdict on a key's lesson, r = helped) is the only way to `trusted`. After each round
a batch with at least half its rows admitted lifts its key towards `volume_ceiling` and no further;
a batch caught lying by re-encoding scores r = 0 and its key falls to `volume_ceiling` at most
(`Reputation.caught`); a batch the filter refused scores r = 0 only when
outcome-trusted keys other than its own (senders in the round, signers of the reference rows) are
at least `filter_agreement`, or its key's outcomes are more harmful than helpful: Sybil keys and
one copier's rows cannot make an honest key pay. The filter runs over all rows of the round at
once (the paper's phase 3).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from math import ceil

import numpy as np

from dsonet.aggregate.config import DeltaSoupConfig
from dsonet.aggregate.defences import cap_source_share, reencode_agreement
from dsonet.aggregate.errors import AggregationError
from dsonet.aggregate.phases import decompress_batches
from dsonet.aggregate.reputation import Reputation
from dsonet.aggregate.robust import sample_rows
from dsonet.aggregate.rules import make_rule
from dsonet.aggregate.verify import Gate, verify_payload
from dsonet.codec import CompressedBatch, Profile, compress
from dsonet.errors import DsoError
from dsonet.codec.reference import Reference

_CALLERS_OWN = "(the caller's reference)"  # a reference given as bare vectors: one voice, the caller's


@dataclass
class RoundResult:
    batches: list[CompressedBatch]
    keep: list[np.ndarray]  # one bool mask per batch, over its experiences (in batch order)
    rejected: list[tuple[str, str | None, str]]  # (node_id, experience id or None, reason)
    stats: dict = field(default_factory=dict)
    # per batch, rows whose text was re-encoded and matched its code; None: the defence is off (no
    # encoder), nothing was checked. Admitted rows outside it were stored on a sample's word only.
    verified: list[np.ndarray] | None = None
    caught: tuple[str, ...] = ()  # keys a re-encoding sample caught lying this round
    # per batch, its rows' ê (n_b, d) as this round decoded them, for the receiver's store and merge
    vectors: list[np.ndarray] = field(default_factory=list)
    # per batch, our encodings of its verified rows' texts (verified, d), in row order, where the round
    # was asked for them (`round`'s ``encodings``); None: not asked, or nothing was checked
    encodings: list[np.ndarray] | None = None


class DeltaSoup:
    """One node's aggregator. ``encoder`` (optional, the profile's encoder) enables the
    re-encoding defence; without it that defence is reported as off in ``stats``."""

    def __init__(self, config: DeltaSoupConfig = DeltaSoupConfig(), profiles: list[Profile] = (),
                 rule: str = "deltasoup", encoder=None):
        self.config, self.profiles, self.encoder = config, profiles, encoder
        self.rule = make_rule(rule, config.tau, config.eps)
        self.reputation = Reputation(config.rep_decay, config.rep_floor, config.rep_initial, config.volume_ceiling,
                                     config.trusted, config.conviction_p)
        self._gate = Gate(config, self.reputation)
        self._queue: list[CompressedBatch] = []
        self._rng = np.random.default_rng(config.seed)
        self.submit_rejections: dict[str, int] = {}

    def submit(self, payload: bytes, now_ms: int | None = None, received_ms: int | None = None) -> None:
        """Verify one payload and queue it for the next round; raises `BatchError` or
        `AggregationError` naming the reason when it is refused (`RateLimited` when only its
        timing is wrong). Freshness is judged at ``received_ms`` (default: now), the rate at now."""
        now = _now_ms(now_ms)
        try:
            batch = verify_payload(payload, now if received_ms is None else received_ms, self.config, self.profiles)
            if self._queue and batch.profile != self._queue[0].profile:
                raise AggregationError("profile", f"{batch.profile.to_dict()} differs from this round's "
                                       f"{self._queue[0].profile.to_dict()}; run one DeltaSoup per profile")
            self._gate.admit(batch, now)
        except DsoError as exc:
            self.submit_rejections[exc.reason] = self.submit_rejections.get(exc.reason, 0) + 1
            raise
        self._queue.append(batch)

    @property
    def queued_rows(self) -> int:
        """Rows waiting for the next round (a receiver bounds a round's memory with it)."""
        return sum(len(b) for b in self._queue)

    def settle(self, batches: list[CompressedBatch]) -> None:
        """The receiver stored (or refused for good) these batches of a round: replays of them are
        refused from now on, and they count against their senders' rate."""
        self._gate.settle(batches)

    def remember(self, seen: dict[str, int]) -> None:
        """Batch hashes (-> timestamp ms) the receiver stored before this soup existed: refused as replays."""
        self._gate.remember(seen)

    def release(self, batches: list[CompressedBatch]) -> None:
        """The receiver could not store these batches (e.g. its disk is full): they may come again."""
        self._gate.release(batches)

    def record_outcome(self, node_id: str, helped: bool) -> None:
        """Feed back whether an experience from ``node_id`` helped (no-op with feedback off)."""
        if self.config.feedback:
            self.reputation.outcome(node_id, helped)

    def round(self, now_ms: int | None = None, reference: Reference | np.ndarray | None = None,
              encodings: bool = False) -> RoundResult:
        """Aggregate every queued batch. ``reference``: trusted rows (e.g. the node's own library and
        its outcome-trusted peers', with their signers; bare (m, d) vectors count as one key's) added
        to the pool the robust center is estimated from. ``encodings``: hand back our encodings of the
        rows the re-encoding check verified (a receiver that keeps floats stores them)."""
        if reference is not None and not isinstance(reference, Reference):
            reference = Reference(np.asarray(reference, dtype=np.float32), (_CALLERS_OWN,) * len(reference))
        batches, self._queue = self._queue, []
        seconds: dict[str, float] = {}
        if not batches:
            return RoundResult([], [], [], {"batches": 0, "rows": 0, "admitted": 0})
        t = time.perf_counter()
        rows = decompress_batches(batches)
        n = len(rows.vectors)
        seconds["decompress"] = time.perf_counter() - t
        reason = np.full(n, "", dtype=object)

        t = time.perf_counter()
        liars, verified, ours = self._reencode(batches, rows.vectors)
        reason[np.isin(rows.batch, liars)] = "reencode: vector does not encode its text"
        seconds["reencode"] = time.perf_counter() - t

        t = time.perf_counter()
        alive = np.flatnonzero(reason == "")
        keep = np.zeros(n, dtype=bool)
        if len(alive):
            candidates = rows.vectors if len(alive) == n else rows.vectors[alive]  # no 300 MB copy when all pass
            pool = sample_rows(candidates, self.config.median_sample, self._rng)
            if reference is not None:
                pool = np.concatenate([pool, np.asarray(reference.vectors, dtype=np.float32)])
            admission = self.rule.admit(candidates, pool, self._scale_floor(batches, rows.batch[alive], reference))
            keep[alive] = admission.keep
            reason[alive[~admission.keep]] = f"filter: {self.rule.name}"
        seconds["filter"] = time.perf_counter() - t

        source_ids = [b.node_id for b in batches]
        if self.config.max_source_share is not None:
            domains = np.array([e.domain for b in batches for e in b.experiences], dtype=object)
            _, src_code = np.unique(np.asarray(source_ids, dtype=object)[rows.batch].astype(str), return_inverse=True)
            _, dom_code = np.unique(domains.astype(str), return_inverse=True)
            capped = cap_source_share(keep, src_code, dom_code, self.config.max_source_share, self._rng)
            reason[keep & ~capped] = "share cap: source over its share of the domain"
            keep = capped

        bounds = np.cumsum([len(b) for b in batches])[:-1]
        per_batch = np.split(keep, bounds)
        self._score(batches, per_batch, liars, () if reference is None else reference.signers)

        rejected = [(source_ids[rows.batch[i]], batches[rows.batch[i]].experiences[rows.row[i]].id, reason[i])
                    for i in np.flatnonzero(~keep)]
        stats = {
            "batches": len(batches), "rows": n, "admitted": int(keep.sum()),
            "rejected_by": {r: int((reason == r).sum()) for r in set(reason[~keep])},
            "defences": self._defence_state(), "seconds": seconds, "rule": self.rule.name,
        }
        return RoundResult(batches, per_batch, rejected, stats, verified,
                           tuple(dict.fromkeys(batches[i].node_id for i in liars)), np.split(rows.vectors, bounds),
                           ours if encodings else None)

    def _score(self, batches: list[CompressedBatch], per_batch: list[np.ndarray], liars: np.ndarray,
               reference_signers: tuple[str, ...]) -> None:
        """Reputation after the round (see the module doc); a liar already scored r = 0 when caught."""
        voices = set(reference_signers) | {b.node_id for b, mask in zip(batches, per_batch)
                                           if mask.any() and self.reputation.trusted(b.node_id)}
        need = self.config.filter_agreement
        for i, (b, mask) in enumerate(zip(batches, per_batch)):
            if i in liars:
                continue
            if mask.mean() >= 0.5:
                self.reputation.admitted(b.node_id)
            elif need is None or self.reputation.condemned(b.node_id) or len(voices - {b.node_id}) >= need:
                self.reputation.failed(b.node_id)

    def _scale_floor(self, batches: list[CompressedBatch], batch_of_row: np.ndarray,
                     reference: Reference | None) -> np.ndarray | None:
        """Per coordinate, the median over rows of the code scale α of its group (see DeltaSoupRule),
        the trusted reference rows' scales included (as their library stores them; bare vectors are
        compressed to see theirs): a majority of far rows (large α) cannot raise it."""
        if not self.config.scale_floor:
            return None
        used = np.unique(batch_of_row)
        scales = [batches[i].codes.scales for i in used]  # (rows, G) each
        profile = batches[used[0]].profile
        if reference is not None and reference.scales is not None:
            scales.append(np.asarray(reference.scales, np.float32))
        elif reference is not None and len(reference.vectors):
            scales.append(compress(np.asarray(reference.vectors, np.float32), profile.group_size,
                                   baseline=profile.baseline, rotation_seed=profile.rotation_seed).scales)
        return np.repeat(np.median(np.concatenate(scales), axis=0), profile.group_size).astype(np.float32)  # (d,)

    def _reencode(self, batches: list[CompressedBatch],
                  vectors: np.ndarray) -> tuple[np.ndarray, list[np.ndarray] | None, list[np.ndarray] | None]:
        """Indices of batches whose checked texts do not match their vectors (their keys are caught:
        `Reputation.caught`, and every row of the batch is refused, the unchecked ones too), and per
        batch which rows were checked and matched, and our encodings of those (both None with the
        defence off). Checked: every row of a sender not trusted by outcomes (`DeltaSoupConfig.trusted`),
        a sample of a trusted one's (`reencode_share`, at least `reencode_per_batch`): trust never
        skips the check, it thins it."""
        k = self.config.reencode_per_batch
        if k <= 0 or self.encoder is None:
            return np.zeros(0, dtype=np.int64), None, None
        checkable = [b.profile.encoder_id == self.encoder.id for b in batches]
        share = self.config.reencode_share
        sizes = [min(len(b), max(k, ceil(share * len(b)))) if self.reputation.trusted(b.node_id) else len(b)
                 for b in batches]
        picked = [np.sort(self._rng.choice(len(b), size=n, replace=False)) if ok else np.zeros(0, np.int64)
                  for b, n, ok in zip(batches, sizes, checkable)]
        offsets = np.cumsum([0] + [len(b) for b in batches])[:-1]
        sent = vectors[np.concatenate([o + p for o, p in zip(offsets, picked)]).astype(np.int64)]
        cos, ours = reencode_agreement(batches, picked, sent, self.encoder)
        owner = np.repeat(np.arange(len(batches)), [len(p) for p in picked])
        liars = np.unique(owner[cos < self.config.reencode_min_cosine])
        for i in liars:
            self.reputation.caught(batches[i].node_id)
        verified = [np.zeros(len(b), dtype=bool) for b in batches]
        lied = set(liars.tolist())
        encodings = np.split(ours, np.cumsum([len(p) for p in picked])[:-1])
        for i, p in enumerate(picked):
            verified[i][p] = i not in lied
            if i in lied:
                encodings[i] = encodings[i][:0]
        return liars, verified, encodings

    def _defence_state(self) -> dict[str, str]:
        c = self.config
        reencode = "off" if c.reencode_per_batch <= 0 else ("off: no encoder given" if self.encoder is None else
                                                             f"on: every row under reputation {c.trusted}, "
                                                             f"{c.reencode_share:.0%} (at least "
                                                             f"{c.reencode_per_batch}) per batch above")
        return {"reencode": reencode, "feedback": "on" if c.feedback else "off",
                "share_cap": "off" if c.max_source_share is None else f"on: {c.max_source_share}"}


def _now_ms(now_ms: int | None) -> int:
    return int(time.time() * 1000) if now_ms is None else int(now_ms)
