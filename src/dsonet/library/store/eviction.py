"""Who loses rows when the library is over capacity: fair shares, not volume.

A flood of 1,000 confident rows used to push out whichever rows ranked lowest (an honest
newcomer's 40 of 40, or 580 honest rows once the flooder's key was trusted by volume). Now the
peers' rows are cut by max-min fairness ("water-filling"): the largest holders lose rows first,
down to a common level, so no key's volume takes another author's rows while that key holds more
than they do. Shares are per key for keys trusted by outcomes; keys without outcome-earned trust
share one share between them (a Sybil crowd gets what one key would), split among them the same
way. Rows of keys trusted 0 (banned, under the reputation floor) go first, whole; this node's own
rows go last. Within a key, its lowest-quality rows go first (`RowStore._evict_over_capacity`).
"""

from __future__ import annotations

from typing import Hashable, Mapping

HIDDEN, STRANGER, TRUSTED = 0, 1, 2  # a peer's standing: trusted 0, not trusted by outcomes, trusted by them


def water_fill(held: Mapping[Hashable, int], cut: int) -> dict[Hashable, int]:
    """How many rows each holder loses so that ``cut`` rows go in all, the largest holders first:
    every holder ends at min(held, L) for one level L (ties at the level broken by key order)."""
    if cut <= 0:
        return {}
    total = sum(held.values())
    if cut >= total:
        return {k: n for k, n in held.items() if n}
    keys = sorted(held, key=lambda k: (-held[k], str(k)))
    level, above = held[keys[0]], 0
    left = total - cut  # rows that stay
    # lower the level past each holder in turn until the rows kept fit
    for i, k in enumerate(keys):
        above = i + 1
        below = sum(held[j] for j in keys[above:])
        nxt = held[keys[above]] if above < len(keys) else 0
        if below + above * nxt <= left:
            level = (left - below) // above
            break
    out = {k: max(0, held[k] - level) for k in keys}
    spare = sum(out.values()) - cut  # integer level: some holders at it keep one row more
    for k in keys[:above]:
        if spare <= 0:
            break
        if out[k] > 0:
            out[k] -= 1
            spare -= 1
    return {k: n for k, n in out.items() if n}


def fair_cuts(held: Mapping[str, int], standing: Mapping[str, int], cut: int) -> dict[str, int]:
    """Rows to evict per peer signer (``held``: its rows; ``standing``: HIDDEN, STRANGER or TRUSTED)
    so that ``cut`` peers' rows go: hidden keys' first, then water-filling over the trusted keys and
    one share for all strangers, that share's cut water-filled among them."""
    out: dict[str, int] = {}
    for s, n in held.items():
        if cut > 0 and standing[s] == HIDDEN and n:
            out[s] = min(n, cut)
            cut -= out[s]
    strangers = {s: n for s, n in held.items() if standing[s] == STRANGER}
    groups: dict[Hashable, int] = {s: n for s, n in held.items() if standing[s] == TRUSTED}
    groups[(STRANGER,)] = sum(strangers.values())  # a tuple: never a signer's name
    top = water_fill(groups, cut)
    out.update({s: n for s, n in top.items() if s != (STRANGER,)})
    out.update(water_fill(strangers, top.get((STRANGER,), 0)))
    return out


def standing_of(trust: float, trusted: float) -> int:
    """A peer's standing from its weight in the merged view (0: banned or under the floor)."""
    return HIDDEN if trust <= 0.0 else TRUSTED if trust >= trusted else STRANGER
