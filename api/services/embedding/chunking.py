"""How one embed call's texts are cut into model runs: the cheapest cut by a measured cost model.

A run pads every text to its longest, so one long text among short ones makes the short ones
cost as much as it does: conversation turns run from 18 to 116 word pieces, and 37 % of what a
run of 8 of them held was padding (docs/embedding.md, "Runs planned by cost"). Each run also
has a fixed cost, so cutting too finely loses as well. The plan is the cheapest contiguous cut
of the texts sorted by length under a cost model of both.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["ATTENTION_PER_TOKEN", "FIXED_TOKENS", "plan_runs", "run_cost"]

# The cost of a run of n texts padded to w word pieces, in units of one word piece of one text:
# FIXED_TOKENS + n * w * (1 + ATTENTION_PER_TOKEN * w). Fitted on the default model (MiniLM-L6
# int8, 2 intra-op threads) over runs of 1-8 texts of 16-128 pieces: 1.8-2.3 ms a run, 75 us a
# piece, 0.11-0.17 us a piece squared (attention); plans barely change from 12 to 48 pieces a
# run. `bench/embed_chunking.py --calibrate` refits it.
FIXED_TOKENS = 24.0
ATTENTION_PER_TOKEN = 0.0023


def run_cost(texts: int, width: int, *, fixed: float = FIXED_TOKENS, attention: float = ATTENTION_PER_TOKEN) -> float:
    """The modelled cost of one run of ``texts`` texts padded to ``width`` pieces."""
    return fixed + texts * width * (1.0 + attention * width)


def plan_runs(
    lengths: Sequence[int],
    *,
    max_texts: int,
    max_tokens: int,
    fixed: float = FIXED_TOKENS,
    attention: float = ATTENTION_PER_TOKEN,
) -> list[list[int]]:
    """The runs (lists of indices into ``lengths``) that embed every text once at the least
    modelled cost: each run is a stretch of the texts sorted by length, of at most ``max_texts``
    texts and ``max_tokens`` padded pieces (a text longer than that runs alone). Ties keep
    the longer runs. The order of the runs and of the texts within one is by length."""
    if max_texts < 1 or max_tokens < 1:
        raise ValueError(f"max_texts and max_tokens must be >= 1, got {max_texts} and {max_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    n = len(order)
    best = [0.0] + [float("inf")] * n  # best[j]: the cheapest plan for the j shortest texts
    start = [0] * (n + 1)  # where the last run of that plan starts
    for end in range(1, n + 1):
        width = lengths[order[end - 1]]  # the run's longest: it sets the padding
        for first in range(end - 1, max(0, end - max_texts) - 1, -1):
            size = end - first
            if size > 1 and size * width > max_tokens:
                break  # a longer stretch only pads more
            cost = best[first] + run_cost(size, width, fixed=fixed, attention=attention)
            if cost <= best[end]:
                best[end], start[end] = cost, first
    runs: list[list[int]] = []
    end = n
    while end > 0:
        runs.append(order[start[end] : end])
        end = start[end]
    runs.reverse()
    return runs
