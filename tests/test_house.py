"""House rules a maintainer relies on (issue #30): small modules and functions, no rule id in the
package's Python (a rule's behaviour lives in its rule file), and CI running the lint, format and
layer checks configured in pyproject.toml."""

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ddpdoctor"
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 120
# a rule id: a category's prefix (rules/layout.toml, so a new category is covered) and 3 digits
PREFIXES = sorted(
    c["prefix"] for c in tomllib.loads((ROOT / "rules" / "layout.toml").read_text())["categories"].values()
)
RULE_ID = re.compile(rf"\b(?:{'|'.join(PREFIXES)})\d{{3}}\b")


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_over_450_lines():
    long = {
        str(p.relative_to(ROOT)): n for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_function_over_120_lines():
    long = {}
    for p in _modules():
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long[f"{p.relative_to(ROOT)}:{node.lineno} {node.name}"] = n
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_no_rule_id_in_the_package_python():
    """Which rule does what is declared in rules/ (TOML), never special-cased by id in Python: the one check,
    over every module of ddpdoctor/ (the engine, the verdict, bundle, metrics, capture, trial, ...)."""
    hits = []
    for p in _modules():
        for i, line in enumerate(p.read_text().splitlines(), 1):
            if m := RULE_ID.search(line):
                hits.append(f"{p.relative_to(ROOT)}:{i}: {m.group(0)}")
    assert not hits, f"{len(hits)} rule ids quoted in ddpdoctor/**/*.py:\n" + "\n".join(hits[:40])


def test_the_rule_id_pattern_finds_ids_and_only_ids():
    assert RULE_ID.search("if rule.id == 'DL001':") and RULE_ID.search("NET004") and RULE_ID.search("(FL014)")
    assert {"DL", "CM", "CP", "IM", "FL", "NET", "CF"} <= set(PREFIXES)
    assert not RULE_ID.search("DL0011") and not RULE_ID.search("XDL001") and not RULE_ID.search("CUDA101")


def test_ci_runs_the_lint_format_and_layer_checks():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    for cmd in ("ruff check .", "ruff format --check .", "lint-imports", "mypy"):
        assert cmd in ci, f".ci/run does not run `{cmd}`"
    suite = next(i for i, line in enumerate(ci) if line.endswith("python -m pytest -q"))
    assert max(ci.index(c) for c in ("ruff check .", "ruff format --check .", "lint-imports", "mypy")) < suite, (
        "the quick checks run before the suite"
    )
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    assert tool["ruff"]["line-length"] == 120 and tool["ruff"]["lint"]["select"]
    contracts = tool["importlinter"]["contracts"]
    assert {c["type"] for c in contracts} >= {"layers", "forbidden", "acyclic_siblings"}
    test_extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    assert any(d.startswith("ruff") for d in test_extra) and any(d.startswith("import-linter") for d in test_extra)
    assert any(d.startswith("mypy") for d in test_extra) and tool["mypy"]["files"]


def test_every_package_module_is_in_a_layer():
    """A new top-level module or package of ddpdoctor/ must be placed in the layers contract."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c for c in contracts if c["type"] == "layers" and c["containers"] == ["ddpdoctor"]]
    named = {m.strip().strip("()").split(".")[0] for layer in layers["layers"] for m in re.split(r"[:|]", layer)}
    present = {p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")}
    present |= {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert not present - named, f"not in any layer: {sorted(present - named)}"
