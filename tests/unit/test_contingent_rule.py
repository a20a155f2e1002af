"""The contingent rule (CONTRACTS S2) as a pure function."""

from __future__ import annotations

from memstream.api.query.contingent import Carriers, Value, canonical_form, contingent_rows, find_carriers, occurs


def test_contingent_rule_units() -> None:
    assert canonical_form("0xEF0101") == canonical_form("ef0101") == "ef0101"
    assert canonical_form("1,000") == canonical_form("1000")
    assert occurs("port 8080.", "8080") and not occurs("port 18080", "8080") and not occurs("8080x", "8080")
    corpus = [("mem:1", "v 7 and 77"), ("mem:2", "v 77"), ("mem:3", "x 7")]
    assert find_carriers(["7"], corpus, 5) == Carriers(("mem:1", "mem:3"))
    assert find_carriers(["77"], corpus, 1) == Carriers(("mem:1",), truncated=True)
    standings = {"mem:1": "noise", "mem:3": "open"}
    rows, unjudged = contingent_rows(
        [Value("7", ("7",))], lambda v: find_carriers(v.forms, corpus, 5), standings.get, corpus_truncated=False
    )
    assert unjudged == []
    assert rows == [{"kind": "contingent", "value": "7", "carriers": [
        {"ref": "mem:1", "standing": "noise"}, {"ref": "mem:3", "standing": "open"}]}]  # fmt: skip
    standings["mem:3"] = "fact"
    rows, _ = contingent_rows(
        [Value("7", ("7",))], lambda v: find_carriers(v.forms, corpus, 5), standings.get, corpus_truncated=False
    )
    assert rows == []
