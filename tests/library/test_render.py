from dsonet.experience import Experience
from dsonet.library import Hit, render
from dsonet.library.render import HEADER


def exps(n):
    return [Experience(f"When situation {i} happens, apply strategy number {i} carefully", "math") for i in range(n)]


def test_render_puts_numbered_experiences_above_the_problem():
    out = render([Hit(e, 0.9) for e in exps(2)], "What is 2 + 2?")
    assert out.startswith(HEADER)
    assert out.index("1. [math] When situation 0") < out.index("2. [math] When situation 1") < out.index("What is 2 + 2?")
    assert out.endswith("## Problem\nWhat is 2 + 2?")


def test_render_stops_before_max_tokens_counted_with_the_tokenizer():
    class WordTokenizer:  # one token per whitespace word; counts what render asks it to
        def encode(self, text):
            return text.split()

    header = len(HEADER.split())
    per_line = len("1. [math] When situation 0 happens, apply strategy number 0 carefully".split())
    out = render(exps(10), "Q?", tokenizer=WordTokenizer(), max_tokens=header + 3 * per_line)
    assert "3. [math]" in out and "4. [math]" not in out


def test_render_with_a_real_tokenizer_and_nothing_that_fits_returns_the_problem(minilm):
    tok = minilm.model.tokenizer
    assert render(exps(3), "Q?", tokenizer=tok, max_tokens=5) == "Q?"
    out = render(exps(3), "Q?", tokenizer=tok, max_tokens=120)
    assert "1. [math]" in out and len(tok.encode(out, add_special_tokens=False)) <= 120 + 10
