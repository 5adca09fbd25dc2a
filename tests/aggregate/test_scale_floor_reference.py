"""The scale floor reads the reference rows' code scales as their library stores them (issue 25,
decode once): nothing is compressed again; bare vectors, which come without codes, still are."""

import numpy as np

from dsonet.aggregate import DeltaSoup, DeltaSoupConfig
from dsonet.aggregate import soup as soup_module
from dsonet.codec import compress
from dsonet.codec.reference import Reference

from agg_helpers import NOW, PROFILE


def _round(batch_of, cloud, reference, monkeypatch) -> tuple[int, np.ndarray]:
    """One round beside ``reference``; how many times the soup compressed, and the scale floor it used."""
    calls, floors = [], []
    monkeypatch.setattr(soup_module, "compress", lambda *a, **kw: calls.append(1) or compress(*a, **kw))
    soup = DeltaSoup(DeltaSoupConfig(seed=0), [PROFILE], rule="deltasoup")
    admit = soup.rule.admit
    monkeypatch.setattr(soup.rule, "admit", lambda rows, pool, floor: floors.append(floor) or admit(rows, pool, floor))
    soup.submit(batch_of("scale-floor", cloud(20, 1)).to_msgpack(), now_ms=NOW)
    soup.round(now_ms=NOW, reference=reference)
    return len(calls), floors[0]


def test_reference_rows_scales_are_read_as_stored_and_bare_vectors_are_compressed(batch_of, cloud, monkeypatch):
    rows = cloud(64, 2)
    codes = compress(rows, PROFILE.group_size, baseline=PROFILE.baseline, rotation_seed=PROFILE.rotation_seed)
    stored, floor = _round(batch_of, cloud, Reference(rows, ("a",) * 64, codes.scales), monkeypatch)
    bare, bare_floor = _round(batch_of, cloud, rows, monkeypatch)
    assert (stored, bare) == (0, 1)
    assert np.array_equal(floor, bare_floor)  # the same scales, read instead of computed
