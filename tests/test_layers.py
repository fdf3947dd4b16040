"""The modules of the ``ferrocorn`` package import each other in one direction only: no cycles.

Pure: the package's sources are parsed with ``ast`` (nothing is imported, no server runs).
Every import counts, at module level and inside functions alike (a late import only hides a
cycle from the interpreter), and so does ``importlib.import_module("ferrocorn.x")`` with a
literal name. Importing ``ferrocorn.a.b`` runs ``ferrocorn/__init__.py`` first; that implied
parent import is not an edge (every module would then "cycle" through the package), but a
module that imports the package itself (``from . import name`` of a non-module name) is.
"""

import ast
import os

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE_ROOT = os.path.join(REPO_ROOT, "python")
PACKAGE = "ferrocorn"


def package_modules(source_root=SOURCE_ROOT, package=PACKAGE):
    """{dotted module name: (path, is_package)} for every .py file of ``package``; a stub
    (.pyi) without a .py beside it is a compiled extension: a module that imports nothing of
    the package (path None)."""
    modules = {}
    top = os.path.join(source_root, package)
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__pycache__")))
        rel = os.path.relpath(dirpath, source_root)
        prefix = rel.replace(os.sep, ".")
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if name == "__init__.py":
                modules[prefix] = (path, True)
            elif name.endswith(".py"):
                modules[prefix + "." + name[:-3]] = (path, False)
            elif name.endswith(".pyi") and name[:-1] not in filenames:
                modules[prefix + "." + name[:-4]] = (None, False)
    return modules


def _resolve_relative(module, is_package, level, name):
    """The absolute name of ``from <level dots><name> import ...`` written in ``module``."""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]  # a plain module's "." is its package
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    base = ".".join(parts)
    return base + "." + name if name else base


def _imported_names(module, is_package, tree):
    """Every module name an import in ``tree`` can load (top level and nested alike)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _resolve_relative(module, is_package, node.level, node.module)
            else:
                base = node.module or ""
            for alias in node.names:
                # ``from pkg import sub`` loads pkg.sub when it is a module, else names in pkg.
                yield (base + "." + alias.name, base)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and not node.args[0].value.startswith(".")
        ):
            yield node.args[0].value


def import_graph(modules):
    """{module: set of package modules it imports}, for ``package_modules()``'s result."""
    graph = {}
    for module, (path, is_package) in modules.items():
        if path is None:
            graph[module] = set()
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
        edges = set()
        for target in _imported_names(module, is_package, tree):
            if isinstance(target, tuple):
                submodule, base = target
                target = submodule if submodule in modules else base
            # ``import ferrocorn.a.b`` (or a name inside one): its nearest known module.
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != module:
                edges.add(target)
        graph[module] = edges
    return graph


def find_cycle(graph):
    """One import cycle as a list [a, b, ..., a], or None. Deterministic (sorted order)."""
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(graph, white)
    stack = []

    def visit(node):
        color[node] = grey
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if color.get(nxt, black) == grey:
                return stack[stack.index(nxt) :] + [nxt]
            if color.get(nxt) == white:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        color[node] = black
        return None

    for node in sorted(graph):
        if color[node] == white:
            found = visit(node)
            if found:
                return found
    return None


def test_the_package_is_found():
    modules = package_modules()
    # A test that finds nothing to check would pass for the wrong reason.
    for name in ("ferrocorn", "ferrocorn.server", "ferrocorn.supervisor", "ferrocorn.worker"):
        assert name in modules, sorted(modules)


def test_no_import_cycle_in_the_package():
    graph = import_graph(package_modules())
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle in the ferrocorn package: " + " -> ".join(cycle)


def _pypy_guarded(if_node):
    """True for ``if sys.implementation.name == "pypy":``."""
    return ast.dump(if_node.test) == ast.dump(
        ast.parse('sys.implementation.name == "pypy"', mode="eval").body
    )


def _is_pypy_module(name):
    return name == "ferrocorn._pypy" or name.startswith("ferrocorn._pypy.")


def _unguarded_pypy_imports(module, is_package, node, guarded=False):
    """Line numbers of imports of ``ferrocorn._pypy`` under ``node`` outside a PyPy branch."""
    found = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)) and not guarded:
            for target in _imported_names(module, is_package, ast.Module([child], [])):
                if _is_pypy_module(target[0] if isinstance(target, tuple) else target):
                    found.append(child.lineno)
                    break
        if isinstance(child, ast.If) and _pypy_guarded(child):
            for stmt in child.body:
                found += _unguarded_pypy_imports(module, is_package, ast.Module([stmt], []), True)
            for stmt in child.orelse:
                found += _unguarded_pypy_imports(
                    module, is_package, ast.Module([stmt], []), guarded
                )
        else:
            found += _unguarded_pypy_imports(module, is_package, child, guarded)
    return found


def test_pypy_subpackage_is_imported_only_under_pypy():
    """Outside ``ferrocorn._pypy`` itself, every import of it sits in the body of an
    ``if sys.implementation.name == "pypy":`` (CPython never loads it)."""
    unguarded = []
    for module, (path, is_package) in package_modules().items():
        if path is None or _is_pypy_module(module):
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
        for line in _unguarded_pypy_imports(module, is_package, tree):
            unguarded.append("%s:%d" % (module, line))
    assert not unguarded, "ferrocorn._pypy imported outside a PyPy-only branch: %s" % unguarded


# ---------------------------------------------------------------- the checker itself


def _write_package(tmp_path, files):
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package_modules(str(tmp_path), "pkg")


@pytest.mark.parametrize(
    "files, expected",
    [
        # a late (function-level) import still closes the cycle
        (
            {
                "pkg/__init__.py": "",
                "pkg/a.py": "from .b import x\n",
                "pkg/b.py": "def f():\n    from .a import y\n",
            },
            ["pkg.a", "pkg.b", "pkg.a"],
        ),
        # through a subpackage, with ``from .. import module``
        (
            {
                "pkg/__init__.py": "",
                "pkg/a.py": "import pkg.sub.c\n",
                "pkg/sub/__init__.py": "",
                "pkg/sub/c.py": "from .. import a\n",
            },
            ["pkg.a", "pkg.sub.c", "pkg.a"],
        ),
        # importlib with a literal name
        (
            {
                "pkg/__init__.py": "",
                "pkg/a.py": "import importlib\nimportlib.import_module('pkg.b')\n",
                "pkg/b.py": "from pkg.a import z\n",
            },
            ["pkg.a", "pkg.b", "pkg.a"],
        ),
        # the package's __init__ imports a module that imports a name from the package
        (
            {"pkg/__init__.py": "from .a import f\n", "pkg/a.py": "from . import VERSION\n"},
            ["pkg", "pkg.a", "pkg"],
        ),
        # a compiled extension (a stub only) is a leaf, not the package
        (
            {
                "pkg/__init__.py": "from .a import f\n",
                "pkg/a.py": "from ._ext import g\n",
                "pkg/_ext.pyi": "def g() -> None: ...\n",
            },
            None,
        ),
        # one-way: no cycle (the implied import of the parent package is no edge)
        (
            {
                "pkg/__init__.py": "from .a import f\n",
                "pkg/a.py": "from .b import g\n",
                "pkg/b.py": "import os\n",
            },
            None,
        ),
    ],
    ids=["late-import", "subpackage", "importlib", "via-init", "extension", "acyclic"],
)
def test_the_checker_finds_cycles(tmp_path, files, expected):
    assert find_cycle(import_graph(_write_package(tmp_path, files))) == expected
