"""capture/ as two programs: the agent folder runs inside a foreign interpreter (standard library, torch,
and its own modules only), the host side imports nothing above the bottom layer, and both stay small."""

import ast
import sys
from pathlib import Path

CAPTURE = Path(__file__).resolve().parents[2] / "ddpdoctor" / "capture"
AGENT = CAPTURE / "agent"
# what capture may import from the rest of ddpdoctor: the bottom layer only (never trial/, report/, the CLI,
# nor the analysis that reads bundles)
ALLOWED_FROM_DDPDOCTOR = {"errors", "redact", "version"}


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield 0, a.name, None
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                yield node.level, node.module or "", a.name


def _sources():
    return sorted(CAPTURE.rglob("*.py"))


def test_the_agent_imports_only_the_standard_library_torch_and_itself():
    for p in sorted(AGENT.glob("*.py")):
        for level, module, _name in _imports(p):
            if level:
                assert level == 1, f"{p.name}: from {'.' * level}{module} leaves the agent folder"
            else:
                top = module.split(".")[0]
                assert top in sys.stdlib_module_names or top == "torch", f"{p.name}: import {module}"


def test_capture_imports_nothing_above_the_bottom_layer():
    for p in _sources():
        depth = len(p.relative_to(CAPTURE).parts)  # 1: capture/x.py, 2: capture/host/x.py
        for level, module, name in _imports(p):
            if level > depth:  # reaches ddpdoctor/ itself
                target = module.split(".")[0] if module else name
                assert target in ALLOWED_FROM_DDPDOCTOR, f"{p.relative_to(CAPTURE)}: imports ddpdoctor.{target}"
            assert not module.startswith("ddpdoctor.") or module.startswith("ddpdoctor.capture"), p


def test_modules_and_functions_stay_small():
    for p in _sources():
        lines = p.read_text().splitlines()
        assert len(lines) <= 450, f"{p.relative_to(CAPTURE)}: {len(lines)} lines"
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                assert n <= 120, f"{p.relative_to(CAPTURE)}: {node.name} has {n} lines"


def test_no_lint_suppression_in_capture():
    """(No rule id in capture either: tests/test_house.py checks every module of the package.)"""
    for p in _sources():
        assert "# noqa" not in p.read_text(), p.relative_to(CAPTURE)
