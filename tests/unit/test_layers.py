"""The package tree is the architecture: the pure core imports nothing from the Redis side,
the document pipeline or the entrypoints, and no two modules import each other in a circle."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[2] / "lib"
ROOTS = [LIB / "kiqbeat", LIB.parent / "handler"]


def module_name(path: Path) -> str:
    base = LIB if path.is_relative_to(LIB) else LIB.parent
    parts = list(path.relative_to(base).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache  # read once a worker: parsing every module costs about a second, and ~20 tests ask
def imports() -> dict[str, set[str]]:
    """Module -> the kiqbeat and handler modules it imports (at any depth in the file)."""
    graph: dict[str, set[str]] = {}
    for root in ROOTS:
        for path in root.rglob("*.py"):
            found: set[str] = set()
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module:
                    found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
                elif isinstance(node, ast.Import):
                    found |= {a.name for a in node.names}
            graph[module_name(path)] = found
    return {m: {i for i in found if i in graph} for m, found in graph.items()}


WEB = "kiqbeat.web"  # the console: only `kiqbeat web` (entrypoints/console.py) imports it


@pytest.mark.parametrize(("layer", "forbidden"), [
    ("kiqbeat.core", ("kiqbeat.redis", "kiqbeat.document", "kiqbeat.entrypoints",
                      "kiqbeat.engine", "kiqbeat.settings", "kiqbeat.demo", "handler", WEB)),
    ("kiqbeat.document", ("kiqbeat.redis", "kiqbeat.entrypoints", "kiqbeat.engine",
                          "kiqbeat.demo", "handler", WEB)),
    ("kiqbeat.redis", ("kiqbeat.document", "kiqbeat.entrypoints", "kiqbeat.engine",
                       "kiqbeat.demo", "handler", WEB)),
    ("kiqbeat.engine", ("kiqbeat.entrypoints", "kiqbeat.demo", "handler", WEB)),
    *((room, ("kiqbeat.entrypoints", "kiqbeat.demo", "kiqbeat.engine", "handler", WEB))
      for room in ("kiqbeat.deployment", "kiqbeat.devices", "kiqbeat.sync",
                   "kiqbeat.invocation", "kiqbeat.after")),
    ("kiqbeat.store", ("kiqbeat.entrypoints", "kiqbeat.engine", "kiqbeat.operator",
                       "kiqbeat.demo", "handler", WEB)),
    # The operator's commands' former home: names kept, each the store's own.
    ("kiqbeat.operator", ("kiqbeat.engine", "kiqbeat.entrypoints", "kiqbeat.demo", "handler",
                          WEB)),
    ("kiqbeat.audit", ("kiqbeat.entrypoints", "kiqbeat.engine", "kiqbeat.store", "handler",
                       WEB)),
    ("kiqbeat.settings", ("kiqbeat.entrypoints", "handler", WEB)),
    ("kiqbeat.outcomes", ("kiqbeat.document", "kiqbeat.entrypoints", "kiqbeat.engine",
                          "kiqbeat.store", "kiqbeat.demo", "handler", WEB)),
    ("kiqbeat.alerts", ("kiqbeat.document", "kiqbeat.entrypoints", "kiqbeat.engine",
                        "kiqbeat.store", "kiqbeat.operator", "kiqbeat.demo", "handler", WEB)),
    ("handler", (WEB, "kiqbeat.entrypoints.console")),
    ("kiqbeat.web", ("handler",)),
])
def test_a_layer_never_imports_the_layers_above_it(layer: str, forbidden: tuple[str, ...]) -> None:
    bad = sorted(f"{m} imports {i}" for m, found in imports().items()
                 if m == layer or m.startswith(layer + ".")
                 for i in found if i.startswith(forbidden))
    assert bad == []


# The Redis side by role (kiqbeat.redis.side.RedisSide strings them together): each module
# may import only the Redis-side modules listed, so a role never reaches into another's.
REDIS_BASE = ("kiqbeat.redis.keys", "kiqbeat.redis.scripts", "kiqbeat.redis.connection",
              "kiqbeat.redis.urls", "kiqbeat.redis.clock")
REDIS_LAYOUT: dict[str, tuple[str, ...]] = {
    "kiqbeat.redis.urls": (),
    "kiqbeat.redis.keys": (),
    "kiqbeat.redis.scripts": ("kiqbeat.redis.clock",),  # the test clock's key, for the Lua
    "kiqbeat.redis.connection": ("kiqbeat.redis.urls",),
    "kiqbeat.redis.clock": ("kiqbeat.redis.connection",),
    "kiqbeat.redis.definitions": REDIS_BASE,
    "kiqbeat.redis.due": (*REDIS_BASE, "kiqbeat.redis.definitions"),
    "kiqbeat.redis.documents": (*REDIS_BASE, "kiqbeat.redis.definitions"),
    # The one encoder of the push family's requests (lua/frames.lua the one reader).
    "kiqbeat.redis.frames": ("kiqbeat.redis.connection",),  # name_bytes
    "kiqbeat.redis.pushes": (*REDIS_BASE, "kiqbeat.redis.frames"),
    "kiqbeat.redis.progress": REDIS_BASE,
    "kiqbeat.redis.pauses": REDIS_BASE,
    # The layout before the progress buckets, migrated once (lua/migrate.lua).
    "kiqbeat.redis.migrate": REDIS_BASE,
    # The console's name index: read, and built once (the write script keeps it).
    "kiqbeat.redis.names": (*REDIS_BASE, "kiqbeat.redis.definitions"),
    "kiqbeat.redis.operator_reads": (*REDIS_BASE, "kiqbeat.redis.definitions",
                                     "kiqbeat.redis.due", "kiqbeat.redis.progress"),
    "kiqbeat.redis.side": (*REDIS_BASE, "kiqbeat.redis.definitions", "kiqbeat.redis.due",
                           "kiqbeat.redis.documents", "kiqbeat.redis.frames",
                           "kiqbeat.redis.pushes", "kiqbeat.redis.pauses"),
    "kiqbeat.redis.scheduler_ui": ("kiqbeat.redis.keys",),
    "kiqbeat.redis.neighbours": ("kiqbeat.redis.keys", "kiqbeat.redis.connection",
                                 "kiqbeat.redis.scheduler_ui"),
}


def test_the_redis_side_is_laid_out_by_role() -> None:
    """Every module of kiqbeat.redis is in the layout, and imports only the Redis-side
    modules its role may: due reads, definitions, documents, pushes and operator reads
    each stand on the base (keys, scripts, connection, clock), not on each other, but for
    the definitions they read; `side` alone strings them together."""
    graph = imports()
    modules = {m for m in graph if m.startswith("kiqbeat.redis.")}
    assert modules == set(REDIS_LAYOUT)
    bad = sorted(f"{m} imports {i}" for m in modules for i in graph[m]
                 if i.startswith("kiqbeat.redis.") and i not in REDIS_LAYOUT[m])
    assert bad == []


# The store by role (kiqbeat.store.Store composes the parts): each part stands on the
# context (the Redis side, settings, actor) and the parts listed, never on the Store.
STORE_LAYOUT: dict[str, tuple[str, ...]] = {
    "kiqbeat.store.context": (),
    "kiqbeat.store.results": (),
    "kiqbeat.store.calendars": ("kiqbeat.store.context",),
    "kiqbeat.store.schedules": ("kiqbeat.store.context", "kiqbeat.store.calendars"),
    "kiqbeat.store.bulk": ("kiqbeat.store.context", "kiqbeat.store.calendars"),
    "kiqbeat.store.status": ("kiqbeat.store.context",),
    "kiqbeat.store.operations": ("kiqbeat.store.context", "kiqbeat.store.results"),
    "kiqbeat.store.backfill_plan": ("kiqbeat.store.results",),
    "kiqbeat.store.backfill": ("kiqbeat.store.context", "kiqbeat.store.results",
                               "kiqbeat.store.operations", "kiqbeat.store.backfill_plan"),
}


def test_the_store_is_composed_of_parts_by_role() -> None:
    """Every module of kiqbeat.store is in the layout and imports only the parts its role
    may; `Store` (kiqbeat/store/__init__.py) alone strings them together, and no part
    imports it, nor `kiqbeat.operator` (whose names are the store's)."""
    graph = imports()
    modules = {m for m in graph if m.startswith("kiqbeat.store.")}
    assert modules == set(STORE_LAYOUT)
    bad = sorted(f"{m} imports {i}" for m in modules for i in graph[m]
                 if (i == "kiqbeat.store" or i.startswith("kiqbeat.store."))
                 and i not in STORE_LAYOUT[m])
    assert bad == []


def test_no_role_module_of_the_store_or_the_operator_is_long() -> None:
    """store/ and operator.py are split by role: no module of them over 300 lines."""
    long = {str(p.relative_to(LIB)): n for p in [*(LIB / "kiqbeat" / "store").glob("*.py"),
                                                 LIB / "kiqbeat" / "operator.py"]
            if (n := len(p.read_text().splitlines())) > 300}
    assert long == {}


# The engine room by role (kiqbeat.engine, the facade, strings them together): each may
# import only the engine-room modules listed, so the invocation reads top to bottom and its
# devices, context and document sync each have one home (docs/design.md, "Where each step
# of an invocation lives").
ENGINE_ROOM: dict[str, tuple[str, ...]] = {
    "kiqbeat.deployment": (),  # settings, client, sources, config, startup checks
    "kiqbeat.devices": (),  # every performance device, and the reference mode
    "kiqbeat.after": ("kiqbeat.deployment",),  # after the pushes: outcomes folded
    "kiqbeat.sync": ("kiqbeat.deployment", "kiqbeat.devices"),  # document sync
    "kiqbeat.invocation": ("kiqbeat.deployment", "kiqbeat.devices", "kiqbeat.sync",
                           "kiqbeat.after"),  # read, decide, push, report
    "kiqbeat.engine": ("kiqbeat.deployment", "kiqbeat.devices", "kiqbeat.sync",
                       "kiqbeat.invocation"),
}


def test_the_engine_room_is_laid_out_by_role() -> None:
    """Each engine-room module imports only the ones its role may; none of the layers below
    (core, document, redis, store, outcomes, alerts) imports any of them."""
    graph = imports()
    bad = sorted(f"{m} imports {i}" for m in ENGINE_ROOM for i in graph[m]
                 if i in ENGINE_ROOM and i not in ENGINE_ROOM[m])
    below = ("kiqbeat.core", "kiqbeat.document", "kiqbeat.redis", "kiqbeat.store",
             "kiqbeat.outcomes", "kiqbeat.alerts")
    bad += sorted(f"{m} imports {i}" for m, found in graph.items()
                  if m.startswith(below) for i in found if i in ENGINE_ROOM)
    assert bad == []


def test_no_module_of_the_engine_room_is_long_nor_keeps_module_state() -> None:
    """The engine room is split by role (each at most ~300 lines), and what it keeps from
    one invocation to the next is held by objects (an Engine and its parts), never by a
    module-level dict, list or set (document/validate.py's checks included)."""
    paths = [LIB / "kiqbeat" / f"{m.rsplit('.', 1)[1]}.py" for m in ENGINE_ROOM]
    long = {p.name: n for p in paths if (n := len(p.read_text().splitlines())) > 320}
    assert long == {}
    kept = []
    for path in [*paths, LIB / "kiqbeat" / "document" / "validate.py"]:
        for node in ast.parse(path.read_text()).body:
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            target = (node.targets[0] if isinstance(node, ast.Assign) else
                      node.target if isinstance(node, ast.AnnAssign) else None)
            if target is None or ast.unparse(target) == "__all__":
                continue
            if isinstance(value, ast.Dict | ast.List | ast.Set | ast.DictComp | ast.ListComp
                          | ast.SetComp):
                kept.append(f"{path.name}:{node.lineno}")
    assert kept == []


def private_names_used(module_path: Path, package: str) -> list[str]:
    """The underscore names a module takes from `package`'s modules: imported by name
    (`from package.x import _y`) or read from a module it imported (`x._y`)."""
    tree = ast.parse(module_path.read_text())
    bound: set[str] = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and (
                node.module == package or node.module.startswith(package + ".")):
            for alias in node.names:
                if alias.name.startswith("_"):
                    found.append(f"{node.module}.{alias.name}")
                elif node.module == package:
                    bound.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            bound |= {a.asname or a.name for a in node.names if a.name.startswith(package)}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__") and isinstance(node.value, ast.Name)
                and node.value.id in bound):
            found.append(f"{node.value.id}.{node.attr}")
    return found


def test_the_console_uses_no_private_name_of_the_entrypoints() -> None:
    """kiqbeat.web may use what kiqbeat.entrypoints offers (the request model, previews),
    never its underscore names: those may change without notice."""
    bad = sorted(f"{path.name}: {name}" for path in (LIB / "kiqbeat" / "web").rglob("*.py")
                 for name in private_names_used(path, "kiqbeat.entrypoints"))
    assert bad == []


# The Store's methods that run an operator's request on a schedule: the one dispatch of the
# CLI, the Lambda and the console (kiqbeat.entrypoints.outcomes.run) calls them.
REQUEST_METHODS = ("add", "put", "update", "remove", "pause", "resume", "skip", "trigger",
                   "backfill", "report")


def test_the_console_keeps_no_request_table_of_its_own() -> None:
    """kiqbeat.web runs a request on a schedule only through the CLI's and the Lambda's one
    dispatch (`outcomes.run`, by `Console.execute`) and renders its outcome: no module of
    it calls a Store method that runs a request (on a store however reached: `store.put`,
    `self.store(...).pause`), and no class of it has a method named after one (a second
    table of what each kind does, as Console.put/_EXECUTE were, drifts from the first)."""
    from kiqbeat.entrypoints.outcomes import BY_KIND

    assert set(REQUEST_METHODS) - {"backfill"} <= set(BY_KIND)  # the table runs them
    bad = []
    for path in sorted((LIB / "kiqbeat" / "web").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in REQUEST_METHODS
                    and "store" in ast.unparse(node.func.value)):
                bad.append(f"{path.name}:{node.lineno} calls {ast.unparse(node.func)}")
            if isinstance(node, ast.ClassDef):
                bad += [f"{path.name}:{f.lineno} {node.name}.{f.name}" for f in node.body
                        if isinstance(f, ast.FunctionDef) and f.name in REQUEST_METHODS]
    assert bad == []
    console = (LIB / "kiqbeat" / "web" / "console.py").read_text()
    assert "from kiqbeat.entrypoints.outcomes import Outcome, run" in console


def test_one_module_name_means_one_thing() -> None:
    """No two modules share a name across the schedules API and the Redis side (there is
    one `store`: the schedules API, a package of parts by role)."""
    graph = imports()
    assert "kiqbeat.store" in graph and "kiqbeat.store.operations" in graph
    assert not [m for m in graph if m.startswith("kiqbeat.redis.")
                and m.rsplit(".", 1)[1] in ("store", "state", "records", "operator")]


def test_the_import_graph_has_no_cycle() -> None:
    graph = imports()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if target == module or module.startswith(target + "."):
                continue  # a package's own __init__ is not a cycle through its module
            if state.get(target) == 1:
                cycles.append([*path, target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_the_invocation_path_loads_nothing_of_the_web_stack() -> None:
    """The Lambda handler, the CLI and an invocation import no module of the console or of
    its libraries (starlette, jinja2, uvicorn, prometheus_client): `kiqbeat web` alone
    loads them, so the function's package and cold start do not pay for them."""
    import subprocess
    import sys

    code = ("import sys, handler.app, kiqbeat.entrypoints.cli, kiqbeat.engine, kiqbeat.store;"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('starlette', 'jinja2',"
            " 'uvicorn', 'prometheus_client', 'multipart') or m.startswith('kiqbeat.web')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=LIB.parent, check=True)
    assert done.stdout.strip() == "[]"
