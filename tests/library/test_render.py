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


def test_render_with_nothing_retrieved_returns_the_problem():
    assert render([], "Q?") == "Q?"
