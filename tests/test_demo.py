"""The main job end to end, shrunk: real SmolLM2, real encoder, real codec, signatures and DeltaSoup."""

import asyncio

import pytest

from dsonet.demo import DemoConfig, format_report, run_demo


@pytest.mark.slow
def test_small_fleet_learns_shares_and_keeps_every_attack_out(tmp_path):
    config = DemoConfig(nodes=4, byzantine=1, train_per_node=2, eval_tasks=3, rollouts=3, max_tokens=24,
                        workdir=tmp_path)
    report = asyncio.run(run_demo(config, echo=lambda _: None))

    assert [n.role for n in report.nodes].count("honest") == 3
    assert all(a["held_by_honest_libraries"] == 0 for a in report.attacks.values())
    assert {"hijack", "random_signs", "forgery"} <= set(report.attacks)
    attacker = next(n for n in report.nodes if n.role != "honest")
    assert attacker.produced > 0 and attacker.published_bytes > 0
    assert report.accuracy["n"] == 3
    for key in ("without", "isolated", "fleet"):
        assert 0.0 <= report.accuracy[key] <= 1.0
    if report.fidelity["n"]:
        assert report.fidelity["cosine_mean"] > 0.5  # rotated BitDelta in the Zen space keeps ~0.7-0.9
    text = format_report(report)
    assert "Held-out accuracy" in text and "Attacks" in text


def test_demo_refuses_a_byzantine_majority():
    with pytest.raises(Exception, match="majority"):
        DemoConfig(nodes=4, byzantine=2)


@pytest.mark.slow
@pytest.mark.nats
def test_the_same_fleet_runs_as_node_processes_over_a_nats_cluster(tmp_path):
    import shutil

    from dsonet.demo import run_demo_nats

    if shutil.which("nats-server") is None:
        pytest.skip("nats-server is not on PATH: `make test` installs it (apt-get install nats-server)")
    config = DemoConfig(nodes=3, byzantine=1, train_per_node=2, eval_tasks=2, rollouts=3, max_tokens=24,
                        workdir=tmp_path)
    report = asyncio.run(run_demo_nats(config, echo=lambda _: None))

    assert [n.role for n in report.nodes].count("honest") == 2
    assert all(a["held_by_honest_libraries"] == 0 for a in report.attacks.values())
    attacker = next(n for n in report.nodes if n.role != "honest")
    assert attacker.batches_rejected >= 2  # its forged batch, refused by both honest node processes
    assert report.accuracy["n"] == 2
    assert not list((tmp_path / "nats").glob("*.pid")) or all(
        not p.read_text().strip() or not _alive(int(p.read_text())) for p in (tmp_path / "nats").glob("*.pid"))


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True
