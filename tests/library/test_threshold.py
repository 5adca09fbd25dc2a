"""The relevance threshold: calibrated for each shipped space, kept beside the head (not in the
profile), overridden by DSONET_MIN_SIMILARITY, and the default of every entry point."""

import inspect
import json
from pathlib import Path

import click
import pytest

import dsonet.encoders
from dsonet.cli.main import cli
from dsonet.codec import Profile
from dsonet.encoders.rescore import backbone_rescorer
from dsonet.integrations.langchain import DsonetRetriever
from dsonet.library import Library
from dsonet.library.policy import (ENV_MIN_SIMILARITY, MIN_SIMILARITY, PolicyError, RetrievalPolicy,
                                   default_min_similarity)
from dsonet.memory import LocalMemory
from dsonet.network.api import SearchRequest
from dsonet.network.client import NodeClient
from dsonet.network.node import Node

CALIBRATION = Path(dsonet.encoders.__file__).parent / "weights" / "minilm-zen7680" / "relevance.json"
SECOND_STAGE = Path(dsonet.encoders.__file__).parent / "weights" / "all-minilm-l6-v2" / "rescore.json"
LESSON = "When a ratio is asked, simplify the fraction by the greatest common divisor."
BETWEEN = "Simplify the ratio 12:18."  # scores 0.545 against LESSON: above the calibrated threshold, under 0.6


@pytest.fixture(autouse=True)
def no_override(monkeypatch):
    monkeypatch.delenv(ENV_MIN_SIMILARITY, raising=False)


@pytest.fixture(scope="module")
def calibrated() -> float:
    return json.loads(CALIBRATION.read_text())["min_similarity"]


@pytest.fixture(scope="module")
def second_stage() -> float:
    """The threshold of a text search's second stage (`dsonet.encoders.rescore`)."""
    return json.loads(SECOND_STAGE.read_text())["min_similarity"]


def test_the_default_spaces_threshold_is_the_one_beside_its_head(calibrated):
    entry = json.loads(CALIBRATION.read_text())
    assert default_min_similarity() == calibrated == default_min_similarity(entry["encoder_id"])
    assert default_min_similarity(Profile(16, 16, entry["encoder_id"])) == calibrated


@pytest.mark.parametrize("path", sorted(CALIBRATION.parents[1].glob("*/relevance.json")), ids=lambda p: p.parent.name)
def test_every_shipped_calibration_is_what_its_space_uses(path):
    entry = json.loads(path.read_text())
    assert default_min_similarity(entry["encoder_id"]) == entry["min_similarity"]
    assert entry["held_out"]["precision"] >= 0.9  # injection precision on lessons the choice never saw


def test_the_calibration_names_the_shipped_heads_space():
    # a retrained head has another id: this fails until `dso bench relevance --write-calibration` runs again
    assert json.loads(CALIBRATION.read_text())["encoder_id"] == dsonet.encoders.default_encoder().id


def test_the_threshold_is_not_part_of_the_profile_so_its_key_does_not_move():
    profile = Profile(16, 16, json.loads(CALIBRATION.read_text())["encoder_id"])
    assert set(profile.to_dict()) == {"dim", "group_size", "encoder_id", "rotation_seed", "baseline_hash"}


def test_a_space_never_calibrated_keeps_the_protocols_threshold():
    assert default_min_similarity("st:some-other-model") == MIN_SIMILARITY
    assert default_min_similarity(Profile(16, 16, "none")) == MIN_SIMILARITY


def test_the_environment_overrides_every_space(monkeypatch):
    monkeypatch.setenv(ENV_MIN_SIMILARITY, "0.25")
    assert default_min_similarity() == default_min_similarity("st:some-other-model") == 0.25


@pytest.mark.parametrize("value", ["high", "1.5", "nan"])
def test_a_bad_environment_value_is_refused_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(ENV_MIN_SIMILARITY, value)
    with pytest.raises(PolicyError, match=f"{ENV_MIN_SIMILARITY}: '{value}' is not a cosine"):
        default_min_similarity()


def test_a_policy_left_unset_takes_its_spaces_threshold_and_an_explicit_one_stays(calibrated):
    space = json.loads(CALIBRATION.read_text())["encoder_id"]
    assert RetrievalPolicy().resolved(space).min_similarity == calibrated
    assert RetrievalPolicy(min_similarity=0.2).resolved(space).min_similarity == 0.2
    with pytest.raises(PolicyError, match="resolve the policy"):
        RetrievalPolicy().admits(0.9)


@pytest.mark.parametrize("command", ["search", "ask", "learn", "eval", "mcp", "proxy"])
def test_every_cli_command_leaves_the_threshold_to_the_space_and_reads_the_environment(command):
    (option,) = [p for p in cli.get_command(click.Context(cli), command).params if p.name == "min_similarity"]
    assert option.default is None and option.envvar == ENV_MIN_SIMILARITY


@pytest.mark.parametrize("call", [Library.search, Library.search_vector, Node.search, Node.recall, NodeClient.search,
                                  LocalMemory.search])
def test_every_python_entry_point_leaves_the_threshold_to_the_space(call):
    assert inspect.signature(call).parameters["min_similarity"].default is None


def test_the_api_and_langchain_leave_the_threshold_to_the_space():
    assert SearchRequest(query="q").min_similarity is None
    assert DsonetRetriever.model_fields["min_similarity"].default is None


@pytest.fixture(scope="module")
def ratio_library(tmp_path_factory):
    lib = Library(tmp_path_factory.mktemp("threshold") / "lib.sqlite")
    lib.add(LESSON, domain="math.ratios")
    yield lib
    lib.close()


def test_memory_and_langchain_find_by_default_what_the_protocols_threshold_dropped(ratio_library, calibrated,
                                                                                   second_stage):
    memory = LocalMemory(ratio_library)
    hits = memory.search(BETWEEN)
    assert [h.experience.text for h in hits] == [LESSON] and hits.threshold == second_stage <= hits.best_score
    one_stage = memory.search(BETWEEN, min_similarity=calibrated)  # a cosine in the profile's space: one stage
    assert one_stage.threshold == calibrated and calibrated <= one_stage.best_score < MIN_SIMILARITY
    assert memory.search(BETWEEN, min_similarity=MIN_SIMILARITY) == []  # what 0.6 gave
    docs = DsonetRetriever(memory=memory).invoke(BETWEEN)
    assert [d.page_content for d in docs] == [LESSON]


def test_an_empty_search_carries_the_threshold_and_the_best_score_and_no_retrieval_id(ratio_library, second_stage):
    hits = LocalMemory(ratio_library).search("How do I undo a git commit?")
    assert hits == [] and hits.retrieval_id is None
    assert hits.threshold == second_stage and hits.best_score < second_stage


def test_the_second_stages_threshold_is_the_one_beside_its_backbone(second_stage):
    entry = json.loads(SECOND_STAGE.read_text())
    assert entry["encoder_id"] == backbone_rescorer(dsonet.encoders.default_encoder()).id
    assert default_min_similarity(entry["encoder_id"]) == second_stage
    assert entry["held_out"]["precision"] >= 0.95 and entry["held_out"]["silent"] >= 0.9  # on lessons never tuned on
