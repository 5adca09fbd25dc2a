"""`CachedRuns`: a served model's sequences kept on disk and replayed as the engine would hand them over; and
`CachedLLM.cached`, what a chat model's cache would replay. The engine and the chat model here are stand-ins
that record what reached them: the subject is the caches' bookkeeping (the real engine's replay is in
tests/demo/test_job.py)."""

from dsonet.learn.cache import CachedRuns
from dsonet.learn.llama_engine import Generated, Request


class Engine:
    """Answers each request with its prompt's length, through ``on_done`` as `SlotEngine.run` does."""

    def __init__(self):
        self.seen: list[list[int]] = []

    def run(self, requests, intake=None) -> list[Generated]:
        requests = list(requests) + list(intake() if intake is not None else ())
        out = []
        for r in requests:
            self.seen.append(r.tokens)
            g = Generated(f"answer {len(r.tokens)}", 2, "length" if r.max_tokens == 2 else "stop")
            if r.on_text is not None:
                r.on_text(g.text)
            if r.on_done is not None:
                r.on_done(g)
            out.append(g)
        return out


def test_a_sequence_run_once_is_replayed_to_its_caller_and_the_engine_sees_only_new_ones(tmp_path):
    engine = Engine()
    cached = CachedRuns(engine.run, "m", tmp_path / "answers.sqlite")
    first = cached([Request([1, 2, 3]), Request([1, 2], max_tokens=2)])
    assert [g.text for g in first] == ["answer 3", "answer 2"] and engine.seen == [[1, 2, 3], [1, 2]]

    streamed, done = [], []
    again = CachedRuns(engine.run, "m", tmp_path / "answers.sqlite")  # a warm rerun: a new process, the same file
    late = [Request([4], on_done=done.append)]
    out = again([Request([1, 2], max_tokens=2, on_text=streamed.append, on_done=done.append)],
                intake=lambda: [late.pop()] if late else [])
    assert out == [Generated("answer 2", 2, "length")] and streamed == ["answer 2"]
    assert done == [Generated("answer 2", 2, "length"), Generated("answer 1", 2, "stop")]
    assert engine.seen[2:] == [[4]]  # only the sequence never run reached the engine
    assert (again.hits, again.misses) == (1, 1)


def test_anything_that_decides_a_sequence_is_in_its_key(tmp_path):
    engine = Engine()
    cached = CachedRuns(engine.run, "m", tmp_path / "answers.sqlite")
    base = Request([1, 2, 3])
    variants = [base, Request([1, 2, 3], temperature=0.7), Request([1, 2, 3], seed=1), Request([1, 2, 3], max_tokens=9),
                Request([1, 2, 3], stop=("\n",)), Request([1, 2, 3], grammar='root ::= "x"'), Request([1, 2, 4])]
    cached(variants)
    assert len(engine.seen) == len(variants)
    CachedRuns(engine.run, "other model", tmp_path / "answers.sqlite")([base])
    assert len(engine.seen) == len(variants) + 1


def test_cached_says_what_generate_would_replay_without_generating(tmp_path, stand_in_chats):
    from dsonet.learn.cache import CachedLLM
    from dsonet.learn.chat import user

    model = stand_in_chats
    llm = CachedLLM(model, tmp_path / "answers.sqlite")
    llm.generate([user("abc")], n=2, temperature=0.0, max_tokens=8, seed=0)
    hit, miss, other_n = (llm.cached([user(q)], n, 0.0, 8, 0)[0] for q, n in (("abc", 2), ("abcd", 2), ("abc", 1)))
    assert hit is not None and hit.texts == ("3", "3") and hit.completion_tokens == 6
    assert miss is None and other_n is None  # another question or another n is another answer
    assert model.asked == 1 and (llm.hits, llm.misses) == (0, 1)  # looking is neither a hit nor a miss
