"""docs/architecture.md against the tree, so that the map a newcomer reads stays the house.

- Every module file of the package (``.py``, ``.js``) has its line in the page's Modules
  section, and every file the page names exists.
- The page's Layers table is the one declaration of the floors: every module file stands in one
  layer, and no import (at module level or inside a function) points up a floor, or across to
  another layer of the same floor.
- ``view/`` imports no TensorFlow, and neither does ``%load_ext jupyter_supervisor``.

A file added, split or moved needs its line on the page; a new folder (or a module that became a
package) its place in the Layers table. Nothing else here names a module.
"""
import ast
import pathlib
import re
import subprocess
import sys
import textwrap

from helpers import child_env

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "jupyter_supervisor"
PAGE = ROOT / "docs" / "architecture.md"
# A module file: Python's, and the browser's ES modules (anywidget ships them).
MODULE_SUFFIXES = (".py", ".js")
# A path on the page that starts with one of these is the repository's; any other, the package's.
REPOSITORY_FOLDERS = ("tests/", "bench/", "notebooks/", "docs/", "jupyter_supervisor/")
TENSORFLOW = ("tensorflow", "keras")
CODE = re.compile(r"`([^`\n]+)`")


def _rel(path: pathlib.Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def _module_files() -> list:
    return sorted(_rel(p) for p in PACKAGE.rglob("*")
                  if p.suffix in MODULE_SUFFIXES and p.is_file()
                  and "__pycache__" not in p.parts and "node_modules" not in p.parts)


def _section(title: str) -> str:
    """The page's ``## title`` section, up to the next ``## ``."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", PAGE.read_text(encoding="utf-8"),
                      re.S | re.M)
    assert match, f"{PAGE.name} has no '## {title}' section"
    return match.group(1)


def _layers() -> list:
    """The Layers table as [(floor, layer, members)]: a member is a folder (``eager/``) or a
    file (``config.py``) of the package."""
    layers = []
    for line in _section("Layers").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 3 and cells[0].isdigit():
            layers.append((int(cells[0]), cells[1], CODE.findall(cells[2])))
    assert layers, f"{PAGE.name}'s Layers section has no table row '| floor | layer | holds |'"
    return layers


def _layer_of(rel: str, layers: list):
    """(floor, layer) of the module file ``rel``: the layer whose member is it, or the folder
    that holds it (the deepest one); None when no layer holds it."""
    found = None
    for floor, layer, members in layers:
        for member in members:
            if rel == member or (member.endswith("/") and rel.startswith(member)):
                if found is None or len(member) > found[0]:
                    found = (len(member), floor, layer)
    return None if found is None else found[1:]


def _module_name(rel: str) -> str:
    parts = ["jupyter_supervisor", *rel[:-len(".py")].split("/")]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _python_modules() -> dict:
    """{module name: path relative to the package} of every Python module of the package."""
    return {_module_name(rel): rel for rel in _module_files() if rel.endswith(".py")}


def _imports(rel: str, modules: dict):
    """(imported module, at module level) for each module an import in ``rel`` names: the
    package's by their names in ``modules``, another library's by its dotted name."""
    package = _module_name(rel) if rel.endswith("__init__.py") else \
        _module_name(rel).rpartition(".")[0]
    return _imports_in((PACKAGE / rel).read_text(), package, modules)


def _imports_in(source: str, package: str, modules: dict):
    """``_imports`` of ``source``, a module of ``package``. An import inside a function runs
    when it is called: it is not at module level."""

    def visit(node, top):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, top
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield (sub if sub in modules else base), top
        inner = top and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for child in ast.iter_child_nodes(node):
            yield from visit(child, inner)

    yield from visit(ast.parse(source), True)


def _is_tensorflow(name: str) -> bool:
    return name.split(".")[0] in TENSORFLOW


# -------------------------------------------------------------------- the page names the files

def test_every_module_file_has_its_line_on_the_page():
    listed = [m.group(1) for m in re.finditer(r"^- `([^`]+)`", _section("Modules"), re.M)]
    missing = sorted(set(_module_files()) - set(listed))
    assert not missing, (f"{PAGE.name}'s Modules section has no line for {missing}: add one "
                         "('- `path`: what it holds') in its layer's list")
    twice = sorted({rel for rel in listed if listed.count(rel) > 1})
    assert not twice, f"{PAGE.name}'s Modules section lists {twice} more than once"


def test_every_file_the_page_names_exists():
    named = {token for token in CODE.findall(PAGE.read_text(encoding="utf-8"))
             if re.fullmatch(r"[\w./-]+", token) and token.endswith(MODULE_SUFFIXES)}
    absent = sorted(token for token in named
                    if not (ROOT / token if token.startswith(REPOSITORY_FOLDERS)
                            else PACKAGE / token).is_file())
    assert not absent, f"{PAGE.name} names {absent}, which do not exist"


def test_every_layer_member_exists_and_every_module_file_stands_in_one_layer():
    layers = _layers()
    members = [member for _, _, held in layers for member in held]
    absent = sorted(m for m in members if not (PACKAGE / m).exists())
    assert not absent, f"{PAGE.name}'s Layers table names {absent}, which do not exist"
    twice = sorted({m for m in members if members.count(m) > 1})
    assert not twice, f"{PAGE.name}'s Layers table puts {twice} in more than one layer"
    homeless = [rel for rel in _module_files() if _layer_of(rel, layers) is None]
    assert not homeless, (f"{homeless} stand in no layer of {PAGE.name}'s Layers table: add "
                          "the file, or its folder, to the layer it belongs to")


# ------------------------------------------------------------------------- imports point down

def test_no_import_points_up_a_floor_or_across_to_another_layer():
    layers = _layers()
    modules = _python_modules()
    wrong = []
    for name, rel in modules.items():
        here = _layer_of(rel, layers)
        for imported, _ in _imports(rel, modules):
            target = modules.get(imported)
            if target is None or target == rel:
                continue  # another library's, or the package's face seen as a parent
            there = _layer_of(target, layers)
            if here is None or there is None or there == here:
                continue  # a file in no layer fails the test above
            if there[0] > here[0]:
                wrong.append(f"{rel} (floor {here[0]}, {here[1]}) imports {target} "
                             f"(floor {there[0]}, {there[1]}): up a floor")
            elif there[0] == here[0]:
                wrong.append(f"{rel} ({here[1]}) imports {target} ({there[1]}): across, "
                             f"on floor {here[0]}")
    assert not wrong, "\n".join(wrong)


def test_view_imports_no_tensorflow_anywhere():
    modules = _python_modules()
    found = [f"{rel} imports {imported}" for rel in modules.values() if rel.startswith("view/")
             for imported, _ in _imports(rel, modules) if _is_tensorflow(imported)]
    assert not found, found


def _load_ext_roots(modules: dict) -> list:
    """The modules ``%load_ext`` imports: the face, and what its ``load_ipython_extension``
    imports when it runs (its imports are inside it)."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    (function,) = [node for node in tree.body if isinstance(node, ast.FunctionDef)
                   and node.name == "load_ipython_extension"]
    roots = {"jupyter_supervisor"}
    for node in ast.walk(function):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = "jupyter_supervisor" + (f".{node.module}" if node.module else "")
            roots |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                      for a in node.names}
    return sorted(roots)


def test_what_load_ext_and_view_import_at_module_level_imports_no_tensorflow():
    """The modules that importing the face, ``%load_ext`` or any ``view/`` module executes
    (module-level imports, followed through the package, parents included) import no
    TensorFlow at module level. Says the chain that brings it."""
    modules = _python_modules()
    roots = _load_ext_roots(modules) + [n for n, rel in modules.items()
                                        if rel.startswith("view/")]
    came_from = {root: None for root in roots}
    queue = list(roots)
    found = []
    while queue:
        name = queue.pop()
        parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
        for imported in [*parents, *(i for i, top in _imports(modules[name], modules) if top)]:
            if _is_tensorflow(imported):
                chain, at = [imported], name
                while at is not None:
                    chain.append(at)
                    at = came_from[at]
                found.append(" <- ".join(chain))
            elif imported in modules and imported not in came_from:
                came_from[imported] = name
                queue.append(imported)
    assert not found, "\n".join(found)


def test_load_ext_imports_no_tensorflow_when_it_runs():
    """The same, as Python does it: ``%load_ext`` in an IPython shell, then every ``view/``
    module imported."""
    view = [n for n, rel in _python_modules().items() if rel.startswith("view/")]
    code = textwrap.dedent(f"""
        import importlib, sys
        from IPython.core.interactiveshell import InteractiveShell
        InteractiveShell.instance().run_line_magic("load_ext", "jupyter_supervisor")
        for name in {view!r}:
            importlib.import_module(name)
        print(sorted({{m.split(".")[0] for m in sys.modules}} & {set(TENSORFLOW)!r}))
    """)
    done = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_imports_are_read_as_python_resolves_them():
    """The reader of imports above, on a module of ``eager/`` whose imports are known."""
    modules = {name: "" for name in ("jupyter_supervisor", "jupyter_supervisor.names",
                                     "jupyter_supervisor.eager",
                                     "jupyter_supervisor.eager.writer")}
    source = textwrap.dedent("""
        import tensorflow as tf
        from .. import names, get_run
        from . import writer
        from jupyter_supervisor.eager import EagerSupervisor
        class Holder:
            from ..names import direction_of
        def later():
            from keras import ops
            import jupyter_supervisor.names
    """)
    assert list(_imports_in(source, "jupyter_supervisor.eager", modules)) == [
        ("tensorflow", True), ("jupyter_supervisor.names", True), ("jupyter_supervisor", True),
        ("jupyter_supervisor.eager.writer", True), ("jupyter_supervisor.eager", True),
        ("jupyter_supervisor.names", True), ("keras", False),
        ("jupyter_supervisor.names", False)]
