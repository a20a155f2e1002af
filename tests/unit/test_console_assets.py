"""The console's script (api/faces/console/static/console.js), read as a file: it listens for
every event type the log can hold (the browser's EventSource needs one listener per type, so a
new type missing here would never reach the live panel), and it never turns server data into
markup (no innerHTML, outerHTML, insertAdjacentHTML, document.write, eval or Function)."""

from __future__ import annotations

import re
from pathlib import Path

from memstream.streams.events import EVENT_TYPES

SCRIPT = Path(__file__).resolve().parents[2] / "api" / "faces" / "console" / "static" / "console.js"


def test_the_console_listens_for_every_event_type() -> None:
    listed = re.search(r"const EVENT_TYPES = \[(.*?)\];", SCRIPT.read_text(), re.S)
    assert listed is not None
    assert set(re.findall(r'"([a-z_.]+)"', listed.group(1))) == set(EVENT_TYPES)


def test_the_console_builds_no_markup_from_strings() -> None:
    code = SCRIPT.read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "srcdoc"):
        assert sink not in code, sink
