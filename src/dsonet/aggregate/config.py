"""DeltaSoup's settings: the paper's defaults (federated-agents paper §5) plus our defences."""

from __future__ import annotations

from dataclasses import dataclass, replace

from dsonet.codec.batch import MAX_BATCH_BYTES, MAX_EXPERIENCES
from dsonet.codec.bitdelta import ENCODES_MIN_COSINE


@dataclass(frozen=True)
class DeltaSoupConfig:
    # --- the paper's four phases
    t_max_ms: int = 300_000  # freshness window T_max = 300 s: |timestamp − now| must not exceed it
    tau: float = 2.0  # MAD filter threshold: drop ê when mean_j |ê_j − μ_j| / (σ_j + ε) > τ
    eps: float = 1e-8  # ε in the MAD score's denominator
    scale_floor: bool = True  # ours: σ_j ≥ the median code scale α (the paper's MAD collapses on 1-bit codes)
    rep_decay: float = 0.9  # rep ← decay · rep + (1 − decay) · r, r ∈ {0, 1}
    rep_floor: float = 0.3  # peers below this are skipped
    # The paper gives no starting value; a newcomer starts half-trusted, so five straight
    # failures put it under the floor (0.5 · 0.9⁵ ≈ 0.295) and a Sybil identity starts nowhere high.
    rep_initial: float = 0.5
    # Ours: an admitted batch lifts a key at most to here, below `trusted`, so trust that skips
    # re-encoding and shields from eviction comes only from outcomes agents reported (see `Reputation`).
    # Without it, five honest batches lift a fresh key to 0.705, past every check. None: the paper's
    # reading, every admitted batch r = 1.
    volume_ceiling: float | None = 0.6
    # Ours: a key whose lessons agents reported harmful more often than helpful, beyond chance (one-sided
    # sign test at this p), is skipped like a key under the floor, whatever the moving average says
    # (see `Reputation.convicted`). None: only the floor (the paper's reading).
    conviction_p: float | None = 0.05
    # A batch the filter refuses costs its key reputation only when at least this many outcome-trusted
    # keys other than it (this node's own rows count as one) stood in the pool it was judged against, or
    # its outcomes are more harmful than helpful: one key's rows (a copier's, a Sybil crowd's) cannot
    # make an honest newcomer on another topic pay. None: every refusal costs (the paper's reading).
    filter_agreement: int | None = 2
    # --- admission limits (the experience-ledger paper's 100 submissions/hour per node)
    rate_limit: int = 100  # batches per node per rate window
    rate_window_ms: int = 3_600_000
    new_key_rate_limit: int = 20  # batches per window for a key not yet trusted (see `trusted`)
    new_keys_per_window: int = 1000  # distinct keys not yet trusted admitted per window: bounds Sybil floods
    # Rows as well as batches: a batch may hold 1,000 rows, so batch limits alone let 40 fresh keys
    # land 40,000 rows in a minute. An honest learner publishes tens of
    # lessons an hour, in batches of at most 100 (`NodeConfig.max_batch_experiences`), and is
    # trusted once agents report its lessons helped (volume alone stops at `volume_ceiling`):
    # 1,000 rows a key an hour (ten full batches, or one of the protocol's largest) covers an
    # honest learner's hour even after a long outage, trusted or not. The shared
    # budget counts only rows past each key's first 50 in the window, so a newcomer publishing
    # normally never draws on it and a flood that drains it cannot starve one; 5,000 such rows is
    # five newcomers catching up on a thousand lessons each in one hour. A key this node has
    # admitted before is deferred past either budget, not dropped (`Node`). None: no budget.
    new_key_row_limit: int | None = 1000  # rows per window from one key not yet trusted
    new_key_free_rows: int = 50  # rows per window of such a key that do not draw on the shared budget
    new_keys_row_limit: int | None = 5000  # rows per window past their free rows, all such keys together
    max_batch_bytes: int = MAX_BATCH_BYTES  # payloads above this are refused before parsing
    max_batch_experiences: int = MAX_EXPERIENCES
    # --- speed: the median and MAD are taken on a seeded sample of rows. Sampling rows uniformly
    # keeps the Byzantine share of the sample at f ± √(f(1−f)/s) (±1.4 points at s = 1001, f = 0.3),
    # so the median's breakdown point (f < 1/2) still holds with overwhelming probability; the
    # sample median's own error (≈ 1.25 σ/√s ≈ 0.04 σ per coordinate) is small beside τ = 2 MADs.
    median_sample: int | None = 1001  # odd, so the median is one order statistic; None: every row
    seed: int | None = None  # None: fresh entropy each round, so attackers cannot aim at the sample
    # --- our defences (each one can be switched off; `dso bench robustness` measures each)
    reencode_per_batch: int = 2  # at least this many texts per batch of a trusted sender re-encoded; 0: off
    # ... and this share of its rows. A trusted key that hides k lying rows among n is caught in a batch
    # with probability ≈ 1 − (1 − k/n)^(share·n) ≈ 1 − e^(−share·k) (63% for k = 10), and one catch drops
    # it to `volume_ceiling` (`Reputation.caught`), after which every row it sends is checked: it lands
    # about (1 − share)/share ≈ 9 lying rows before that, in expectation, and a node sets aside every row
    # it stored from that key unchecked once the catch comes (`dsonet.network.ingest`). The cost: a
    # trusted key at its full rate (100 batches of 1,000 rows an hour) makes the node encode 10,000
    # texts an hour, ~50 s of CPU with MiniLM; an honest learner's tens of rows an hour cost nothing.
    reencode_share: float = 0.1
    trusted: float = 0.7  # a sender under this reputation (new keys start at rep_initial) has every row re-encoded
    reencode_min_cosine: float = ENCODES_MIN_COSINE  # cos(ê, code of our encoding of its text) under it: a lie
    feedback: bool = True  # record_outcome moves the source's reputation
    max_source_share: float | None = 0.05  # a source keeps at most this share of a domain's admitted rows

    @classmethod
    def paper(cls, **overrides) -> "DeltaSoupConfig":
        """The paper's DeltaSoup alone: every defence of ours off."""
        return replace(cls(reencode_per_batch=0, feedback=False, max_source_share=None, scale_floor=False,
                           new_key_row_limit=None, new_keys_row_limit=None, volume_ceiling=None,
                           filter_agreement=None), **overrides)
