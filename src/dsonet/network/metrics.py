"""Prometheus metrics of one node, in the node's own registry (many nodes share a process in tests)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest


class NodeMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.submitted = Counter("dso_submitted_experiences", "Experiences submitted through this node", registry=r)
        self.deleted = Counter("dso_deleted_experiences", "Experiences deleted (locally or by tombstone)", registry=r)
        self.published_batches = Counter("dso_published_batches", "Batches acknowledged by the stream", registry=r)
        self.published_experiences = Counter("dso_published_experiences", "Experiences in acknowledged batches",
                                             registry=r)
        self.published_bytes = Counter("dso_published_bytes", "Payload bytes of acknowledged batches", registry=r)
        self.publish_failures = Counter("dso_publish_failures", "Publish attempts not acknowledged", registry=r)
        self.received = Counter("dso_received_messages", "Messages read from the stream (own excluded)", registry=r)
        self.accepted_batches = Counter("dso_accepted_batches", "Batches that passed verification", registry=r)
        self.rejected_batches = Counter("dso_rejected_batches", "Messages refused at verification", ["reason"],
                                        registry=r)
        self.deferred_batches = Counter("dso_deferred_batches", "Batches held back: a known sender over its rate",
                                        registry=r)
        self.outcomes = Counter("dso_outcomes", "Outcomes reported for retrievals this node issued", ["helped"],
                                registry=r)
        self.ingested_experiences = Counter("dso_ingested_experiences", "Rows admitted by DeltaSoup", registry=r)
        self.rejected_experiences = Counter("dso_rejected_experiences", "Rows refused by DeltaSoup", ["reason"],
                                            registry=r)
        self.set_aside = Counter("dso_set_aside_experiences", "Rows quarantined: stored on a re-encoding sample's "
                                 "word, then a sample caught their signer lying", registry=r)
        self.search_seconds = Histogram("dso_search_seconds", "Search latency", registry=r,
                                        buckets=(0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0))

    def render(self) -> bytes:
        return generate_latest(self.registry)
