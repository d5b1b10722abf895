"""docs/layout.md kept true: every module of `taso/` named under its package, and none over the size cap.

The doc is where a newcomer finds a module; one left out is a module nobody finds, and one that no longer exists
sends them looking for it. The cap is CONTRIBUTING's "no module over ~500 lines", with a little slack so that a
module at the aim is not failed by a line.
"""

from __future__ import annotations

import re

from conftest import ROOT

LAYOUT = ROOT / "docs" / "layout.md"
TASO = ROOT / "taso"
MAX_LINES = 520

_PACKAGE = re.compile(r"^ {6}(\w+)/ +\S")  # "      ir/   the IR: ..."
_MODULE = re.compile(r"^ {8}(\w+) {2,}\S")  # "        graph   nodes and graphs ..."
_TOP = re.compile(r"^ {6}(\w+)\.py {2,}\S")  # "      api.py   the Python API"


def documented(text: str) -> set[str]:
    """The modules the doc's `taso/` tree names, as paths under taso/ ("ir/graph.py", "api.py"): a module line
    counts under the package line above it, and only with its role beside it."""
    lines = text.splitlines()
    start = lines.index("    taso/")
    names: set[str] = set()
    package = None
    for line in lines[start + 1 :]:
        if line and not line.startswith("    "):
            break
        if found := _PACKAGE.match(line):
            package = found[1]
        elif found := _TOP.match(line):
            package = None
            names.add(f"{found[1]}.py")
        elif (found := _MODULE.match(line)) and package:
            names.add(f"{package}/{found[1]}.py")
    return names


def modules() -> set[str]:
    """Every module of taso/ but the packages' `__init__.py`, as paths under taso/."""
    return {p.relative_to(TASO).as_posix() for p in TASO.rglob("*.py") if p.name != "__init__.py"}


def test_every_module_is_in_the_layout() -> None:
    named = documented(LAYOUT.read_text())
    actual = modules()
    assert not actual - named, f"docs/layout.md does not name (under its package): {sorted(actual - named)}"
    assert not named - actual, f"docs/layout.md names modules that do not exist: {sorted(named - actual)}"


def test_no_module_over_the_cap() -> None:
    sizes = {name: len((TASO / name).read_text().splitlines()) for name in modules()}
    over = {name: n for name, n in sorted(sizes.items()) if n > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines (split them, do not raise the cap): {over}"
