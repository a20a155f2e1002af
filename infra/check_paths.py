"""Every repository path the docs, the README and the code's docstrings and comments name must
exist: a moved or deleted file leaves no reference behind (issue 14). Run by infra/run-tests.sh.

    python infra/check_paths.py          # exit 1 and list every dangling reference
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP = ("streams", "projections", "api", "tests", "bench", "infra", "docs", ".ci")
# A path: one of the top-level folders, then segments; stops before punctuation that ends prose.
_TOPS = "|".join(re.escape(t) for t in TOP)
PATH = re.compile(rf"(?<![\w./-])((?:{_TOPS})/[\w./-]*[\w/])")
SCANNED = (".md", ".py", ".sh", ".toml", ".yaml", ".yml")
SKIPPED = ("bench/results/", "bench/eval_data/")
# Where benches write their results: named before a run has written them.
OUTPUTS = ("bench/results/",)


def references(text: str) -> list[tuple[int, str]]:
    """(line number, path) for every repository path a text names; globs and templates are
    not paths (``tests/*.py``, ``bench/results/<name>.json``) and are left alone."""
    out = []
    for no, line in enumerate(text.splitlines(), 1):
        for m in PATH.finditer(line):
            end = m.end()
            if end < len(line) and line[end] in "*<{$":
                continue
            out.append((no, m.group(1)))
    return out


def dangling(root: Path) -> list[str]:
    files = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    tracked = set(files)
    dirs = {str(Path(f).parent) for f in files} | {str(p) for f in files for p in Path(f).parents}
    problems = []
    for name in files:
        if not name.endswith(SCANNED) or name.startswith(SKIPPED) or not (root / name).exists():
            continue
        for no, ref in references((root / name).read_text(encoding="utf-8", errors="replace")):
            path = ref.rstrip("/.")
            if path in tracked or path in dirs or path.startswith(OUTPUTS) or (root / path).exists():
                continue
            problems.append(f"{name}:{no}: {ref}")
    return problems


def main() -> int:
    problems = dangling(ROOT)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} reference(s) to paths that are not in the repository", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
