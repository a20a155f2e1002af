"""The file-search helper of the erasure tests never answers "gone" for a file that was renamed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.file_hits import files_holding


def test_a_file_renamed_during_the_look_is_found_under_its_new_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    part = tmp_path / "keys-0"
    part.mkdir()
    segment = part / "00000000000000000000.log"
    segment.write_bytes(b"..wrapped key..")
    (part / "00000000000000000000.index").write_bytes(b"nothing")
    read_bytes = Path.read_bytes

    def cleaner_renames_first(self: Path) -> bytes:
        if self == segment and segment.exists():  # as the broker's cleaner does between listing and read
            segment.rename(segment.with_name(segment.name + ".deleted"))
        return read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", cleaner_renames_first)
    found = files_holding(tmp_path, [b"nothing", b"wrapped key"], "keys-*")
    assert sorted((p.name, i) for p, i in found) == [
        ("00000000000000000000.index", 0),
        ("00000000000000000000.log.deleted", 1),
    ]
