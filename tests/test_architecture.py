"""The repository's structure: no import circles, the dependency direction of ARCHITECTURE.md,
paradigm kinds tested only inside the paradigm plugins (server/paradigms/), and a new paradigm that is
its package plus at most two files elsewhere (tests/fake_paradigm/).

Everything here reads the source (``ast``), nothing is imported, so the tests see every import
a module can make: at module level and inside functions alike. Imports under
``if TYPE_CHECKING:`` are left out (they never run). The last test alone runs code: it registers the
fake paradigm and walks a worker through it on an app of its own (SQLite).
"""
from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("server", "analysis", "stimuli", "experiment_ui")
PARADIGMS = "server.paradigms"
#: Names whose use outside the paradigm package is a kind check whatever they are compared with.
KIND_FLAGS = {"is_motion", "is_paired", "is_pc"}


# ---------------------------------------------------------------- reading the source

@cache
def modules() -> dict[str, Path]:
    """Every module of the repository's packages: dotted name -> file."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


@cache
def syntax_tree(name: str) -> ast.Module:
    path = modules()[name]
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node under ``tree`` except the bodies of ``if TYPE_CHECKING:`` blocks."""
    pending = [tree]
    while pending:  # a stack, not recursive generators: those cost a frame per level for every node
        node = pending.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                pending.extend(child.orelse)
                continue
            yield child
            pending.append(child)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _package_of(name: str) -> str:
    """The package a module's relative imports start from (a package's ``__init__`` is its own; a name
    that is no module of the repository, such as a test's made-up one, counts as a plain module)."""
    return name if name in modules() and modules()[name].name == "__init__.py" else name.rpartition(".")[0]


def _known(name: str) -> str | None:
    """The repository module ``name`` refers to: itself, else its longest known parent; None if outside."""
    while name:
        if name in modules():
            return name
        name = name.rpartition(".")[0]
    return None


@cache
def imported_names(name: str) -> tuple[tuple[str, int], ...]:
    """(dotted name, line) of everything module ``name`` imports, relative imports resolved.

    ``from package import submodule`` gives ``package.submodule``; ``from module import object``
    gives ``module``.
    """
    return tuple(_imports(name))


def _imports(name: str, tree: ast.Module | None = None) -> Iterator[tuple[str, int]]:
    """(dotted name, line) of what module ``name`` (its source ``tree``, by default the file's) imports."""
    for node in _runtime_nodes(syntax_tree(name) if tree is None else tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(name)
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                yield (submodule if submodule in modules() or _is_package(source) else source), node.lineno


def _is_package(name: str) -> bool:
    """Whether ``name`` is a package of the repository (so ``from name import x`` may name a submodule x)."""
    return name in modules() and modules()[name].name == "__init__.py"


@cache
def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported repository module: first line}; a module's imports of itself are left out."""
    graph: dict[str, dict[str, int]] = {}
    for name in modules():
        edges = graph.setdefault(name, {})
        for target, line in imported_names(name):
            known = _known(target)
            if known is not None and known != name:
                edges.setdefault(known, line)
    return graph


# ---------------------------------------------------------------- circles

def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's components of ``graph`` with more than one module (each one holds a circle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]  # iterative: the graph is deeper than a comfortable recursion
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def one_circle(graph: dict[str, dict[str, int]], component: list[str]) -> list[str]:
    """A shortest circle through the first module of ``component`` (breadth-first), start repeated at the end."""
    start, members = component[0], set(component)
    came_from: dict[str, str] = {}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for successor in sorted(graph[node]):
            if successor not in members:
                continue
            if successor == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if successor not in came_from:
                came_from[successor] = node
                queue.append(successor)
    return component


def describe_circle(graph: dict[str, dict[str, int]], circle: list[str]) -> str:
    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(circle, circle[1:])) + f" -> {circle[-1]}"


def test_the_import_graph_sees_function_level_and_relative_imports():
    """The reader itself: the graph holds known edges of each kind, so an empty circle list means something."""
    graph = import_graph()
    assert len(graph) > 50
    assert "server.db" in graph["server.app"]                      # relative, module level
    assert "server.cli.base" in graph["server.cli.cmd_study"]      # relative, module level
    assert "analysis.pipeline" in graph["server.paradigms.paired.cli"]  # absolute, inside a function
    assert "stimuli.designs" in graph["analysis.simulate"]


def test_there_are_no_import_circles():
    graph = import_graph()
    circles = [describe_circle(graph, one_circle(graph, component)) for component in strongly_connected(graph)]
    assert not circles, "import circles (module-level and function-level imports):\n  " + "\n  ".join(circles)


def test_the_circle_finder_finds_circles():
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3, "d": 4}, "d": {}, "e": {"e": 5}}
    components = strongly_connected(graph)
    assert components == [["a", "b", "c"]]
    assert one_circle(graph, components[0]) == ["a", "b", "c", "a"]
    assert describe_circle(graph, ["a", "b", "c", "a"]) == "a (line 1) -> b (line 2) -> c (line 3) -> a"


# ---------------------------------------------------------------- dependency direction

#: ARCHITECTURE.md, Layers: ``analysis`` and ``stimuli`` never import ``server`` or Flask (analysts use them alone);
#: ``analysis`` may use ``stimuli``, never the reverse; ``experiment_ui`` talks to ``server`` over HTTP only.
FORBIDDEN = {
    "stimuli": ("analysis", "server", "experiment_ui", "flask", "werkzeug"),
    "analysis": ("server", "experiment_ui", "flask", "werkzeug"),
    "experiment_ui": ("server", "analysis", "stimuli"),
}


def test_the_dependency_direction_holds():
    wrong = []
    for name in modules():
        forbidden = FORBIDDEN.get(name.partition(".")[0], ())
        for target, line in imported_names(name):
            top = target.partition(".")[0]
            if top in forbidden:
                wrong.append(f"{modules()[name].relative_to(ROOT)}:{line} imports {target}")
    assert not wrong, "imports against the dependency direction:\n  " + "\n  ".join(wrong)


# ---------------------------------------------------------------- paradigm kinds

@cache
def paradigm_kinds() -> frozenset[str]:
    """The kinds the registry knows (``PARADIGM_MODULES`` of server/paradigms/__init__.py), read from source."""
    tree = syntax_tree(PARADIGMS)
    for node in ast.walk(tree):
        target = node.target if isinstance(node, ast.AnnAssign) else \
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(target, ast.Name) and target.id == "PARADIGM_MODULES" and isinstance(node.value, ast.Dict):
            return frozenset(k.value for k in node.value.keys if isinstance(k, ast.Constant))
    raise AssertionError("server/paradigms/__init__.py defines no PARADIGM_MODULES dict")


def _is_kind(node: ast.AST, kinds: frozenset[str]) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in kinds
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_kind(element, kinds) for element in node.elts)
    return False


def _is_default_kind(node: ast.AST) -> bool:
    """``DEFAULT_KIND`` (the registry's name of paired comparison): comparing with it tests the kind too."""
    return (isinstance(node, ast.Name) and node.id == "DEFAULT_KIND") or \
        (isinstance(node, ast.Attribute) and node.attr == "DEFAULT_KIND")


def kind_checks(tree: ast.Module, kinds: frozenset[str]) -> Iterator[tuple[int, str]]:
    """(line, what) of every paradigm test in a module: ``x == "motion"``, ``kind in ("pc", ...)``,
    ``stored_kind(config) == DEFAULT_KIND``, ``case "motion":``, or a kind flag such as ``study.is_motion``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            if any(_is_kind(side, kinds) or _is_default_kind(side) for side in [node.left, *node.comparators]):
                yield node.lineno, ast.unparse(node)
        elif isinstance(node, ast.MatchValue) and _is_kind(node.value, kinds):
            yield node.lineno, f"case {ast.unparse(node.value)}"
        elif isinstance(node, ast.Attribute) and node.attr in KIND_FLAGS:
            yield node.lineno, ast.unparse(node)
        elif isinstance(node, ast.Name) and node.id in KIND_FLAGS:
            yield node.lineno, node.id
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in KIND_FLAGS:
            yield node.lineno, f"def {node.name}"


def test_paradigm_kinds_are_tested_only_in_the_paradigm_plugins():
    """Views, CLI, exports, payments and MTurk code ask the registry (``paradigm_for(study)``)."""
    kinds = paradigm_kinds()
    assert {"pc", "motion"} <= kinds
    found = [f"{modules()[name].relative_to(ROOT)}:{line}: {what}"
             for name in modules() if not (name == PARADIGMS or name.startswith(PARADIGMS + "."))
             for line, what in kind_checks(syntax_tree(name), kinds)]
    assert not found, "paradigm kind checks outside server/paradigms/:\n  " + "\n  ".join(found)


def test_the_kind_check_finder_finds_checks():
    kinds = frozenset({"pc", "motion"})
    source = ('if study.kind == "motion": pass\nif kind in ("pc", "x"): pass\nif s.is_motion: pass\n'
              'match k:\n    case "pc": pass\nif page.kind == "rdk": pass\n'
              'if stored_kind(study.config) == DEFAULT_KIND: pass\nkind = kind or paradigms.DEFAULT_KIND\n')
    assert sorted(line for line, _ in kind_checks(ast.parse(source), kinds)) == [1, 2, 3, 5, 7]


# Templates and browser code: the same rule for what the server renders and the browser runs.
TEMPLATE_KIND_CHECK = re.compile(r"""(?:[!=]==?\s*["'](?P<a>\w+)["'])|(?:["'](?P<b>\w+)["']\s*[!=]==?)|\bis_?[mM]otion\b""")


def test_templates_and_browser_code_do_not_test_the_kind():
    kinds = paradigm_kinds()
    found = []
    for path in sorted([*(ROOT / "experiment_ui" / "templates").rglob("*.html"),
                        *(ROOT / "experiment_ui" / "static").rglob("*.js")]):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in TEMPLATE_KIND_CHECK.finditer(line):
                kind = match.group("a") or match.group("b")
                if kind is None or kind in kinds:
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "paradigm kind checks in templates / browser code:\n  " + "\n  ".join(found)


# ---------------------------------------------------------------- paradigm packages

#: ARCHITECTURE.md, The paradigm contract: everything paradigm-specific lives in its package under
#: server/paradigms/; the rest of the code asks the registry and the hooks of core.Paradigm. Only the
#: migrations (the schema's history) name a paradigm's tables outside its package.
BOUNDARY_EXEMPT = ("server.migrations",)
#: A table named in SQL text: ``FROM vote``, ``JOIN pair``, ``UPDATE trial``, ``INSERT INTO vote``.
SQL_TABLE = re.compile(r"\b(?:FROM|JOIN|UPDATE|INTO)\s+\"?(\w+)", re.IGNORECASE)
SQL_STATEMENT = re.compile(r"\b(?:SELECT|UPDATE|INSERT|DELETE)\b", re.IGNORECASE)


def paradigm_package_of(name: str) -> str | None:
    """The paradigm package (``server.paradigms.<folder>``) module ``name`` belongs to, else None: the
    registry and the common core (``server.paradigms.core``, ``...stages``) belong to none."""
    parts = name.split(".")
    if len(parts) >= 3 and parts[:2] == ["server", "paradigms"] and (ROOT / "server" / "paradigms" / parts[2]).is_dir():
        return ".".join(parts[:3])
    return None


@cache
def paradigm_tables() -> dict[str, tuple[str, str]]:
    """Every paradigm package's model classes, read from its ``models.py``: class name -> (package, table name)."""
    found = {}
    for folder in sorted((ROOT / "server" / "paradigms").iterdir()):
        models = folder / "models.py"
        if not models.is_file():
            continue
        for node in ast.parse(models.read_text(encoding="utf-8")).body:
            if not isinstance(node, ast.ClassDef):
                continue
            for statement in node.body:
                if isinstance(statement, ast.Assign) and any(
                        isinstance(t, ast.Name) and t.id == "__tablename__" for t in statement.targets) \
                        and isinstance(statement.value, ast.Constant):
                    found[node.name] = (f"server.paradigms.{folder.name}", statement.value.value)
    return found


def boundary_leaks(name: str, tree: ast.Module, tables: dict[str, tuple[str, str]]) -> Iterator[tuple[int, str]]:
    """(line, what) of everything module ``name`` (source ``tree``) takes from a paradigm package it does
    not belong to: an import of the package or of one of its modules, a paradigm's model class by name
    (``Vote``, ``models.Pair``), or a paradigm's table in SQL text (``"SELECT ... FROM vote"``)."""
    own = paradigm_package_of(name)
    for target, line in _imports(name, tree):
        package = paradigm_package_of(target)
        if package is not None and package != own:
            yield line, f"imports {target}"
    by_table = {table: (package, model) for model, (package, table) in tables.items()}
    for node in ast.walk(tree):
        model = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if model in tables and tables[model][0] != own:
            yield node.lineno, f"names {model} ({tables[model][0]})"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL_STATEMENT.search(node.value):
            for match in SQL_TABLE.finditer(node.value):
                package, model = by_table.get(match.group(1).lower(), (own, None))
                if package != own:
                    yield node.lineno, f"SQL on table {match.group(1)} ({model} of {package})"


def test_paradigm_specific_code_lives_in_its_package():
    """No module outside a paradigm package (the common core of server/paradigms/ included, another
    paradigm's package too) imports from it or names its tables: views, CLI, exports, payments and the
    core ask the registry and the hooks of core.Paradigm (issue 30). Tests and benchmarks may."""
    tables = paradigm_tables()
    assert {"Vote", "Pair", "MotionResponse"} <= set(tables)  # the reader finds the packages' models
    found = [f"{modules()[name].relative_to(ROOT)}:{line}: {what}"
             for name in modules() if name != PARADIGMS and not name.startswith(BOUNDARY_EXEMPT)
             for line, what in boundary_leaks(name, syntax_tree(name), tables)]
    assert not found, "paradigm-specific code outside its package:\n  " + "\n  ".join(found)


def test_the_boundary_finder_finds_leaks():
    tables = {"Vote": ("server.paradigms.paired", "vote"), "MotionTrial": ("server.paradigms.motion", "motion_trial")}
    source = ("from server.paradigms.paired.models import Vote\n"           # 1: import and name
              "from ..paradigms.paired import live_scales\n"                # 2: relative import of a module
              "from ..paradigms import paradigm_for, core\n"                # the registry and the core: fine
              "def f(models, session, text):\n"
              "    n = models.MotionTrial\n"                                 # 5: a table by attribute
              "    session.execute(text('SELECT count(*) FROM vote'))\n"    # 6: SQL on a table
              "    return 'a vote FROM the worker'\n"                        # no SQL statement: fine
              "import server.paradigms.motion.export\n")                    # 8: absolute import
    leaks = sorted(line for line, _ in boundary_leaks("server.views.example", ast.parse(source), tables))
    assert leaks == [1, 2, 5, 6, 8]
    inside = "from .models import Vote\nfrom ...models import Study\nx = Vote\n"
    assert list(boundary_leaks("server.paradigms.paired.example", ast.parse(inside), tables)) == []
    assert [line for line, _ in boundary_leaks("server.paradigms.rating.example", ast.parse(inside), tables)] == [3]


#: ARCHITECTURE.md, Layers: paradigm packages sit below the views and the CLI; what they share with those
#: (admin helpers, command helpers) lives one floor down (server/admin_support.py, server/command_support.py).
UPPER_LAYERS = ("server.views", "server.cli")


def upward_imports(name: str, tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, target) of every import of the views or the CLI by module ``name`` (source ``tree``) of a
    paradigm package."""
    if paradigm_package_of(name) is None:
        return
    for target, line in _imports(name, tree):
        if any(target == upper or target.startswith(upper + ".") for upper in UPPER_LAYERS):
            yield line, target


def test_paradigm_packages_never_import_views_or_the_cli():
    """A paradigm's admin routes build on server/admin_support.py and its commands on server/command_support.py;
    server/cli/ adds the commands of each package's ``COMMANDS`` to the group (issue 36 item 8)."""
    found = [f"{modules()[name].relative_to(ROOT)}:{line} imports {target}"
             for name in modules() for line, target in upward_imports(name, syntax_tree(name))]
    assert not found, "paradigm packages importing views or the CLI:\n  " + "\n  ".join(found)


def test_the_upward_import_finder_finds_upward_imports():
    source = ("from ...views.admin import protect\n"              # 1: relative, a module of views
              "from server.cli.base import UserError\n"           # 2: absolute
              "from ...admin_support import study_or_404\n"       # the floor: fine
              "def f():\n    from ... import cli\n"              # 5: the package, inside a function
              "from ..core import Paradigm\n")
    assert [line for line, _ in upward_imports("server.paradigms.paired.example", ast.parse(source))] == [1, 2, 5]
    assert list(upward_imports("server.views.example", ast.parse(source))) == []


# ---------------------------------------------------------------- test modules

TESTS = ROOT / "tests"


def suite_modules() -> dict[str, Path]:
    """Every module under tests/ (test modules, conftest.py files, support modules): dotted name -> file."""
    return {".".join(path.relative_to(ROOT).with_suffix("").parts): path for path in sorted(TESTS.rglob("*.py"))
            if path.name != "__init__.py"}


def imports_of_test_modules(name: str, tree: ast.Module) -> list[tuple[int, str]]:
    """(line, test module) of every import of a test module (``test_*``) in module ``name`` of tests/,
    relative imports resolved; at module level and inside functions alike."""
    found = []
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                base = name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                source = f"{base}.{node.module}" if node.module else base
            # ``from package import test_x`` names a module; ``from test_x import helper`` names its object.
            targets = [f"{source}.{alias.name}" if alias.name.startswith("test_") else source for alias in node.names]
        else:
            continue
        found += [(node.lineno, target) for target in targets
                  if target.startswith("tests.") and target.rpartition(".")[2].startswith("test_")]
    return sorted(found)


def test_no_test_module_imports_another():
    """Shared fixtures live in a folder's conftest.py and shared helpers in a support module (e.g.
    tests/server/motion_support.py): importing a test module runs its module code again under another
    name, and fixtures imported by name look unused to linters (issue 30)."""
    found = [f"{path.relative_to(ROOT)}:{line} imports {target}"
             for name, path in suite_modules().items()
             for line, target in imports_of_test_modules(name, ast.parse(path.read_text(encoding="utf-8")))]
    assert not found, ("test modules imported by other modules of tests/ (move what they share to the "
                       "folder's conftest.py or a support module):\n  " + "\n  ".join(found))


def test_the_test_import_finder_finds_test_imports():
    source = ("from .test_api import SpecClient\nfrom . import test_live_scales as scales\n"
              "import tests.server.test_admin\nfrom tests.browser.test_worker_flow import Walker\n"
              "from .motion_support import MotionWorker\nfrom .conftest import WorkerClient\n"
              "def f():\n    from ..server.test_mturk import _hit\n"
              "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .test_pair_allocation import work\n")
    assert imports_of_test_modules("tests.server.test_example", ast.parse(source)) == [
        (1, "tests.server.test_api"), (2, "tests.server.test_live_scales"), (3, "tests.server.test_admin"),
        (4, "tests.browser.test_worker_flow"), (8, "tests.server.test_mturk")]


# ---------------------------------------------------------------- a new paradigm stands on the floor

FAKE_PACKAGE = TESTS / "fake_paradigm"
# Where a paradigm could have to be named besides its package: the code, the browser side, the packaging.
SEARCHED = (*PACKAGES, "tests", "pyproject.toml")
# The most files outside its package that a new paradigm may touch (issue 36): its registration and, when it
# has tables, their migration; its browser code, styles, window and study-file sections live in its package.
MAX_FILES_OUTSIDE = 2


def files_naming(words: tuple[str, ...], outside: Path) -> list[str]:
    """The files of :data:`SEARCHED` (text: .py, .js, .html, .css, .toml, .yaml, .sql) outside ``outside``
    that contain any of ``words``."""
    found = []
    for top in SEARCHED:
        base = ROOT / top
        for path in sorted([base] if base.is_file() else base.rglob("*")):
            if (path.suffix in {".py", ".js", ".html", ".css", ".toml", ".yaml", ".sql"} and path.is_file()
                    and outside not in path.parents and "__pycache__" not in path.parts
                    and any(word in path.read_text(encoding="utf-8", errors="replace") for word in words)):
                found.append(str(path.relative_to(ROOT)))
    return found


def test_a_new_paradigm_is_its_package_and_one_registration(tmp_path):
    """A tiny paradigm (tests/fake_paradigm/) is registered and works, entry -> consent -> instructions -> its
    trial -> a response stored -> completed, with its browser code served from its package and its window
    declared through its own layout; and the files outside its package that name it are this test only."""
    import uuid

    from server import create_app
    from server import openapi, paradigms
    from server.paradigms.display import LAPTOP_WINDOW
    from server.services import app_services
    from sqlalchemy import select
    from tests.fake_paradigm import PARADIGM
    from tests.fake_paradigm.paradigm import METADATA, TALLIES, TallySpec

    paradigms.register(PARADIGM)  # what a plugin does (or one line of PARADIGM_MODULES)
    try:
        app = create_app(database_url=f"sqlite:///{tmp_path / 'fake.db'}", instance_path=str(tmp_path),
                         secret_key="fake-secret", testing=True)
        services = app_services(app)
        METADATA.create_all(services.engine)  # a paradigm in the repository: its migration
        study_file = tmp_path / "tally.toml"
        study_file.write_text('[study]\nkind = "fake-tally"\nslug = "tally"\n[tally]\ndots = 9\n'
                              '[display]\npolicy = "pixel_exact"\n')
        spec = paradigms.read_study_file(study_file)
        assert isinstance(spec, TallySpec) and spec.dots == 9
        with services.sessions() as session:
            paradigms.create_study(session, spec)
            session.commit()
        client = app.test_client()
        entry = client.post("/api/v1/studies/tally/assignments", json={"platform": "link", "worker_id": "T1"})
        assert entry.status_code == 201 and entry.json["kind"] == "fake-tally" and entry.json["stage"] == "consent"
        path, auth = f"/api/v1/assignments/{entry.json['assignment_id']}", {
            "Authorization": f"Bearer {entry.json['token']}"}
        for action, stage in (("consent", "instructions"), ("instructions_done", "trials")):
            moved = client.post(f"{path}/actions", json={"action": action}, headers=auth)
            assert moved.status_code == 200 and moved.json["stage"] == stage, moved.json
        assert client.get(f"{path}/state", headers=auth).json["trial"] == {"dots": 9}
        answer = {"answer_id": str(uuid.uuid4()), "count": 8}
        stored = client.post(f"{path}/tallies", json=answer, headers=auth)
        assert stored.status_code == 201 and stored.json["stage"] == "completed", stored.json
        assert client.post(f"{path}/tallies", json=answer, headers=auth).json == {"status": "duplicate"}
        with services.engine.connect() as connection:
            assert connection.execute(select(TALLIES.c.count)).scalars().all() == [8]
        assert client.get(f"{path}/state", headers=auth).json["completion"]
        # Another paradigm's response kind is refused by name, and its own browser code is served.
        assert client.post(f"{path}/votes", json={}, headers=auth).status_code == 409
        served = client.get("/static/paradigms/fake-tally/tally.js")
        assert served.status_code == 200 and b"fake-tally" in served.data
        # Its window: its own layout at the policy's factor, which the entry pages' check reads as it is.
        requirement = PARADIGM.requirement_of_spec(spec)
        assert requirement.min_window == (1000, 600) and requirement.fits(LAPTOP_WINDOW)
        assert requirement.to_page()["layouts"] == [[220, 160, 16, 60]]
    finally:
        paradigms._REGISTERED.pop(PARADIGM.kind, None)
        openapi.document.cache_clear()  # built with the fake's response kind, if anything asked for it
        openapi.document_text.cache_clear()
    outside = files_naming(("fake_paradigm", "fake-tally"), FAKE_PACKAGE)
    assert outside == ["tests/test_architecture.py"] and len(outside) <= MAX_FILES_OUTSIDE, outside
