"""The main job (`dso demo`): a whole DSO fleet on the embedded defaults, measured end to end.

Honest nodes learn lessons with the LLM on their own slice of tasks (training-free GRPO),
encode them into the profile's space, compress, sign and publish them; Byzantine nodes
attack (`adversary`), then poison the fleet with plausible but wrong lessons. Every honest
node runs DeltaSoup on what it reads. Held-out tasks are answered without lessons, with each
node's own, with the fleet's and with the poisoned fleet's (`report`).

    run.py        DemoConfig and run_demo: the steps, top to bottom
    fleet.py      the Fleet interface, and in-process nodes on one shared log
    nats_fleet.py node processes on a local three-server NATS JetStream cluster (--nats)
    agents.py     every call into dsonet.learn: the LLM, the tasks, learning, answering
    adversary.py  the Byzantine nodes' attacks and poison
    report.py     the typed report, and format_report
"""

from dsonet.sim.nodes import Fleet, InProcessFleet, NodeState
from dsonet.demo.report import DemoReport, format_report
from dsonet.demo.run import DemoConfig, run_demo

__all__ = ["DemoConfig", "DemoReport", "Fleet", "InProcessFleet", "NodeState", "format_report", "run_demo"]
