"""How ``nsq admin``'s modules depend on each other (read from their source
with ``ast``): a screen never imports another screen (it posts a
navigation message, :mod:`nsq.tui.admin.navigation`, and the app pushes the
screen), only the package's ``__init__`` imports the app, no module of the
package imports one of its siblings inside a function, and the modal
dialogs live in :mod:`nsq.tui.admin.dialogs`."""

from __future__ import annotations

import ast
from pathlib import Path

import nsq.tui.admin

ADMIN = Path(nsq.tui.admin.__file__).parent
PACKAGE = "nsq.tui.admin"


def _modules() -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text(), str(p)) for p in sorted(ADMIN.glob("*.py"))}


def _base_names(cls: ast.ClassDef) -> set[str]:
    out = set()
    for base in cls.bases:
        if isinstance(base, ast.Subscript):
            base = base.value
        if isinstance(base, ast.Name):
            out.add(base.id)
        elif isinstance(base, ast.Attribute):
            out.add(base.attr)
    return out


def _screen_modules(modules: dict[str, ast.Module]) -> set[str]:
    """The modules that define an AdminScreen subclass."""
    return {name for name, tree in modules.items() if name != "base" and any(
        isinstance(node, ast.ClassDef) and "AdminScreen" in _base_names(node) for node in tree.body)}


def _imported(node: ast.AST) -> list[str]:
    """The nsq.tui.admin modules an import statement names."""
    if isinstance(node, ast.ImportFrom) and node.module:
        if node.module == PACKAGE:
            return [f"{PACKAGE}.{a.name}" for a in node.names]
        return [node.module]
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    return []


def test_there_are_screens_to_check():
    assert {"topics", "topic", "channel", "node", "nodes", "lookup", "counter", "peek"} <= _screen_modules(_modules())


def test_no_screen_imports_another_screen():
    modules = _modules()
    screens = _screen_modules(modules)
    found = []
    for name in screens:
        for node in ast.walk(modules[name]):
            for target in _imported(node):
                other = target.removeprefix(f"{PACKAGE}.")
                if target.startswith(f"{PACKAGE}.") and other in screens and other != name:
                    found.append(f"{name} imports {other}")
    assert not found, found


def test_no_import_inside_a_function():
    found = []
    for name, tree in _modules().items():
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                for target in _imported(node):
                    if target.startswith("nsq."):
                        found.append(f"{name}.{fn.name} imports {target}")
    assert not found, found


def test_modal_dialogs_live_in_the_dialogs_module():
    tui = ADMIN.parent
    outside = []
    for path in sorted(tui.rglob("*.py")):
        if path == ADMIN / "dialogs.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and "ModalScreen" in _base_names(node):
                outside.append(f"{path.relative_to(tui)}: {node.name}")
    assert not outside, outside


def test_the_app_handles_every_navigation_message():
    from nsq.tui.admin import navigation
    from nsq.tui.admin.app import AdminApp

    for name in navigation.__all__:
        message = getattr(navigation, name)
        assert callable(getattr(AdminApp, f"on_{message.handler_name.removeprefix('on_')}", None)), name


def test_no_module_of_the_package_imports_the_app():
    """Screens see the app as ``base.AdminHost`` (a Protocol the app meets,
    checked by mypy in app.py), not by importing it, even for typing."""
    found = [f"{name} imports the app" for name, tree in _modules().items() if name not in ("app", "__init__")
             for node in ast.walk(tree) if f"{PACKAGE}.app" in _imported(node)]
    assert not found, found
