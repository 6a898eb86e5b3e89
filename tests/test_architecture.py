"""docs/ARCHITECTURE.md states which parts of packtool may import which; the code must agree.

Every `import packtool.X` / `from packtool.X import ...` of every module, at module level or inside
a function (a lazy import is still a dependency), is checked against the "Module map" table."""

from __future__ import annotations

import ast
import re

from paths import ROOT

DOC = ROOT / "docs" / "ARCHITECTURE.md"
PACKAGE = ROOT / "packtool"
ANYONE = {"packtool"}  # packtool/__init__.py: the version string


def _unit(dotted: str) -> str:
    """packtool.verify.scan → verify; packtool.config → config; packtool → packtool."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else "packtool"


def module_map() -> dict[str, set[str]]:
    text = DOC.read_text()
    table = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    rules = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        m = re.fullmatch(r"`([a-z_]+)(?:\.py|/)`", cells[0]) if len(cells) == 3 else None
        if not m:
            continue
        allowed = cells[2]
        rules[m.group(1)] = (
            {"*"}
            if allowed == "all of the above"
            else set()
            if allowed == "nothing"
            else {a.strip() for a in allowed.split(",")}
        )
    return rules


def imports_of(path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "packtool":
                found |= {f"packtool.{a.name}" for a in node.names}
            elif node.module.startswith("packtool."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("packtool.")}
    return found


def test_the_map_names_every_module():
    rules = module_map()
    units = {
        _unit(".".join(p.relative_to(ROOT).with_suffix("").parts)) for p in PACKAGE.rglob("*.py")
    }
    units -= {"packtool", "__init__", "__main__"}
    assert units - set(rules) == set(), "modules missing from docs/ARCHITECTURE.md's Module map"
    assert set(rules) - units == set(), "the Module map names modules that do not exist"


def test_imports_follow_the_map():
    rules = module_map()
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        src = _unit(".".join(path.relative_to(ROOT).with_suffix("").parts))
        if src in ("packtool", "__init__", "__main__"):
            continue
        allowed = rules[src]
        for dotted in sorted(imports_of(path)):
            dst = _unit(dotted)
            if dst in ("__version__",):
                dst = "packtool"
            if dst == src or dst in ANYONE or "*" in allowed or dst in allowed:
                continue
            problems.append(
                f"{path.relative_to(ROOT)} imports {dotted} ({src} may import: "
                f"{', '.join(sorted(allowed)) or 'nothing'})"
            )
    assert not problems, "\n".join(problems)


def test_the_library_never_reaches_up_into_the_cli():
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in ("commands", "cli.py", "__main__.py"):
            continue
        up = {d for d in imports_of(path) if _unit(d) in ("commands", "cli")}
        assert not up, f"{rel} imports {up}"


def _module_of(path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_import_cycle_inside_packtool():
    """No module reaches itself through the modules it imports (lazy imports count): a cycle
    means two modules each need the other, so neither has one role."""
    modules = {_module_of(p): p for p in PACKAGE.rglob("*.py")}

    def resolve(name: str) -> str | None:  # packtool.a.b.name → the module that defines it
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module == "packtool" or node.module.startswith("packtool."):
                    targets |= {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.startswith("packtool.")}
        edges[name] = {t for t in map(resolve, targets) if t and t != name}

    cycles, done = [], set()
    for start in sorted(modules):  # depth-first from each module: a path back to it is a cycle
        stack = [(start, iter(sorted(edges[start])))]
        seen = {start}
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                continue
            if nxt == start:
                cycles.append(" -> ".join([s for s, _ in stack] + [start]))
                break
            if nxt not in seen and nxt not in done:
                seen.add(nxt)
                stack.append((nxt, iter(sorted(edges[nxt]))))
        done.add(start)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)
