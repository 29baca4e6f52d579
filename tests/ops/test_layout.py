"""The layout the README promises: every package in its map, imports at the top unless a
comment says why. (The layers and the absence of circles are import-linter's, in `make lint`.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = sorted(
    p.parent.relative_to(ROOT).as_posix()
    for top in ("api", "worker")
    for p in (ROOT / top).rglob("__init__.py")
)
MODULES = sorted(
    p
    for top in ("api", "worker")
    for p in (ROOT / top).rglob("*.py")
    if "migrations" not in p.parts
)


def _map() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme[readme.index("## Where the code lives") : readme.index("## Commands")]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_is_in_the_readme_map(package: str) -> None:
    assert f"| `{package}/` |" in _map(), f"{package}/ is missing from the README's map"


def test_every_package_says_what_it_owns() -> None:
    silent = [
        p
        for p in PACKAGES
        if not ast.get_docstring(ast.parse((ROOT / p / "__init__.py").read_text()))
        and p != "api/http/routes"
    ]
    assert silent == []


def _unexplained_local_imports(path: Path) -> list[str]:
    """Project imports inside functions with no comment on their line or atop their block."""
    lines = path.read_text().splitlines()
    found = []
    for fn in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
            )
            if not any(n.split(".")[0] in ("api", "worker") for n in names):
                continue
            at = node.lineno - 1
            while at > 0 and lines[at - 1].strip().startswith(("from ", "import ")):
                at -= 1  # the top of this block of imports
            if "#" in lines[node.lineno - 1] or lines[at - 1].strip().startswith("#"):
                continue
            found.append(
                f"{path.relative_to(ROOT)}:{node.lineno}: {lines[node.lineno - 1].strip()}"
            )
    return found


def test_function_local_imports_say_why() -> None:
    unexplained = [line for path in MODULES for line in _unexplained_local_imports(path)]
    assert unexplained == []


#: "About 400 lines": past this a module holds more than one thing (split it by what it does).
MAX_MODULE_LINES = 450


def test_no_module_is_too_long() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in MODULES
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_redis_clients_are_made_in_one_place() -> None:
    makers = [
        str(p.relative_to(ROOT))
        for p in MODULES
        if "from_url(" in p.read_text() and p.name != "redis_clients.py"
    ]
    assert makers == []
