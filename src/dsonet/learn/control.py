"""The neutral control: text of a lesson's length that says nothing about any task.

A longer prompt changes a small model's answers by itself (on aiw, neutral notes moved the 0.5B
from 3% to 5%, and wrong lessons to 21%): a lesson is credited only with what it does beyond
neutral text of its length in the same place. The learner's gate and `dso bench learn` use it.
"""

from __future__ import annotations

# True, harmless sentences with nothing to say about any task.
NEUTRAL = ("The city library opens at nine in the morning and closes at six on most weekdays during the year. "
           "Many gardens grow tomatoes in the summer and the plants need water every few days when it is dry. "
           "The river runs past the old mill and then turns east toward the hills beyond the small town. "
           "Trains to the coast leave twice an hour and the trip takes a little more than forty minutes.").split()


def neutral_notes(word_counts: list[int]) -> list[str]:
    """Neutral sentences, one per lesson, each as many words as the lesson it replaces."""
    out, at = [], 0
    for n in word_counts:
        words = [NEUTRAL[(at + i) % len(NEUTRAL)] for i in range(n)]
        at += n
        out.append(" ".join(words).rstrip(".") + ".")
    return out
