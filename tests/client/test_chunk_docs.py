"""The runtime guide's eligibility table is FailureCategory.is_policy_eligible."""

from __future__ import annotations

import re

from oxide_batch.domain.status import FailureCategory
from tests.live import ROOT

ROW = re.compile(r"^\| `([A-Z_]+)` \| (yes|no) \|$")


def test_the_guides_eligibility_table_matches_the_enum() -> None:
    guide = (ROOT / "docs" / "runtime-guide.md").read_text(encoding="utf-8")
    table = guide.split("<!-- policy-eligibility")[1].split("<!-- /policy-eligibility -->")[0]
    rows = [ROW.match(line) for line in table.splitlines() if line.startswith("| `")]
    documented = {match[1]: match[2] == "yes" for match in rows if match is not None}
    assert len(documented) == len(rows)  # every row in the expected shape
    assert documented == {c.value: c.is_policy_eligible for c in FailureCategory}
    assert list(documented) == [c.value for c in FailureCategory]  # in order
