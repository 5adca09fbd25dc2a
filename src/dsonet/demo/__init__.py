"""The main job (`dso demo`): a fleet of coding agents learns its environment together, measured end to end.

A configuration of the drift scenario (`dsonet.sim.scenario`), as `dso bench learn --family drift`
is: one line of Python against the libraries installed in the task environment, checked by running
it in the sandbox. Honest nodes each practise on their own facts and learn lessons (the reflector
writes them from what running the attempts showed); they encode, compress, sign and publish them;
Byzantine nodes attack (`dsonet.sim.adversary`), then poison the fleet with a plausible wrong lesson
for every fact. The agents report each lesson's outcome, which moves their signers' reputation.
Held-out tasks are answered without lessons, with each node's own, with the fleet's, poisoned, and
after the feedback phase (`report`).

    run.py        DemoConfig and run_demo: the steps, top to bottom
    report.py     the typed report, built from what the run counted
    text.py       format_report: the report as printed
"""

from dsonet.demo.report import DemoReport
from dsonet.demo.text import format_report
from dsonet.demo.run import DemoConfig, run_demo
from dsonet.sim.nodes import Fleet, InProcessFleet, NodeState

__all__ = ["DemoConfig", "DemoReport", "Fleet", "InProcessFleet", "NodeState", "format_report", "run_demo"]
