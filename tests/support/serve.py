"""`memstream serve` as a real process (the venv's entry point), up once it printed its banner:
the URLs and settings it announced, parsed from stderr."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent  # the venv's bin: `memstream` is installed there
BANNER_END = "  access control:"  # the banner's last line (text logs)
START_TIMEOUT_S = 120.0


def _is_banner_end(line: str) -> bool:
    """The text banner's last line, or the banner's one record of JSON logs."""
    return line.startswith(BANNER_END) or (line.startswith("{") and '"access_control":' in line)


@dataclass
class Served:
    """What the process announced: its first line and each ``label: value`` below it (with JSON
    logs: the record's message and fields)."""

    headline: str
    fields: dict[str, str]
    stderr: list[str] = field(default_factory=list)  # every line so far (the reader keeps appending)


def _parse(lines: list[str]) -> Served:
    end = next(i for i, line in enumerate(lines) if _is_banner_end(line))
    if lines[end].startswith("{"):  # JSON logs: the record's fields
        record = json.loads(lines[end])
        return Served(record["msg"], {k: str(v) for k, v in record.items()}, lines)
    start = max(i for i, line in enumerate(lines[:end]) if line.startswith("memstream is listening on "))
    fields: dict[str, str] = {}
    for line in lines[start + 1 : end + 1]:
        label, _, value = line.strip().partition(": ")
        fields[label] = value.strip()
    return Served(lines[start], fields, lines)


@contextmanager
def serve_process(args: list[str], env: dict[str, str]) -> Iterator[Served]:
    """Start ``memstream serve ARGS`` with ``env`` over this environment; yield once its banner
    is complete; SIGTERM it afterwards and check it stopped cleanly (uvicorn shuts down, then
    re-raises the signal: killed by SIGTERM, or 0)."""
    proc = subprocess.Popen(
        [str(BIN / "memstream"), "serve", *args],
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    done: queue.Queue[bool] = queue.Queue()

    def read() -> None:  # drains stderr to the end, so the pipe never fills
        assert proc.stderr is not None
        announced = False
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if not announced and _is_banner_end(line):
                announced = True
                done.put(True)
        done.put(False)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        try:
            ok = done.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            ok = False
        if not ok:
            pytest.fail("memstream serve printed no banner:\n" + "\n".join(lines))
        yield _parse(lines)
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        reader.join(timeout=10)
    assert code in (0, -signal.SIGTERM), f"exit {code}\n" + "\n".join(lines)
