"""The server commands cap glibc's malloc arenas at one (api/cli/arenas.py), unless
MALLOC_ARENA_MAX says otherwise: threads allocating at once then share the main arena."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# Four threads allocate and stay alive together (each would take an arena of its own), then
# glibc's malloc_info lists the arenas ("<heap nr=...>").
PROBE = """
import ctypes, os, sys, tempfile, threading
from memstream.api.cli.arenas import limit_arenas
print(limit_arenas(os.environ))
libc = ctypes.CDLL("libc.so.6")
held, ready, done = [], threading.Barrier(5), threading.Event()
def work():
    held.append(ctypes.create_string_buffer(300_000))
    ready.wait()
    done.wait()
threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
ready.wait()
fd, path = tempfile.mkstemp()
libc.fdopen.restype = ctypes.c_void_p
f = ctypes.c_void_p(libc.fdopen(fd, b"w"))
libc.malloc_info(0, f)
libc.fflush(f)
print(open(path).read().count("<heap nr="))
os.unlink(path)
done.set()
"""


def arenas(env: dict[str, str]) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60, check=True)
    capped, heaps = out.stdout.split()
    return capped, int(heaps)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's arenas")
def test_the_server_commands_share_one_arena() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    assert arenas(env) == ("1", 1)
    # A number the operator chose stays: glibc applied it at start, and it is left alone.
    assert arenas(env | {"MALLOC_ARENA_MAX": "8"}) == ("None", 5)


def test_every_server_command_caps_them_before_it_starts() -> None:
    from memstream.api.cli import commands

    for command in (commands.serve, commands.mcp, commands.worker):
        source = command.callback.__code__.co_names  # type: ignore[union-attr]
        assert "limit_arenas" in source, command.name
