"""The output of the processes a test starts (Kafka workers and routers): each process writes its
stdout and stderr to a file of its own, and a failing test's report shows the tails of the files
of every set still open (the hook in tests/conftest.py), so a CI failure says what they did."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

TAIL_LINES = 60


LIVE: list[ProcessLogs] = []  # the sets open now: what a failing test's report shows


@dataclass(frozen=True)
class Logged:
    name: str
    proc: subprocess.Popen[bytes]
    path: Path


class ProcessLogs:
    """The log files of one fixture's processes, in a temporary directory it owns: deleted at
    ``close``, unless a failing test's report showed them (the report names where they are)."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.dir = Path(tempfile.mkdtemp(prefix=f"memstream-{title}-"))
        self.logged: list[Logged] = []
        self.keep = False
        LIVE.append(self)

    def popen(self, name: str, args: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
        path = self.dir / f"{name}-{len(self.logged)}.log"
        with path.open("wb") as out:  # the child holds its own copy of the descriptor
            proc = subprocess.Popen(list(args), env=dict(env), stdout=out, stderr=subprocess.STDOUT)
        self.logged.append(Logged(f"{name}-{len(self.logged)}", proc, path))
        return proc

    def tails(self, lines: int = TAIL_LINES) -> list[tuple[str, str]]:
        """(title, text) per process: its state and the last ``lines`` lines it wrote."""
        out = []
        for item in self.logged:
            code = item.proc.poll()
            state = "running" if code is None else f"exited with {code}"
            try:
                text = "\n".join(item.path.read_text(errors="replace").splitlines()[-lines:])
            except OSError as exc:
                text = f"(log unreadable: {exc})"
            out.append((f"{self.title} {item.name} (pid {item.proc.pid}, {state}) {item.path}", text))
        return out

    def summary(self) -> str:
        """Every tail as one text, for an assertion's message."""
        self.keep = True
        return "\n".join(f"--- {title}\n{text}" for title, text in self.tails())

    def close(self) -> None:
        if self in LIVE:
            LIVE.remove(self)
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def failure_sections() -> list[tuple[str, str]]:
    """The report sections of a failed test: the tails of every open set's processes."""
    sections = []
    for logs in LIVE:
        logs.keep = True
        sections.extend((f"log of {title}", text) for title, text in logs.tails())
    return sections
