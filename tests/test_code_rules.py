"""The code rules the layout depends on (DESIGN.md, "Rules that keep it so"), checked on src/attnlab: modules of
at most 400 lines, functions of at most 80 unless a comment just above says why, each module's imports in one
block at its top, package faces (`__init__.py`) that only re-export, at most 6 test files at tests/'s root, at
most 6 positional parameters per function in the packages that hold a model or a run (the rest keyword-only), and
`ctypes` imported in attnlab.kernels only.
In tests/, no wait on a child process is unbounded: every subprocess call and wait has a timeout, and every read of
a child's pipe runs inside `killed_after` (tests/processes.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "attnlab"
MODULES = sorted(PACKAGE.rglob("*.py"))
MAX_MODULE_LINES, MAX_FUNCTION_LINES, MAX_ROOT_TEST_FILES = 400, 80, 6
# Packages whose functions take at most MAX_POSITIONAL positional parameters (self/cls aside): past that, a call
# reads as a row of values whose meaning hangs on their order, so the trailing ones are keyword-only (after `*`).
POSITIONAL_PACKAGES = ("decoding", "analysis", "inference", "runs")
MAX_POSITIONAL = 6
# The one package that may import ctypes: a C pass is one file pair, its ctypes signature in kernels/.
CTYPES_HOME = PACKAGE / "kernels"
# The package root's face loads its few entry points on first use (PEP 562) so `import attnlab` stays light.
LAZY_FACE = PACKAGE / "__init__.py"


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def long_functions(path: Path) -> list[str]:
    """`name (N lines)` of each function longer than MAX_FUNCTION_LINES (decorators included) without a
    comment on the line above it that says why ("... 80 lines ...")."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            length = node.end_lineno - first + 1
            above = lines[first - 2].strip() if first >= 2 else ""
            if length > MAX_FUNCTION_LINES and not (above.startswith("#") and "80 lines" in above):
                found.append(f"{node.name} ({length} lines)")
    return found


def late_imports(tree: ast.Module) -> list[int]:
    """Lines of module-level imports that come after other statements (the docstring and
    `from __future__` aside)."""
    body = tree.body[1:] if tree.body and isinstance(tree.body[0], ast.Expr) else tree.body
    seen_other, late = False, []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if seen_other:
                late.append(node.lineno)
        else:
            seen_other = True
    return late


def many_positional(tree: ast.Module) -> list[str]:
    """`name (N positional)` of each function or method taking more than MAX_POSITIONAL positional parameters;
    a method's first (self or cls) is not counted, nor `*args` or what follows it."""
    methods = {
        id(f) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for f in c.body if isinstance(f, ast.FunctionDef)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            params = [a.arg for a in node.args.posonlyargs + node.args.args]
            static = any(getattr(d, "id", "") == "staticmethod" for d in node.decorator_list)
            if id(node) in methods and not static and params:
                params = params[1:]
            if len(params) > MAX_POSITIONAL:
                found.append(f"{node.name} ({len(params)} positional)")
    return found


def ctypes_imports(tree: ast.Module) -> list[int]:
    """Lines that import ctypes (or a module of it)."""
    found = []
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        if any(n == "ctypes" or n.startswith("ctypes.") for n in names):
            found.append(node.lineno)
    return found


def face_definitions(tree: ast.Module) -> list[str]:
    """What a package face defines beyond its docstring, imports, `__all__` and `__version__`."""
    kept = {"__all__", "__version__"}
    found = []
    for i, node in enumerate(tree.body):
        if (i == 0 and isinstance(node, ast.Expr)) or isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and all(getattr(t, "id", None) in kept for t in targets):
            continue
        found.append(f"{type(node).__name__} at line {node.lineno}")
    return found


def unbounded_waits(tree: ast.Module) -> list[str]:
    """subprocess.run/call/check_* and Popen.wait/communicate without timeout=, and reads of a child's
    stdout/stderr (`.read()`, `.readline()`, `for line in proc.stdout`) outside a `with killed_after(...)`."""
    bounded: set[int] = set()  # ids of nodes inside a `with killed_after(...)` block
    for node in ast.walk(tree):
        if isinstance(node, ast.With) and any(
            isinstance(w.context_expr, ast.Call) and getattr(w.context_expr.func, "id", "") == "killed_after"
            for w in node.items
        ):
            bounded.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    found = []
    pipes = ("stdout", "stderr")
    for node in ast.walk(tree):
        free = id(node) not in bounded
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name, base = node.func.attr, node.func.value
            timed = any(k.arg == "timeout" for k in node.keywords)
            if getattr(base, "id", "") == "subprocess" and name in ("run", "call", "check_call", "check_output"):
                if not timed:
                    found.append(f"subprocess.{name} without timeout at line {node.lineno}")
            elif name in ("wait", "communicate") and not node.args and not timed and "Event" not in ast.unparse(base):
                found.append(f".{name}() without timeout at line {node.lineno}")
            elif name in ("read", "readline") and getattr(base, "attr", "") in pipes and free:
                found.append(f"a pipe's .{name}() outside killed_after at line {node.lineno}")
        elif isinstance(node, ast.For) and getattr(node.iter, "attr", "") in pipes and free:
            found.append(f"a loop over a pipe outside killed_after at line {node.lineno}")
    return sorted(found, key=lambda f: int(f.rsplit(" ", 1)[1]))


def test_every_wait_on_a_child_process_in_the_tests_is_bounded():
    found = {
        str(p.relative_to(ROOT)): waits
        for p in sorted((ROOT / "tests").rglob("*.py"))
        if (waits := unbounded_waits(_tree(p)))
    }
    assert not found, found


def test_the_wait_rule_can_fail():
    code = """
import subprocess
subprocess.run(["x"])
subprocess.run(["x"], timeout=5)
p = subprocess.Popen(["x"])
p.wait()
line = p.stdout.readline()
with killed_after(p, 5):
    line = p.stdout.readline()
    for line in p.stdout: pass
for line in p.stderr: pass
"""
    assert unbounded_waits(ast.parse(code)) == [
        "subprocess.run without timeout at line 3",
        ".wait() without timeout at line 6",
        "a pipe's .readline() outside killed_after at line 7",
        "a loop over a pipe outside killed_after at line 11",
    ]


def test_modules_and_functions_are_short():
    long_modules = {
        str(p.relative_to(ROOT)): n
        for p in MODULES
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long_modules, f"modules over {MAX_MODULE_LINES} lines: {long_modules}"
    functions = {str(p.relative_to(ROOT)): found for p in MODULES if (found := long_functions(p))}
    assert not functions, f"functions over {MAX_FUNCTION_LINES} lines without a comment saying why: {functions}"


def test_imports_are_one_block_at_the_top_and_faces_only_re_export():
    late = {str(p.relative_to(ROOT)): lines for p in MODULES if (lines := late_imports(_tree(p)))}
    assert not late, f"imports after other statements (move them to the top block): {late}"
    faces = [p for p in MODULES if p.name == "__init__.py" and p != LAZY_FACE]
    defining = {str(p.relative_to(ROOT)): found for p in faces if (found := face_definitions(_tree(p)))}
    assert not defining, f"__init__.py files that define things (move them to a module of their own): {defining}"


def test_functions_take_at_most_six_positional_parameters():
    modules = [p for name in POSITIONAL_PACKAGES for p in sorted((PACKAGE / name).rglob("*.py"))]
    assert len(modules) > len(POSITIONAL_PACKAGES)
    found = {str(p.relative_to(ROOT)): names for p in modules if (names := many_positional(_tree(p)))}
    assert not found, f"more than {MAX_POSITIONAL} positional parameters (make the trailing ones keyword-only): {found}"


def test_the_positional_rule_can_fail(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(
        "def f(a, b, c, d, e, f, g): pass\n"
        "def g(a, b, c, d, e, f, *, g): pass\n"
        "def h(a, b, c, d, e, /, f, *args, g): pass\n"
        "class C:\n"
        "    def ok(self, a, b, c, d, e, f): pass\n"
        "    def too_many(self, a, b, c, d, e, f, g): pass\n"
        "    @staticmethod\n"
        "    def static(a, b, c, d, e, f, g): pass\n",
        encoding="utf-8",
    )
    assert many_positional(_tree(path)) == ["f (7 positional)", "too_many (7 positional)", "static (7 positional)"]


def test_ctypes_is_imported_in_the_kernels_package_only():
    found = {
        str(p.relative_to(ROOT)): lines
        for p in MODULES
        if CTYPES_HOME not in p.parents and (lines := ctypes_imports(_tree(p)))
    }
    assert not found, f"ctypes imported outside {CTYPES_HOME.relative_to(ROOT)} (its wrappers go there): {found}"
    assert ctypes_imports(_tree(CTYPES_HOME / "loader.py"))  # the rule looks where ctypes is


def test_the_ctypes_rule_can_fail(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(
        "import os, ctypes\nimport ctypes.util as u\nfrom ctypes import c_int\nfrom .ctypes import x\n"
        "def f():\n    import ctypes\n",
        encoding="utf-8",
    )
    assert ctypes_imports(_tree(path)) == [1, 2, 3, 6]


def test_at_most_six_test_files_at_the_root_of_tests():
    files = sorted(p.name for p in (ROOT / "tests").glob("test_*.py"))
    assert len(files) <= MAX_ROOT_TEST_FILES, files


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def f():\n" + "    x = 1\n" * 80 + "    return x\n", ["f (82 lines)"]),
        ("# Longer than 80 lines: why.\ndef f():\n" + "    x = 1\n" * 80 + "    return x\n", []),
        ("def f():\n" + "    x = 1\n" * 78 + "    return x\n", []),
    ],
)
def test_the_function_rule_can_fail(tmp_path, source, expected):
    path = tmp_path / "m.py"
    path.write_text(source, encoding="utf-8")
    assert long_functions(path) == expected


def test_the_import_and_face_rules_can_fail():
    assert late_imports(ast.parse('"""doc."""\nimport os\nX = 1\nimport sys\n')) == [4]
    assert late_imports(ast.parse('"""doc."""\nfrom __future__ import annotations\nimport os\n')) == []
    assert face_definitions(ast.parse('"""doc."""\nfrom .a import b\n__all__ = ["b"]\n')) == []
    assert face_definitions(ast.parse("from .a import b\nX = {}\ndef f(): pass\n")) == [
        "Assign at line 2",
        "FunctionDef at line 3",
    ]
