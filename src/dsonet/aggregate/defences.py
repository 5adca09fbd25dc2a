"""Our defences against what the MAD filter cannot see (each switchable in DeltaSoupConfig).

* `reencode_agreement`: a vector inside the honest cloud can still carry a text it does not
  encode (in-distribution poisoning, hijacked queries). We re-encode a sample of texts with our
  own encoder, compress that vector exactly as the sender had to (same baseline, group size and
  rotation) and compare codes: an honest sender with the profile's encoder reproduces its code
  (cosine ≈ 1.0); any other vector shows.
* `cap_source_share`: one source may fill at most a share of a domain's admitted rows in a round,
  so a flood from one identity cannot crowd out the rest.
* outcome feedback lives in `DeltaSoup.record_outcome`: "did this experience help?" moves the
  source's reputation, and sources under the floor are skipped.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from dsonet.codec.batch import CompressedBatch
from dsonet.codec.bitdelta import code_agreement


def reencode_agreement(batches: Sequence[CompressedBatch], rows: Sequence[np.ndarray],
                       sent: np.ndarray, encoder) -> tuple[np.ndarray, np.ndarray]:
    """Cosine between the sender's ê and the code of our own encoding of the same text.

    ``rows[b]``: the sampled rows of batch b; ``sent``: their ê, stacked in the same order.
    Returns one cosine per sampled row, and our encodings (rows, d) in that order (a receiver that
    keeps floats stores them, not encoding the texts again).
    """
    texts = [batches[b].experiences[r].text for b in range(len(batches)) for r in rows[b]]
    if not texts:
        return np.zeros(0, dtype=np.float32), np.zeros((0, sent.shape[-1]), dtype=np.float32)
    ours = np.asarray(encoder.encode(texts, kind="document"), dtype=np.float32)
    cos, start = [], 0
    for b, picked in enumerate(rows):  # one small compress per batch: each in its own profile
        if len(picked):
            p, stop = batches[b].profile, start + len(picked)
            cos.append(code_agreement(ours[start:stop], sent[start:stop], p.group_size, batches[b].baseline,
                                      p.rotation_seed))
            start = stop
    return np.concatenate(cos), ours


def cap_source_share(keep: np.ndarray, source: np.ndarray, domain: np.ndarray, max_share: float,
                     rng: np.random.Generator) -> np.ndarray:
    """Drop rows so that no source holds more than ⌈max(max_share, 2/sources) · n⌉ of a domain's
    n kept rows (a uniformly random subset of a flooder's rows survives). Sources and domains are
    integer codes per row. Twice a fair share is always allowed, so a domain with one or two
    sources stays whole and the cap only bites on a source far above its peers.
    """
    out = keep.copy()
    idx = np.flatnonzero(keep)
    if len(idx) == 0:
        return out
    src, dom = source[idx], domain[idx]
    n_dom = np.bincount(dom)
    group = dom.astype(np.int64) * (int(src.max()) + 1) + src
    uniq_groups, group_code = np.unique(group, return_inverse=True)
    sources_per_dom = np.bincount(uniq_groups // (int(src.max()) + 1), minlength=len(n_dom))
    share = np.maximum(max_share, 2.0 / np.maximum(sources_per_dom, 1))
    cap = np.ceil(share * n_dom).astype(np.int64)  # (domains,)
    order = np.lexsort((rng.random(len(idx)), group_code))  # each group's rows in random order
    sorted_groups = group_code[order]
    starts = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1]])
    rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    over = rank >= cap[dom[order]]
    out[idx[order[over]]] = False
    return out
