"""The network layer: transports (in-process, NATS JetStream), the node service and its HTTP API.

Nodes do not gossip themselves: batches travel through one replicated JetStream stream
(or an in-process log for simulations), and every node builds its own library from it.
"""

from dsonet.network.transport import InProcessHub, InProcessTransport, Message, Transport, TransportError, subject_for

__all__ = ["InProcessHub", "InProcessTransport", "Message", "Transport", "TransportError", "subject_for"]
