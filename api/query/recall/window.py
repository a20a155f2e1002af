"""How close to the question the stretch of conversation around a turn is: query-time context.

A turn that answers a question often says little that looks like it ("Yes, twice last month"),
while the turns around it (the question asked, the topic raised) do. The neighbour signals read
the turns just before and after; these read the window of ``radius`` turns either side, in the
order the agent wrote them, and give the window's best and mean cosine with the query. The
cosines come from the vector list or are read by memory id (``VectorProjection.cosines``): no
search, no model call, nothing stored. Why and what it gains: docs/eval.md, "Seventh pass".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

Adjacency = Mapping[str, tuple[str | None, str | None]]


def members(
    refs: Iterable[str],
    adjacency: Adjacency,
    adjacent: Callable[[list[str]], Adjacency],
    radius: int,
    admit: Callable[[str], bool] = lambda _: True,
) -> dict[str, list[str]]:
    """Each ref with the refs up to ``radius`` places before and after it in write order
    (itself first). ``adjacency`` is what is known already; ``adjacent`` reads the rest, one
    ring at a time. A neighbour ``admit`` refuses ends the window on that side."""
    known = dict(adjacency)
    out: dict[str, list[str]] = {r: [r] for r in refs}
    ends: dict[str, list[str | None]] = {r: [r, r] for r in out}  # the farthest before / after
    for _ in range(radius):
        frontier = {e for pair in ends.values() for e in pair if e is not None and e not in known}
        if frontier:
            known.update(adjacent(sorted(frontier)))
        for ref, pair in ends.items():
            for side in (0, 1):
                at = pair[side]
                step = known.get(at, (None, None))[side] if at is not None else None
                if step is not None and not admit(step):
                    step = None
                pair[side] = step
                if step is not None:
                    out[ref].append(step)
    return out


def signals(around: Mapping[str, list[str]], cosine: Mapping[str, float]) -> dict[str, tuple[float, float]]:
    """Each ref's (best, mean) cosine over its window's rows with a cosine."""
    out = {}
    for ref, rows in around.items():
        got = [cosine[r] for r in rows if r in cosine]
        out[ref] = (max(got), sum(got) / len(got)) if got else (0.0, 0.0)
    return out


def around(
    refs: Iterable[str],
    adjacency: Adjacency,
    adjacent: Callable[[list[str]], Adjacency],
    radius: int,
    admit: Callable[[str], bool],
    known: Mapping[str, float],
    read: Callable[[set[str]], Mapping[str, float]],
) -> dict[str, tuple[float, float]]:
    """``signals`` for each of ``refs``: cosines from ``known`` (the vector list's, those read
    already), the rest of the windows' read by id with ``read``."""
    spans = members(refs, adjacency, adjacent, radius, admit)
    unread = {r for rows in spans.values() for r in rows} - known.keys()
    cosine = {**known, **read(unread)} if unread else known
    return signals(spans, cosine)
