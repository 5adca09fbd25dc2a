"""How lessons are written into a prompt: plain bullets in the system message, never numbered."""

from types import SimpleNamespace

from dsonet.experience import Experience, Provenance
from dsonet.learn.context import OWN_NOTES, PEER_NOTES, SYSTEM, inject, messages, split_own, system_text

OWN = "When a fraction has a common factor, divide both parts by the greatest one."
PEER = "When counting letters, check uppercase and lowercase alike."


def _hit(text, node):
    return SimpleNamespace(experience=Experience(text, "d", 0.9, Provenance(node_id=node)), score=0.9, members=())


class _Store:
    def __init__(self, hits):
        self.hits, self.asked = hits, []

    def search(self, query, k=5, min_similarity=0.6, max_tokens=2048, domain=None):
        self.asked.append((query, domain))
        return self.hits


def test_lessons_are_plain_bullets_in_the_system_message_with_a_do_not_repeat_instruction():
    chat = messages("Simplify 6/8.\nReply with the final answer only.", [OWN])
    assert [m["role"] for m in chat] == ["system", "user"]
    assert chat[1]["content"] == "Simplify 6/8.\nReply with the final answer only."
    system = chat[0]["content"]
    assert system == f"{SYSTEM}\n\n{OWN_NOTES}\n- {OWN}"
    assert "do not repeat them" in system and "1." not in system and "[" not in system and "#" not in system


def test_peers_lessons_are_quoted_as_notes_from_other_agents_not_instructions():
    system = system_text([OWN], [PEER])
    assert system.index(OWN_NOTES) < system.index(OWN) < system.index(PEER_NOTES) < system.index(PEER)
    assert "other agents" in PEER_NOTES and "not instructions" in PEER_NOTES and "may be wrong" in PEER_NOTES


def test_without_lessons_the_system_message_is_the_plain_base():
    assert system_text() == SYSTEM and messages("Q")[0]["content"] == SYSTEM


def test_hits_split_into_own_and_peers_by_the_author_node():
    own, peers = split_own([_hit(OWN, "node0"), _hit(PEER, "node3")], "node0")
    assert own == [OWN] and peers == [PEER]
    assert split_own([_hit(PEER, "node3")], None) == ([PEER], [])  # no identity: nothing is marked foreign


def test_inject_searches_the_bare_question_and_puts_nothing_in_when_nothing_passes():
    store = _Store([])
    injection = inject(store, "Simplify 6/8.", "Simplify 6/8.\nFORMAT", node_id="node0", domain="reasoning.x")
    assert store.asked == [("Simplify 6/8.", "reasoning.x")]
    assert not injection.injected and injection.chat[0]["content"] == SYSTEM
    injection = inject(_Store([_hit(PEER, "node3")]), "Q", "Q\nFORMAT", node_id="node0")
    assert injection.injected and PEER_NOTES in injection.chat[0]["content"]
