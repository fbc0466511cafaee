"""No module of ddpdoctor/ imports another module's private name (issue #30, item 4).

A leading underscore says "only this module uses it"; `from .other import _helper` breaks that promise silently,
so a name another module needs is public at its definition. Allowed: a module imported under a private alias
(`from . import evidence as _evidence`), a private submodule (`from . import _kscan`), dunder names
(`__version__`), and a module importing from itself."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ddpdoctor"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute dotted name `from X import …` reads X from."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
    return ".".join(base + ([node.module] if node.module else []))


def _is_submodule(root: Path, dotted: str, name: str) -> bool:
    folder = root.joinpath(*dotted.split("."))
    return (folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file()


def private_imports(path: Path, source: str, root: Path, package: str = "ddpdoctor") -> list[str]:
    """`file:line: from X import _name` for each private name imported from another module of `package`."""
    module = _module_name(path, root)
    hits = []
    for node in ast.walk(ast.parse(source, str(path))):
        if not isinstance(node, ast.ImportFrom):
            continue
        source_module = _resolve(node, module, path.name == "__init__.py")
        if source_module != package and not source_module.startswith(package + "."):
            continue  # another distribution's private name is that distribution's affair
        if source_module == module:
            continue
        for alias in node.names:
            name = alias.name
            if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
                continue
            if _is_submodule(root, source_module, name):
                continue
            hits.append(f"{path.relative_to(root)}:{node.lineno}: from {source_module} import {name}")
    return hits


def test_no_module_imports_a_private_name_of_another():
    hits = []
    for path in sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts):
        hits += private_imports(path, path.read_text(), ROOT)
    assert not hits, f"{len(hits)} private names imported across modules:\n" + "\n".join(hits)


def test_the_check_finds_private_imports_and_only_those(tmp_path):
    pkg = tmp_path / "ddpdoctor" / "logs"
    pkg.mkdir(parents=True)
    for name in ("__init__.py", "families.py", "_fast.py", "parse.py"):
        (pkg / name).write_text("")
    (tmp_path / "ddpdoctor" / "__init__.py").write_text("")
    source = "\n".join(
        [
            "from .families import _join_wrapped, network_problem",  # flagged
            "from ..io import _safe",  # flagged: another subpackage, two dots
            "from ddpdoctor.logs.families import _Pump",  # flagged: absolute
            "def f():\n    from .families import _inner",  # flagged: inside a function
            "from . import families as _families",  # module alias: allowed
            "from . import _fast",  # private submodule: allowed
            "from .families import __all__",  # dunder: allowed
            "from .parse import _own",  # same module: allowed
            "from os.path import _joinrealpath",  # not ours: allowed
        ]
    )
    hits = private_imports(pkg / "parse.py", source, tmp_path)
    assert [h.split(": ", 1)[1] for h in hits] == [
        "from ddpdoctor.logs.families import _join_wrapped",
        "from ddpdoctor.io import _safe",
        "from ddpdoctor.logs.families import _Pump",
        "from ddpdoctor.logs.families import _inner",
    ]
