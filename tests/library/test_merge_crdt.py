"""The library is a CRDT: the same batches and tombstones, in any order and any number of
times, give the same state."""

import numpy as np

from dsonet.codec import make_batch
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.library import Library
from lib_helpers import DIM, unit


def deliveries(profile):
    """Batches from three nodes with cross-batch near-duplicates, one id sent twice with
    different codes and confidences, and tombstones."""
    rng = np.random.default_rng(0)
    nodes = [NodeIdentity.generate() for _ in range(3)]
    base = unit(12, 11)
    batches = []
    for b in range(6):
        exps, vecs = [], []
        for i in range(12):
            domain = ["math", "code"][i % 2]
            noise = rng.standard_normal(DIM).astype(np.float32) * 0.002  # cosine ≈ 0.999 to the base row; BitDelta noise lowers it on ê
            v = base[i] + noise
            exps.append(Experience(f"When case {i} variant {b % 3}, do step {i}", domain, float(rng.uniform(0.2, 0.9))))
            vecs.append(v / np.linalg.norm(v))
        if b == 5:  # the same id as batch 0 row 0 (same text and domain), another code and confidence
            exps[0] = Experience("When case 0 variant 0, do step 0", "math", 0.95)
        batches.append(make_batch(exps, np.stack(vecs), profile, nodes[b % 3]))
    tomb = [batches[1].experiences[3].id, batches[2].experiences[4].id]
    return [("batch", b) for b in batches] + [("tombstones", tomb[:1]), ("tombstones", tomb[1:])]


def state(lib):
    """Every (id, signer) row with its confidence and whole code, read through the store room (the CRDT
    is its rules); the tombstones; the merged view."""
    rows = sorted((r.id, r.signer, r.confidence, r.signs + r.scales + lib.rows.baseline(r.baseline_id).tobytes())
                  for chunk in lib.rows.index_rows() for r in chunk)
    return rows, lib.tombstones(), sorted((k, tuple(v)) for k, v in lib.clusters().items())


def test_shuffled_and_duplicated_deliveries_converge(tmp_path, encoder, profile):
    items = deliveries(profile)
    states = []
    for trial in range(12):
        rng = np.random.default_rng(trial)
        order = list(rng.permutation(len(items))) + list(rng.choice(len(items), size=4))  # some delivered twice
        with Library(tmp_path / f"t{trial}.sqlite", encoder=encoder, profile=profile) as lib:
            for k in order:
                kind, payload = items[k]
                lib.ingest(payload) if kind == "batch" else lib.apply_tombstones(payload)
            states.append(state(lib))
    assert all(s == states[0] for s in states[1:])
    rows, tombs, clusters = states[0]
    assert len(tombs) == 2
    assert max(len(m) for _, m in clusters) >= 3  # near-duplicates across batches were merged
    twice = Experience("When case 0 variant 0, do step 0", "math").id
    assert len([c for i, _, c, _ in rows if i == twice]) == 2  # one row per signer: neither copy replaced the other
    with Library(tmp_path / "t0.sqlite", encoder=encoder, profile=profile) as lib:
        assert lib.get(twice).confidence == 0.95  # the more confident row speaks for the id


def test_merged_hit_has_max_confidence_and_all_members(tmp_path, encoder, profile):
    items = deliveries(profile)
    with Library(tmp_path / "m.sqlite", encoder=encoder, profile=profile) as lib:
        for kind, payload in items[:3]:
            lib.ingest(payload)
        members = [e for b in (items[0][1], items[1][1], items[2][1]) for e in b.experiences if "case 2 " in e.text]
        hit = lib.search_vector(unit(12, 11)[2], k=1, min_similarity=0.5)[0]
        assert sorted(hit.members) == sorted(e.id for e in members)
        best = max(members, key=lambda e: e.confidence)  # equal trust: the most confident member represents
        assert (hit.experience.id, hit.experience.confidence) == (best.id, best.confidence)
        assert hit.score > 0.75  # cosine with the merged reconstruction (≈ 0.8 for random 384-d vectors)
