"""The rules the code cites live in the repository (issue 27 point 4).

Code, tests, benchmarks and documents cite docs/contract.md ("contract §2.5.4";
"docs/contract.md §2.5.3" where an API reader sees it) or docs/decisions.md,
never the product specification outside the repository: a newcomer must be able
to read every rule the code says it follows. Two checks:

- no file cites the specification (the word ``SPEC`` or a path into the shared
  directory it came from);
- every ``contract §N.M`` names a section docs/contract.md has, and the
  contract's own references (its body, and the last column of its appendix)
  name sections it has too.

The seed tests (tests/domain/test_errors.py) read the framework's seed files
from the shared directory on purpose; only that reading is allowed.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = ROOT / "docs" / "contract.md"
SCANNED = ("oxide_batch", "tests", "project", "bench", "docs", "examples", "scripts")
SCANNED_FILES = ("README.md", "CHANGELOG.md")
SKIPPED_DIRECTORIES = {"__pycache__", "node_modules", ".venv"}
THIS_FILE = Path(__file__).resolve()
SEED_READER = ROOT / "tests" / "domain" / "test_errors.py"

# Built from parts, so that this file does not cite what it looks for.
_SPEC = "SP" + "EC"
SPEC_WORD = re.compile(rf"\b{_SPEC}\b")
SPEC_SECTION = re.compile(r"(?i)\bspec(?:ification)?(?:'s)?\s+§")
SPEC_PATHS = re.compile(
    r"(?:/work/|\.\./)shared/(?:" + _SPEC + r"\.md|reference/)|" + _SPEC + r"\.md"
)
SEED_PATH = re.compile(r"(?:/work/|\.\./)shared/seeds")

SECTION = r"§\s?(\d+(?:\.\d+)*)"
# "contract §2.5.4", "contract §2.1, §2.5.6", "contract §2.5.10–§2.5.12",
# "contract §2.3.1 and §2.3.2"
# A citation may wrap inside a comment: "contract\n    # §2.5.3".
WRAP = r"\s*(?:#\s*)?"
CITATION = re.compile(
    r"\bcontract(?:\.md)?\s+(?:#\s*)?"
    + SECTION
    + r"((?:\s*(?:,|/|–|\band\b|\bover\b)"
    + WRAP
    + r"§\s?\d+(?:\.\d+)*)*)"
)
HEADING = re.compile(r"^#{1,6}\s+§(\d+(?:\.\d+)*)\s", re.MULTILINE)


def scanned_files() -> list[Path]:
    files = [ROOT / name for name in SCANNED_FILES]
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_file() and not SKIPPED_DIRECTORIES & set(path.parts):
                files.append(path)
    return files


def text_of(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace")


def sections() -> set[str]:
    return set(HEADING.findall(CONTRACT.read_text(encoding="utf-8")))


def cited(text: str) -> list[tuple[int, str]]:
    """Every section a ``contract §…`` citation names, with its line."""
    found = []
    for match in CITATION.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        found.append((line, match.group(1)))
        found.extend((line, more) for more in re.findall(SECTION, match.group(2)))
    return found


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


def test_the_contract_has_numbered_sections() -> None:
    numbers = sections()
    assert {"1", "2", "2.1", "2.5.4", "4.6", "6.2", "8"} <= numbers


def test_nothing_cites_the_specification_outside_the_repository() -> None:
    offenders = []
    for path in scanned_files():
        if path == THIS_FILE:
            continue
        text = text_of(path)
        if text is None:
            continue
        checks = [SPEC_WORD, SPEC_SECTION, SPEC_PATHS]
        if path != SEED_READER:
            checks.append(SEED_PATH)
        for pattern in checks:
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                offenders.append(f"{where(path, line)}: {match.group(0)!r}")
    assert not offenders, "cite docs/contract.md or docs/decisions.md instead:\n" + "\n".join(
        offenders
    )


def test_every_contract_citation_names_a_section_of_the_contract() -> None:
    known = sections()
    missing: list[str] = []
    for path in scanned_files():
        if path in (THIS_FILE, CONTRACT):
            continue
        text = text_of(path)
        if text is None:
            continue
        missing.extend(
            f"{where(path, line)}: §{number}" for line, number in cited(text) if number not in known
        )
    assert not missing, "docs/contract.md has no such section:\n" + "\n".join(missing)


def test_the_contract_refers_only_to_its_own_sections() -> None:
    text = CONTRACT.read_text(encoding="utf-8")
    known = sections()
    body_start = text.index("\n## §1 ")
    appendix_start = text.index("\n## Appendix A")
    body = text[body_start:appendix_start]
    missing = [f"body: §{number}" for number in re.findall(SECTION, body) if number not in known]
    for row in text[appendix_start:].splitlines():
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        if row.startswith("|") and len(cells) == 3 and "§" in cells[2]:
            missing.extend(
                f"appendix: §{number}"
                for number in re.findall(SECTION, cells[2])
                if number not in known
            )
    assert not missing, "\n".join(missing)


def test_a_citation_is_read_whole() -> None:
    """The parser the checks rely on: lists, ranges and wrapped lines."""
    text = "x (contract §2.1, §2.5.6) and contract §2.5.10–§2.5.12;\n# contract\n# §9.9"
    numbers = [number for _, number in cited(text)]
    assert numbers == ["2.1", "2.5.6", "2.5.10", "2.5.12", "9.9"]
    assert cited("see contract\n§4.6") == [(1, "4.6")]
    assert cited("(docs/contract.md §2.5.3)") == [(1, "2.5.3")]
