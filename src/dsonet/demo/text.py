"""The demo's report as text: `format_report` prints every table and line of a `DemoReport`."""

from __future__ import annotations

from dataclasses import asdict

from dsonet.bench.report import format_table
from dsonet.demo.job import JobAct, Line
from dsonet.demo.report import CONDITIONS, DemoReport, Poison
from dsonet.sim.report import Condition


def format_report(report: DemoReport) -> str:
    lines = ["", f"== Fleet ({report.fleet}) =="]
    lines.append(format_table([asdict(n) | {"node_id": n.node_id[:12]} for n in report.nodes],
                              ["name", "node_id", "role", "produced", "published_bytes", "admitted_elsewhere",
                               "batches_rejected", "mean_reward"]))
    ln = report.learning
    lines += ["", f"== Learning == {ln.rollouts} attempts run in the sandbox, {100 * ln.mean_reward:.0f}% passed; "
              f"{ln.proposals} lessons proposed on {ln.groups} tasks, {ln.skipped} malformed, {ln.gated_out} refused "
              f"by the execution gate (fixed no validation task), {ln.kept} kept; {ln.tokens:,} tokens"]
    lines += [f"  {lesson.node}: {lesson.text}" for lesson in report.lessons]
    if report.example is not None:
        ex = report.example
        lines += ["", f"== One held-out task ({ex.fact}), answered by {ex.node}'s agent ==",
                  *[f"    | {line}" for line in ex.question.splitlines()],
                  f"  without lessons: {ex.without.strip()!r}", f"    -> failed: {ex.without_error}",
                  "  the fleet's library gave the same prompt:"]
        lines += [f"    {i.score:+.3f} [{i.source}{'' if i.source == ex.node else ', a peer'}] {i.text}"
                  for i in ex.lessons]
        lines += [f"  with them: {ex.fleet.strip()!r}", "    -> passed"]
    w = report.wire
    if report.job is not None:
        lines += _job_lines(report.job)
    lines += ["", f"== Wire == {w.honest_batches} honest batches, {w.honest_bytes:,} bytes: "
              f"{w.bytes_per_experience:.0f} "
              f"B per experience on the wire (msgpack: text, code, signature and framing); the code itself is "
              f"{w.code_bytes_per_experience} B at d = {w.profile['dim']}. The baseline is the profile's, named by "
              "its key and never sent (protocol v2)."]
    f = report.fidelity
    if f.n:
        lines.append(f"== Compression fidelity == cos(e, ê) over {f.n} published experiences: "
                     f"mean {f.cosine_mean:.3f}, min {f.cosine_min:.3f}")
    lines += ["", "== Attacks == experiences sent -> held by honest libraries (summed over nodes)"]
    for a in report.attacks:
        note = ("   well-formed by design: wrong lessons, honestly encoded and signed; only outcomes tell them "
                "apart (below)") if a.name == "poison" else ""
        lines.append(f"  {a.name:<14} {a.experiences_sent:>4} -> {a.held_by_honest_libraries}{note}")
    lines += _poison_lines(report.poison)
    fb = report.feedback
    lines += ["", f"== Feedback == {fb['tasks_per_node']} practice tasks per honest node: passed "
              + ", ".join(f"{100 * p:.0f}%" for p in fb["passed"]) + "; lesson outcomes reported "
              + ", ".join(map(str, fb["outcomes_reported"]))]
    lines += ["", "== Held-out accuracy == change facts only, greedy, the same prompts in every condition but for the "
              "lessons; task i is answered by honest node i mod H; own, poisoned and after feedback on every other "
              "block of H tasks, each paired with 'without' on its own tasks"]
    lines.append(format_table([_condition_row(c) for c in report.conditions],
                              ["condition", "n", "accuracy", "Wilson 95%", "minus without", "paired 95% CI",
                               "coverage", "attacker lessons", "no code"]))
    c = report.controls
    if c["n"]:
        lines.append(f"  controls (APIs that did not change, n = {c['n']}): without {_pct(c['without'])}, "
                     f"with the fleet's lessons {_pct(c['fleet'])}")
    lines += ["  what running the replies showed: " + "; ".join(
        f"{name}: " + ", ".join(f"{k} {v}" for k, v in kinds.items()) for name, kinds in report.ran.items())]
    lines += ["  coverage: share of prompts that received lessons; attacker lessons: share that received one from "
              "a Byzantine node; no code: replies with no line of Python.",
              "", "Seconds: " + ", ".join(f"{k} {v}" for k, v in report.seconds.items())
              + _answer_line(report.config.get("answers"))]
    return "\n".join(lines)


def _job_lines(job: JobAct) -> list[str]:
    def said(line: Line) -> str:
        return f"{line.code!r} -> {line.outcome}"

    lines = ["", f"== On the job == {job.fact}: no task file, no reference, no lesson written by anyone; "
             "each agent behind its own `dso proxy`, before its own node",
             f"  agent B ({job.model_b}), its node empty: {said(job.before)}",
             f"  agent A ({job.model_a}), another instance, through `dso proxy --learn`:"]
    lines += [f"    try {i}: {said(line)}" for i, line in enumerate(job.practice, 1)]
    lines += [f"  A's proxy read {job.episodes} episode(s) off that traffic and filed, on probation in node A:"]
    lines += [f"    {text}" for text in job.lessons] or ["    nothing"]
    lines += [f"  node A published; node B admitted {job.admitted} of them through DeltaSoup, with the evidence "
              "node A signed: " + ", ".join(f"{e} episode(s), {a} agent(s)" for e, a in job.evidence),
              f"  agent B again, its proxy injecting what node B holds: {said(job.after)}",
              "  " + ("one agent's error became another agent's first-try pass" if job.shown else
                      "the story did not hold on this run: see the lines above")
              + f" ({job.seconds:.0f} s{_answer_line(job.answers)})"]
    return lines


def _poison_lines(p: Poison) -> list[str]:
    lines = ["", f"== Poison == {len(p.rows)} wrong lessons; an honest node hides every row of a signer whose "
             f"reputation (0.5 at first, x0.9 + 0.1 per outcome, 1 helped / 0 harmed) falls under {p.floor}, "
             "or whose lessons were reported harmful more often than helpful beyond chance (sign test, p < 0.05)"]
    lines += [f"  {r.id:>4} [{r.signer}] {r.text[:110]}{'...' if len(r.text) > 110 else ''}" for r in p.rows]
    for node in p.nodes:
        lines.append(f"  {node.node}: holds {node.held}, dropped {len(node.dropped)}"
                     + (f" ({', '.join(node.dropped)})" if node.dropped else ""))
        for s in node.signers:
            why = (f"after {s.harmful} harmful and {s.helped} helpful outcomes" if s.harmful + s.helped
                   else "with no outcome reported on its lessons")
            verdict = (f"kept: reputation {s.reputation:.3f} >= {p.floor}" if not s.dropped else
                       f"dropped: reputation {s.reputation:.3f} < {p.floor}" if s.reputation < p.floor else
                       f"dropped: convicted by its outcomes after {s.convicted_after} feedback tasks "
                       f"(reputation {s.reputation:.3f})")
            lines.append(f"      {s.name}'s {len(s.rows)} rows {verdict}, {why} on {node.node}'s tasks")
    lines.append(f"  poison rows hidden (least over honest nodes) {100 * p.poison_rows_hidden:.0f}%, "
                 "honest peers' rows "
                 f"hidden (most) {100 * p.honest_rows_hidden:.0f}%")
    return lines


def _condition_row(c: Condition) -> dict:
    first = c.name == "without"
    return {"condition": CONDITIONS[c.name], "n": c.n, "accuracy": _pct(c.accuracy), "Wilson 95%": _span(c.wilson95),
            "minus without": "" if first else f"{100 * c.minus_without:+.1f} pts",
            "paired 95% CI": "" if first else _span(c.minus_without_ci95, "+"), "coverage": _pct(c.coverage),
            "attacker lessons": _pct(c.from_attackers), "no code": c.no_code}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _span(pair: tuple[float, float], sign: str = "") -> str:
    return f"[{100 * pair[0]:{sign}.1f}, {100 * pair[1]:{sign}.1f}]"


def _answer_line(answers: dict | None) -> str:
    if not answers:
        return ""
    return (f"; model answers generated {answers['generated']}, replayed from the answer cache "
            f"{answers['from_cache']}")
