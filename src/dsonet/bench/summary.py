"""bench/REPORT.md: every benchmark's figures beside the papers' and the usual alternative.

Built only from bench/results/*.json, so the report can be rebuilt without rerunning
anything (`dso bench all --report-only`). A benchmark whose JSON is missing gets a line
saying so, not a number. The headline table is also written into README.md between the
markers `<!-- headline:start -->` and `<!-- headline:end -->`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from dsonet.bench.relevance import report_section

README_MARKERS = ("<!-- headline:start -->", "<!-- headline:end -->")


def _load(results: Path, name: str) -> dict | None:
    path = results / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _short(model_id: str) -> str:
    """'st:all-MiniLM-L6-v2+zen7680:a87…' -> 'MiniLM+Zen'; readable names for the headline."""
    name = model_id.replace("st:all-MiniLM-L6-v2", "MiniLM").replace("wordllama:l2_supercat-256", "WordLlama")
    return re.sub(r"\+zen7680:[0-9a-f]+", "+Zen", name)


def _table(header: list[str], rows: list[list]) -> str:
    def fmt(v):
        if isinstance(v, float):
            return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
        return "–" if v is None else str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _pick(rows: list[dict], **match) -> dict | None:
    return next((r for r in rows if all(r.get(k) == v for k, v in match.items())), None)


def headline(results: Path) -> str:
    """One row per claim: the paper's figure, ours, what a user would pick instead (measured in
    the same run, where there is one), and the benchmark it comes from."""
    rows = []
    codec = _load(results, "codec")
    if codec:
        r = _pick(codec["rows"], method="bitdelta-rotated", space="zen", group_size=7680)
        binary = _pick(codec["rows"], method="binary", space="zen")
        if r:
            rows.append(["bytes per 7680-dim experience", "964 (31.87×)", f"{r['bytes_per_vector']} ({r['ratio']:.2f}×)",
                         "sign bits (sentence-transformers binary): 960", "codec"])
        for g, paper in ((64, 0.934), (128, 0.957), (256, 0.971)):
            r = _pick(codec["rows"], method="bitdelta", dim=768, group_size=g)
            alt = _pick(codec["rows"], method="binary", space="minilm-lifted", dim=768)
            if r:
                rows.append([f"cosine after BitDelta, d = 768 (MiniLM lifted), g = {g}", paper, round(r["cosine_mean"], 3),
                             f"sign bits: {alt['cosine_mean']:.3f}" if alt else "–", "codec"])
        r = _pick(codec["rows"], method="bitdelta-rotated", space="zen", group_size=7680)
        if r:
            rows.append(["cosine after BitDelta, default profile (Zen 7680, rotated, g = d)", "–", round(r["cosine_mean"], 3),
                         f"sign bits: {binary['cosine_mean']:.3f}" if binary else "–", "codec"])
            rows.append(["reconstruction error, default profile", "\"RMSE 0.51%\" (undefined)",
                         f"per-coordinate RMSE {r['rmse']:.4f}, relative L2 {r['rel_l2']:.2f}",
                         f"sign bits: relative L2 {binary['rel_l2']:.2f}" if binary else "–", "codec"])
        memcpy = codec.get("memcpy_vectors_per_s")
        for t in codec["throughput"]:
            rows.append([f"compress, {t['method']}, d = 7680", "3.2 ms a vector (A100)",
                         f"{t['compress_vectors_per_s']:,.0f} vectors/s ({1e3 / t['compress_vectors_per_s']:.3f} ms a vector, 2 CPU cores)",
                         f"numpy copy of the floats: {memcpy:,.0f} vectors/s" if memcpy else "–", "codec"])
    retrieval = _load(results, "retrieval")
    if retrieval:
        lifted = [r for r in retrieval["rows"] if r.get("space", "lifted") == "lifted"]
        for r in lifted:
            if r["index"] == "dsonet":
                same_n = [x for x in lifted if x["n"] == r["n"]]
                alt = "; ".join(f"{x['index']} {x['p50_ms']:.1f} ms, recall {x['recall_at_10']}"
                                for x in same_n if x["index"].startswith("faiss")) or "–"
                ours = f"peers' codes: {r['p50_ms']:.1f} ms, recall@10 {r['recall_at_10']}"
                labels = {"dsonet-support": "peers' codes + the encoder's support", "dsonet-own": "own (floats in the file)"}
                ours += "".join(f"; {labels[x['index']]}: {x['p50_ms']:.1f} ms, recall@10 {x['recall_at_10']}"
                                for x in same_n if x["index"] in labels)
                rows.append([f"query p50 and recall@10, n = {r['n']:,}", "–", ours, alt, "retrieval"])
        zen = [r for r in retrieval["rows"] if r.get("space") == "zen"]
        for n in sorted({r["n"] for r in zen}):
            by_index = {r["index"]: r for r in zen if r["n"] == n}
            plain, support = by_index.get("dsonet-zen"), by_index.get("dsonet-zen-support")
            if plain is None or support is None:
                continue
            alt = "; ".join(f"{name} {x['p50_ms']:.1f} ms, recall {x['recall_at_10']}"
                            for name, x in by_index.items() if name.startswith("faiss")) or "–"
            rows.append([f"query p50 and recall@10, default Zen space, n = {n:,}", "–",
                         f"peers' codes: {plain['p50_ms']:.1f} ms, recall@10 {plain['recall_at_10']}; + the head's support: "
                         f"{support['p50_ms']:.1f} ms, recall@10 {support['recall_at_10']}", alt, "retrieval"])
    cross = _load(results, "crossmodel")
    if cross:
        for r in cross["rows"]:
            if not r.get("compressed") and "zen" in f"{r['doc_model']}{r['query_model']}":
                paper = "97.9%" if not r.get("aligned") else "89.7–92.1%"
                pair = f"{_short(r['doc_model'])} → {_short(r['query_model'])}"
                rows.append([f"Recall@10, documents → queries: {pair}", paper, f"{100 * r['recall_at_10']:.1f}%", "–", "crossmodel"])
    robust = _load(results, "robustness")
    if robust:
        def worst_at_30(rule: str) -> dict | None:
            accs = [r for r in robust["rows"] if r["rule"] == rule and abs(r["byzantine_fraction"] - 0.3) < 1e-9]
            return min(accs, key=lambda r: r["accuracy"]) if accs else None

        median = worst_at_30("median")
        alt = f"coordinate median: {100 * median['accuracy']:.1f}% ({median['attack']})" if median else "–"
        for rule, paper, other in (("deltasoup", "92.1% (median)", alt), ("mean", "70%", "–")):
            worst = worst_at_30(rule)
            if worst:
                rows.append([f"accuracy at 30% Byzantine, {rule} (worst attack: {worst['attack']})", paper,
                             f"{100 * worst['accuracy']:.1f}% (clean {100 * worst['clean_accuracy']:.1f}%)", other, "robustness"])
        if "round_seconds_100x100_7680" in robust:
            load = robust.get("timing", {}).get("load_average_1min")
            rows.append(["a node's round: verify, DeltaSoup, store, merge and refit, 100 × 100 × 7680 (target 2 s)",
                         "< 50 ms (one median alone)", f"{robust['round_seconds_100x100_7680']:.2f} s"
                         + (f" (load average {load:.0f} on 2 cores)" if load else ""), "–", "robustness"])
        attacks = robust.get("node_attacks", {}).get("rows", [])
        volume = _pick(attacks, attack="volume")
        if attacks:
            names = ", ".join(r["attack"] for r in attacks)
            rows.append([f"honest rows lost, attacks on a node ({names})", "– (target 0)",
                         str(sum(r["honest_rows_lost"] for r in attacks)), "–", "robustness"])
        sleeper = _pick(attacks, attack="sleeper")
        if sleeper:
            rows.append(["lying rows admitted after honest history without helpful outcomes (sleeper)", "– (target 0)",
                         f"{sleeper['lying_rows_admitted']} of {sleeper['lying_rows_sent']}", "–", "robustness"])
        if volume:
            per_key = volume["attacker_rows_sent"] // volume["attacker_keys"]
            rows.append([f"search p99, {robust['node_attacks']['clients']} clients, during a volume attack "
                         f"({volume['attacker_keys']} keys × {per_key:,} rows)", "– (target < 1 s)",
                         f"{volume['search_p99_ms']:.0f} ms (quiet {volume['quiet_p99_ms']:.0f} ms)", "–", "robustness"])
    net = _load(results, "network")
    if net:
        wide = next((w for w in net.get("wire_by_dim", []) if w["dim"] == 7680), None)
        plain = f"JSON with float32 vectors: {wide['json_float32_bytes_per_exp']:,.0f} B" if wide else "–"
        for n, size in net.get("wire_bytes_per_experience_by_batch", {}).items():
            rows.append([f"wire bytes per experience, default profile, batches of {n} (text of "
                         f"{net['mean_text_bytes']:.0f} B, signature and framing included; NATS headers "
                         f"{net['nats_header_bytes_per_experience_by_batch'][n]:.0f} B apart)",
                         "964 B (the vector alone)", f"{size:.0f} B", plain, "network"])
        rows.append(["submit → searchable elsewhere, p50", "–", f"{net['propagation_p50_ms']:.0f} ms", "–", "network"])
    drift = _load(results, "learn-drift")
    for r in (drift or {}).get("rows", []):
        rows.append([f"library drift, held-out, without → own → fleet ({r['llm']}, n = {r['n_eval']} items, each answered in {r['seeds']} seed(s))",
                     "GitChameleon (other tasks and models): GPT-4o pass@10 39.9%, 43.7% with error feedback",
                     f"{100 * r['accuracy_without']:.1f}% → {100 * r['accuracy_with']:.1f}% → "
                     f"{100 * r['accuracy_fleet']:.1f}% (fleet − without, paired 95%: {_points(r['ci95_fleet'])}; "
                     f"fleet − own {_points(r['ci95_fleet_vs_own'])}; poison alone − without "
                     f"{_points(r['ci95_poison_only'])}; after feedback − fleet {_points(r['ci95_after_feedback_vs_fleet'])})",
                     f"neutral text {100 * r['accuracy_neutral']:.1f}%; the hand-written lesson "
                     f"{100 * r['accuracy_reference']:.1f}%", "learn --family drift"])
    learn = _load(results, "learn")
    if learn:
        for r in learn["rows"]:
            rows.append([f"accuracy without → with experiences ({r['llm']}, {r['task']})", "AIME24 80.0 → 82.7 (DeepSeek-V3.1)",
                         f"{100 * r['accuracy_without']:.1f}% → {100 * r['accuracy_with']:.1f}% (n = {r['n_eval']}, "
                         f"95% CI of the difference {r['ci95']}, coverage {r.get('coverage')})",
                         f"neutral text of the same length: {100 * r['accuracy_neutral']:.1f}%"
                         + (f"; a hand-written correct lesson: {100 * r['accuracy_reference']:.1f}%"
                            if "accuracy_reference" in r else "") if "accuracy_neutral" in r else "–", "learn"])
    if not rows:
        return "No benchmark results yet: run `dso bench all`."
    return _table(["claim", "paper", "dsonet (measured here)", "alternative, same run", "benchmark"], rows)


def _points(ci: list[float]) -> str:
    """A paired interval of shares in percentage points: [+1.3, +12.5]."""
    return f"[{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}] points"


def _drift_notes(drift: dict) -> str:
    """The drift rows' intervals (paired with "without" on the same items), controls, libraries, poison."""
    keys = ("ci95_with", "ci95_neutral", "ci95_fleet", "ci95_cross_model", "ci95_poisoned", "ci95_poisoned_after_feedback",
            "ci95_poison_only", "ci95_reference", "ci95_fleet_vs_own", "ci95_with_vs_neutral", "ci95_after_feedback_vs_fleet")
    lines = ["Held-out change facts, greedy, the same items and prompts in every condition but the notes; 95% paired "
             "bootstrap intervals of each condition minus without unless named. Plot: `results/learn-drift.png`."]
    for r in drift["rows"]:
        lines.append(f"- **{r['llm']}** (n = {r['n_eval']} change items + {r.get('n_control')} controls, each answered in "
                     f"{r['seeds']} seed(s); the intervals resample items with all their seeds' answers): " + ", ".join(f"{k.removeprefix('ci95_')} {r.get(k)}" for k in keys) +
                     f"; controls without {r.get('accuracy_control_without')} → fleet {r.get('accuracy_control_fleet')} "
                     f"({r.get('ci95_control')}); per library (without → fleet): " +
                     ", ".join(f"{lib} {v['accuracy_without']} → {v['accuracy_fleet']} {v['ci95_fleet']}"
                               for lib, v in r.get("by_library", {}).items()) +
                     f"; coverage {r.get('coverage')}; a lesson costs {r.get('lesson_prompt_tokens')} prompt tokens "
                     f"per prompt that got any; {r.get('wall_s')} s.")
    return "\n".join(lines)


def _learn_notes(learn: dict) -> str:
    """What the learning table cannot show: every condition's interval, coverage, what the gate
    refused, which families the pilot tried, a few lessons."""
    lines = ["Conditions on the same held-out items, greedy, answer-only prompts: without lessons; own (node 0's); "
             "neutral text of the same length (control); fleet (peers' lessons through DeltaSoup); poisoned fleet "
             "(a node publishing plausible but wrong lessons with honest vectors); the poison alone; and, where measured, "
             "the family's hand-written correct lesson alone (can any lesson help this model here?). "
             "95% CIs are paired bootstrap intervals of each condition − without; p is McNemar's exact test."]
    for r in learn.get("rows", []):
        per = r.get("per_seed", [{}])[0]
        lines.append(f"- **{r['task']}** (n = {r['n_eval']} × {r.get('seeds', 1)} seed(s)): Wilson intervals "
                     f"{r.get('wilson')}; CIs neutral {r.get('ci95_neutral')}, fleet {r.get('ci95_fleet')}, poisoned "
                     f"{r.get('ci95_poisoned')}, poison alone {r.get('ci95_poison_only')}"
                     + (f", correct lesson alone {r['ci95_reference']}" if "ci95_reference" in r else "")
                     + f"; McNemar p {r.get('p_mcnemar_all')}; "
                     f"coverage {r.get('coverage_all')}; parse failures {r.get('parse_failures')}; lessons kept by node 0: "
                     f"{per.get('lessons')}; poisoned share: {per.get('poisoned_share')}"
                     + (f"; wall {r['wall_s']} s with {r['answers']['generated']:,} answers generated and "
                        f"{r['answers']['from_cache']:,} from the answer cache" if "answers" in r else "") + ".")
    pilot = learn.get("pilot") or {}
    if pilot.get("families"):
        lines.append("Pilot (training items only, before the held-out run): " + ", ".join(
            f"{k} {v.get('accuracy')}{' (kept)' if v.get('kept') else ''}" for k, v in pilot["families"].items()) + ".")
    return "\n".join(lines)


def _codec_section(codec: dict) -> str:
    rows = [[r.get("space"), r["method"], r["dim"], r["group_size"], r["bytes_per_vector"], r["ratio"], r["cosine_mean"],
             r["cosine_min"], r["rel_l2"], r["rmse"], r["recall_at_10"]] for r in codec["rows"]]
    tput = [[t["method"], t["dim"], t["compress_vectors_per_s"], t["decompress_vectors_per_s"]] for t in codec["throughput"]]
    d = codec.get("default", {})
    return "\n\n".join([
        _table(["space", "method", "dim", "g", "bytes", "ratio", "cos mean", "cos min", "rel L2", "RMSE", "recall@10"], rows),
        *([_table(["space", "n", "method", "baseline", "bytes", "cos(e, ê)", "cos min", "cos(Δ, Δ̂)", "rel L2"],
                  [[r["space"], r["n"], r["method"], r["baseline"], r["bytes_per_vector"], r["cosine_mean"], r["cosine_min"],
                    r["delta_cosine_mean"], r["rel_l2"]] for r in codec["scale"]])
           + "\n\nThe default profile at scale: the profile's fixed baseline (protocol v2) against the per-batch mean "
             "of 1,000 rows (v1), and faiss IndexRaBitQ's reconstruction."] if codec.get("scale") else []),
        _table(["method", "dim", "compress vec/s", "decompress vec/s"], tput)
        + f"\n\nnumpy copy of the same floats: {codec['memcpy_vectors_per_s']:,.0f} vectors/s (the memory-bandwidth floor).",
        f"Protocol default chosen from this run: **{'rotated' if d.get('rotate') else 'plain'} BitDelta** "
        f"(rotation's change of mean cosine at g = d, per real space: {d.get('cosine_gain_at_g_eq_d')}).",
        _rotation_line(codec.get("rotation")),
        "Paper: 964 B / 31.87× at d = 7680 (reproduced exactly: it is arithmetic); cosine 0.934 / 0.957 / 0.971 at "
        "g = 64 / 128 / 256, d = 768 — not reached on real MiniLM embeddings: the paper's corollary assumes "
        "‖Δ‖ ≪ ‖ē‖, and real sentence embeddings sit far from their mean, so one bit per dimension keeps about "
        "√(2/π) of each delta's direction. \"RMSE 0.51%\" is undefined in the paper; we report per-coordinate RMSE, "
        "relative L2 and cosine instead.",
    ])


def _rotation_line(verdict: dict | None) -> str:
    if not verdict:
        return "Rotated vs plain per (space, d, g): not in this codec.json (rerun `dso bench codec`)."
    worse = ", ".join(f"{w['space']} d={w['dim']} g={w['group_size']} ({w['cosine_gain_vs_plain']:+.4f})" for w in verdict["worse"])
    return (f"Rotated vs plain at every (space, d, g), rotating each group by itself: rotated is less faithful beyond two "
            f"paired standard errors in {len(verdict['worse'])} of {verdict['cells']} cells{': ' + worse if worse else ''}; "
            f"largest loss {verdict['largest_loss']:+.5f}, largest gain {verdict['largest_gain']:+.4f} in mean cosine.")


def _node_attacks_section(section: dict) -> str:
    """The attacks on one real node: what got in, what was lost, and whether search kept answering."""
    columns = ["attack", "attacker_keys", "attacker_rows_sent", "attacker_rows", "honest_rows_sent", "honest_rows_lost",
               "honest_rows_filtered", "rss_growth_mb", "attack_seconds", "search_p50_ms", "search_p99_ms",
               "quiet_p50_ms", "quiet_p99_ms", "load_average_1min", "deferred_mb", "honest_min_reputation",
               "lying_rows_admitted"]
    limits = section["limits"]
    text = (f"### Attacks on the node\n\nOne real `Node` (its DeltaSoup at the production defaults, SQLite library and "
            f"merge; d = {section['dim']}) read each attack from an in-process log while {section['clients']} clients "
            "searched it back to back; `quiet_*` is the same clients before the attack. Twelve honest peers had "
            "sent six batches each first (then trusted through agents' outcomes, as long-running peers are) "
            "and send one more during the attack. "
            "`honest_rows_lost` counts honest rows sent and not stored for any reason but the content filter's verdict "
            "(`honest_rows_filtered`, the median rule's false positives, with or without an attack). Hostile rows are "
            "plausible (mixes of two honest sentences, encoded as their senders claim), the worst case for what is "
            f"stored. The limits they meet: {limits['new_keys_per_window']} keys not yet trusted per window, "
            f"{limits['new_key_rate_limit']} batches per such key, {limits['capacity']:,} rows kept (lowest quality "
            "evicted). Searches take turns with ingest one turn of at most 1,000 stored rows at a time, and new rows "
            "are clustered off the lock after each read of the stream. Batches over their sender's rate are held "
            "back in bytes (`deferred_mb`, the deferred fill): "
            f"{limits.get('deferred_key_bytes', 0) / 2**20:.0f} MiB a key not yet trusted, "
            f"{limits.get('deferred_new_keys_bytes', 0) / 2**20:.0f} MiB for all keys never admitted, "
            f"{limits.get('deferred_bytes', 0) / 2**20:.0f} MiB in all.\n\n"
            "The attacks on trust (`dsonet.sim.node_attacks`): honest peers are trusted by agents' "
            "outcomes, volume lifts a key to 0.6 at most (`honest_min_reputation`: the lowest honest key at the end). "
            "Sleeper: five honest batches, then 980 honest rows and 10 whose code is a searched question's code "
            "(`lying_rows_admitted`). Eviction: a 1,000-row flood at confidence 1.0, from a fresh key and from one "
            "with six honest batches, into a library scaled down to the honest rows plus 100 (`capacity`), beside "
            "four honest newcomers' 40 rows. Reference shift: a copier's 102 rows are all the node holds, then an "
            "honest author's 8 lone batches on another topic.\n\n")
    before = section.get("before_issue_24")
    if before:
        text += (f"Before the trust defences ({before['code']}), the same attacks: " + "; ".join(
            f"{r['attack']}: {r['honest_rows_lost']} honest rows lost, {r['honest_rows_filtered']} filtered, honest "
            f"reputation {r['honest_min_reputation']}" + (f", {r['lying_rows_admitted']} lying rows admitted "
                                                          f"({r.get('lying_top_hits', 0)} the top hit for their question)"
                                                          if "lying_rows_admitted" in r else "")
            for r in before["rows"]) + ".\n\n")
    return text + _table(columns, [[r.get(c) for c in columns] for r in section["rows"]])


def _rows_section(data: dict, columns: list[str]) -> str:
    return _table(columns, [[r.get(c) for c in columns] for r in data["rows"]])


def _page_section(data: dict) -> str:
    columns = ["case", "median_ms", "max_ms", "rows_shown", "page_kb"]
    table = _table(columns, [[c.get(k) for k in columns] for c in data["cases"]])
    return (f"Library of {data['rows']:,} rows, journal at its bounds; median of {data['runs']} requests a case, "
            f"1-minute load average {data.get('load_1min', '?')} on the shared 2-core machine.\n\n{table}")


def _coldstart_section(data: dict) -> str:
    table = _rows_section(data, ["measure", "setup", "median_s", "min_s", "texts_per_s", "runs"])
    notes = [f"Library of {data['rows_in_library']:,} rows; query: \"{data['query']}\"."]
    if data.get("load_average"):
        notes.append(f"1-minute load average of the shared 2-core machine at the start and the end: "
                     f"{data['load_average'][0]}, {data['load_average'][1]}.")
    if data.get("numpy_vs_torch"):
        a = data["numpy_vs_torch"]
        notes.append(f"numpy vs torch encoder on {a['texts']} texts: cosine min {a['cosine_min']:.7f}, mean {a['cosine_mean']:.7f}.")
    if data.get("core_install"):
        c = data["core_install"]
        notes.append(f"Core install (`pip install .`, fresh venv): {c['packages']} packages, {c['site_packages_mb']} MB "
                     f"site-packages ({c['dsonet_package_mb']} MB of it dsonet, MiniLM's float16 weights included); "
                     f"torch importable: {c['torch_importable']}.")
    return table + "\n\n" + " ".join(notes)


def write_report(results: Path) -> Path:
    sections = ["# dsonet benchmark report", "Built by `dso bench all` from `bench/results/*.json`; medians on a shared "
                "2-core machine. Each figure sits beside the paper's claim and, where one exists, beside the library a "
                "user would pick instead, measured in the same run.", "## Headline", headline(results)]
    codec = _load(results, "codec")
    sections += ["## Codec (`dso bench codec`)", _codec_section(codec) if codec else "_not run_"]
    specs = [
        ("retrieval", "Retrieval over compressed codes (`dso bench retrieval`), in the lifted MiniLM space and the default "
         "Zen space, beside faiss IndexFlatIP, IndexBinaryFlat and IndexRaBitQ",
         ["space", "index", "n", "dim", "p50_ms", "p95_ms", "qps", "recall_at_10", "bytes_per_experience"]),
        ("crossmodel", "Cross-model retrieval (`dso bench crossmodel`); paper: native 94.7 / 97.9, aligned 84–87 / 90–92",
         ["doc_model", "query_model", "aligned", "compressed", "recall_at_5", "recall_at_10", "ms_encode", "ms_align", "ms_compress"]),
        ("robustness", "Byzantine robustness (`dso bench robustness`); paper: 94.7% clean → 92.1% at 30% (median), mean 70%",
         ["attack", "rule", "byzantine_fraction", "accuracy", "clean_accuracy", "attacker_admitted"]),
        ("learn-drift", "Library drift (`dso bench learn --family drift`): a fleet of coding agents learns the installed "
         "libraries; context, not comparable: GitChameleon, GPT-4o pass@10 39.9%, 43.7% with error feedback",
         ["llm", "n_eval", "seeds", "accuracy_without", "accuracy_with", "accuracy_neutral", "accuracy_fleet",
          "accuracy_cross_model", "accuracy_poisoned", "accuracy_poisoned_after_feedback", "accuracy_poison_only",
          "accuracy_reference", "recovered", "poison_rows_hidden", "honest_rows_hidden"]),
        ("learn", "Learning (`dso bench learn`); paper: AIME24 80.0 → 82.7 with DeepSeek-V3.1 for about $18",
         ["llm", "task", "n_eval", "seeds", "accuracy_without", "accuracy_with", "accuracy_neutral", "accuracy_fleet",
          "accuracy_poisoned", "accuracy_poison_only", "ci95", "p_mcnemar", "coverage", "experiences", "wall_s"]),
    ]
    for name, title, columns in specs:
        data = _load(results, name)
        sections += [f"## {title}", _rows_section(data, columns) if data and data.get("rows") else "_not run_"]
        if name == "learn" and data:
            sections.append(_learn_notes(data))
        if name == "learn-drift" and data:
            sections.append(_drift_notes(data))
        if name == "robustness" and data:
            sections.append(f"Forged admitted: {data.get('forged_admitted')}, tampered: {data.get('tampered_admitted')}, "
                            f"replayed: {data.get('replayed_admitted')}; a node's whole round over 100 batches × 100 "
                            f"experiences at d = 7680 (verify, DeltaSoup, store, merge and refit): "
                            f"{data.get('round_seconds_100x100_7680') or float('nan'):.2f} s. Plot: `results/robustness.png`.")
            if data.get("node_attacks"):
                sections.append(_node_attacks_section(data["node_attacks"]))
    for name, title in (("network", "Network (`dso bench network`); paper: ~29 KB per round of 100 at d = 768, 964 B per 7680-dim experience"),
                        ("train", "Zen head training (`dso bench train`); paper: stage 1 cosine 96.3%, pairwise distance 1.62 → 1.87")):
        data = _load(results, name)
        body = "```json\n" + json.dumps({k: v for k, v in data.items() if k != "machine"}, indent=1)[:6000] + "\n```" if data else "_not run_"
        sections += [f"## {title}", body]
    coldstart = _load(results, "coldstart")
    sections += ["## Cold start (`dso bench coldstart`): one `dso search` from a fresh process, and the core install",
                 _coldstart_section(coldstart) if coldstart else "_not run_"]
    relevance = _load(results, "relevance")
    sections += ["## Relevance threshold (`dso bench relevance`); paper: 0.6 for every space",
                 report_section(relevance) if relevance else "_not run_"]
    page = _load(results, "page")
    sections += ["## The node's page (`dso bench page`): a whole `GET /` on a 100k-row library; target 200 ms",
                 _page_section(page) if page else "_not run_"]
    path = results.parent / "REPORT.md"
    path.write_text("\n\n".join(sections) + "\n")
    _update_readme(Path("README.md"), headline(results))
    return path


def _update_readme(readme: Path, table: str) -> None:
    if not readme.exists():
        return
    text = readme.read_text()
    start, end = README_MARKERS
    if start in text and end in text:
        new = re.sub(re.escape(start) + r".*?" + re.escape(end), lambda _: f"{start}\n{table}\n{end}", text, flags=re.S)
        readme.write_text(new)
