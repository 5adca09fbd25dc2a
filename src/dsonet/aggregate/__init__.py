"""Byzantine-robust aggregation: DeltaSoup, the comparison rules, reputation and our defences."""

from dsonet.aggregate.config import DeltaSoupConfig
from dsonet.aggregate.errors import AggregationError, RateLimited
from dsonet.aggregate.phases import Rows, decompress_batches
from dsonet.aggregate.reputation import Reputation
from dsonet.aggregate.rules import RULE_NAMES, Admission, Rule, make_rule
from dsonet.aggregate.soup import DeltaSoup, RoundResult
from dsonet.aggregate.verify import Gate, verify_payload

__all__ = [
    "RULE_NAMES",
    "Admission",
    "AggregationError",
    "DeltaSoup",
    "DeltaSoupConfig",
    "Gate",
    "RateLimited",
    "Reputation",
    "RoundResult",
    "Rows",
    "Rule",
    "decompress_batches",
    "make_rule",
    "verify_payload",
]
