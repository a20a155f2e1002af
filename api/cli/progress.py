"""Progress of long CLI work (import, export, backup, restore) drawn on stderr: stdout keeps the
command's own output (JSON, an export's lines) byte for byte, for pipes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from memstream.api.services.progress import Progress

progress_option = click.option(
    "--progress/--no-progress",
    "show_progress",
    default=None,
    help="Draw a progress bar on stderr (default: only when stderr is a terminal).",
)


def _silent(_done: int, _total: int, /) -> None:
    """What a quiet run reports to: nothing."""


@contextmanager
def progress_bar(label: str, *, unit: str, show: bool | None) -> Iterator[Progress]:
    """A :class:`Progress` drawing one bar of ``unit`` ('records' or 'bytes') with its rate and,
    once the total is known, the time left. ``show`` None: only on a terminal (rich's test,
    which also honours TTY_COMPATIBLE and FORCE_COLOR); True draws it anyway (as a terminal
    would: a log file gets the control codes); False: nothing."""
    from rich.console import Console

    console = Console(stderr=True, force_terminal=True if show else None)
    if not (console.is_terminal if show is None else show):
        yield _silent
        return
    import rich.progress as rp
    from rich.filesize import decimal

    count = rp.DownloadColumn() if unit == "bytes" else rp.MofNCompleteColumn()
    columns: tuple[Any, ...] = (count, rp.TextColumn("{task.fields[rate]}"))
    head = (rp.TextColumn(f"[bold]{label}"), rp.BarColumn())
    with rp.Progress(*head, *columns, rp.TimeRemainingColumn(), console=console) as bar:
        task = bar.add_task(label, total=None, rate="")
        started = time.perf_counter()

        def report(done: int, total: int, /) -> None:
            per_s = done / max(time.perf_counter() - started, 1e-9)
            rate = f"{decimal(int(per_s))}/s" if unit == "bytes" else f"{per_s:,.0f} {unit}/s"
            bar.update(task, completed=done, total=total, rate=rate)

        yield report
