"""docs/running-on-hpc.md "Cluster kinds" lists the kinds of the registry
(``curator_dask/backends/dask/cluster_kinds.py``), in its order, with the extra each needs and
how each is chosen: a kind registered without its row, or a row left behind, fails here."""

from __future__ import annotations

import re

from curator_dask.backends.dask.cluster_kinds import known_cluster_kinds
from tests.helpers import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "running-on-hpc.md"
_ROW = re.compile(r"^\| `([\w-]+)` \|(.*?)\|(.*?)\|(.*)\|$")


def documented_rows() -> dict[str, tuple[str, str]]:
    """The table under "## Cluster kinds": kind -> (chosen by, needs)."""
    section = PAGE.read_text(encoding="utf-8").split("\n## Cluster kinds\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    rows = [_ROW.match(line) for line in section.splitlines()]
    return {m.group(1): (m.group(2), m.group(3)) for m in rows if m}


def test_the_documented_kinds_are_the_registry_s():
    assert list(documented_rows()) == list(known_cluster_kinds)


def test_each_row_says_how_its_kind_is_chosen_and_what_it_needs():
    for name, (chosen_by, needs) in documented_rows().items():
        kind = known_cluster_kinds[name]
        if kind.implied_by is None:
            assert f"--cluster {name}" in chosen_by, name
        else:
            assert f"{kind.implied_by}=" in chosen_by, name
        assert (f"curator_dask[{kind.extra}]" in needs) if kind.extra else not needs.strip(), name
