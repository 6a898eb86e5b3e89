"""README.md and `packtool --help` describe the same options and environment variables.

- Options: every option a command declares (its typer/click parameters) has a row in that
  command's options table(s) in README.md, and every row names an option the command has. An
  options table is a markdown table whose header is `| option | default | what it does |`; it
  belongs to the commands named in the nearest heading above it (`### profile options`, or
  `### Tokenization options (inspect, profile, pack)` for the shared ones). The options of a row
  are the `--long`/`-s` names in its first cell; its default cell says `required`, `off` (a flag)
  or the default in backticks.
- Environment: every variable packtool's source reads (`os.environ.get("X")`, `os.environ["X"]`,
  `os.getenv("X")`, `"X" in os.environ`) has a row in the README's Environment table (header
  `| variable | default | what it does |`) and a line of its own in the root `packtool --help`
  epilog, and the table names no variable packtool does not read.
- Every command is listed, with a help line, in `packtool --help`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

import pytest
import typer
from paths import ROOT
from typer.testing import CliRunner

import packtool.cli

README = ROOT / "README.md"
PACKAGE = ROOT / "packtool"
OPTIONS_HEADER = ("option", "default", "what it does")
ENV_HEADER = ("variable", "default", "what it does")
ENV_HEADING = "Environment"
HELP_OPTS = {"--help", "-h"}

# Options the README may document ahead of the code: (command, option) pairs that may be in a README
# table while the command does not declare them yet. Meant to be empty; an entry is for one change.
PENDING: set[tuple[str, str]] = set()

GROUP = typer.main.get_command(packtool.cli.app)  # the click Group typer builds
COMMANDS = dict(GROUP.commands)
OPTION_NAME = re.compile(r"(?<![\w-])--?[A-Za-z][\w-]*")


@dataclass
class Table:
    heading: str  # the nearest heading above the table, without the #s
    line: int  # 1-based line of the header row
    rows: list[list[str]]  # cells of each body row, `\|` unescaped

    @property
    def where(self) -> str:
        return f"README.md:{self.line} (under '{self.heading}')"


def _cells(line: str) -> list[str]:
    cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [c.strip().replace("\\|", "|") for c in cells]


def readme_tables(header: tuple[str, ...]) -> list[Table]:
    """The README's tables whose header row is `header` (outside code blocks)."""
    lines = README.read_text().splitlines()
    tables, heading, in_fence, i = [], "", False, 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            in_fence = not in_fence
        elif not in_fence and (m := re.match(r"^#+\s+(.*?)\s*$", line)):
            heading = m.group(1)
        elif not in_fence and line.startswith("|"):
            start = i
            while i < len(lines) and lines[i].startswith("|"):
                i += 1
            block = [_cells(x) for x in lines[start:i]]
            if tuple(c.lower() for c in block[0]) == header:
                tables.append(Table(heading, start + 1, block[2:]))  # block[1]: the |---| row
            continue
        i += 1
    return tables


def table_commands(table: Table) -> set[str]:
    """The commands a table's heading names, e.g. {inspect, profile, pack}."""
    return set(re.findall(r"[a-z]+", table.heading.lower())) & set(COMMANDS)


def declared_options(name: str) -> dict[str, object]:
    """Every option name (`--len`, `-b`, secondary `--no-x`) of a command → its click parameter."""
    out = {}
    for param in COMMANDS[name].params:
        if param.param_type_name != "option":
            continue
        for opt in (*param.opts, *param.secondary_opts):
            if opt not in HELP_OPTS:
                out[opt] = param
    return out


def documented_options(name: str) -> dict[str, tuple[Table, list[str]]]:
    """Every option name in the README tables of a command → (its table, its row)."""
    out = {}
    for table in readme_tables(OPTIONS_HEADER):
        if name in table_commands(table):
            for row in table.rows:
                for opt in OPTION_NAME.findall(row[0]):
                    out[opt] = (table, row)
    return out


def test_every_options_table_names_a_command():
    tables = readme_tables(OPTIONS_HEADER)
    assert tables, (
        f"README.md has no options table (a table with the header | {' | '.join(OPTIONS_HEADER)} |)"
    )
    for table in tables:
        assert table_commands(table), (
            f"the options table at {table.where} belongs to no command: its heading must name one or more "
            f"of {', '.join(COMMANDS)}, e.g. '### profile options'"
        )
        for row in table.rows:
            assert len(row) == len(OPTIONS_HEADER), (
                f"{table.where}: row {row} does not have {len(OPTIONS_HEADER)} cells"
            )
            assert OPTION_NAME.search(row[0]), (
                f"{table.where}: row {row} names no option in its first cell"
            )


def test_pending_options_are_documented():
    for name, opt in sorted(PENDING):
        assert name in COMMANDS, f"PENDING names {name!r}, which is not a packtool command"
        assert opt in documented_options(name), (
            f"PENDING has ({name!r}, {opt!r}), but README.md has no row for it"
        )


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_readme_documents_the_options_of(name):
    declared = declared_options(name)
    documented = documented_options(name)
    tables = sorted({t.where for t, _ in documented.values()})
    if declared and not documented:
        pytest.fail(
            f"README.md has no options table for `packtool {name}`: add one (header "
            f"| {' | '.join(OPTIONS_HEADER)} |) under a heading naming it, e.g. '### {name} options'"
        )
    undocumented = sorted(set(declared) - set(documented))
    assert not undocumented, (
        f"`packtool {name}` declares {', '.join(undocumented)}, missing from its README table(s) "
        f"{'; '.join(tables)}: add a row each"
    )
    pending = {opt for cmd, opt in PENDING if cmd == name}
    stale = sorted(set(documented) - set(declared) - pending)
    assert not stale, (
        f"README.md documents {', '.join(stale)} for `packtool {name}` "
        f"({'; '.join(sorted({documented[o][0].where for o in stale}))}), but the command has no such option "
        f"(see `packtool {name} --help`): remove or fix the row, or add it to PENDING if it is on its way"
    )


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_readme_defaults_match(name):
    """A row's default cell agrees with the command: `required`, `off` for a flag, else the default
    in backticks (options without a default, None, may describe theirs in words)."""
    documented = documented_options(name)
    wrong = []
    for opt, param in declared_options(name).items():
        if opt not in documented:
            continue  # reported by test_readme_documents_the_options_of
        table, row = documented[opt]
        cell = row[1]
        if param.required:
            expected = "required"
        elif param.is_flag:
            expected = "off" if not param.default else "on"
        elif param.default is None:
            continue
        else:
            expected = f"`{param.default}`"
        if cell != expected:
            wrong.append(f"{opt}: {cell!r}, expected {expected!r} ({table.where})")
    assert not wrong, (
        f"README.md's defaults for `packtool {name}` differ from the command's:\n  "
        + "\n  ".join(wrong)
    )


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def _text(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def env_reads() -> dict[str, list[str]]:
    """Every environment variable packtool's source reads → where (`packtool/x.py:12`)."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            name = None
            if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute):
                f = node.func
                if (f.attr == "get" and _is_environ(f.value)) or (
                    f.attr == "getenv" and isinstance(f.value, ast.Name) and f.value.id == "os"
                ):
                    name = _text(node.args[0])
            elif (
                isinstance(node, ast.Subscript)
                and isinstance(node.ctx, ast.Load)
                and _is_environ(node.value)
            ):
                name = _text(node.slice)
            elif (
                isinstance(node, ast.Compare)
                and len(node.ops) == 1
                and isinstance(node.ops[0], ast.In | ast.NotIn)
                and _is_environ(node.comparators[0])
            ):
                name = _text(node.left)
            if name:
                found.setdefault(name, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def readme_env() -> dict[str, Table]:
    tables = [t for t in readme_tables(ENV_HEADER) if t.heading == ENV_HEADING]
    assert tables, (
        f"README.md has no Environment table: a table with the header | {' | '.join(ENV_HEADER)} | "
        f"under the heading '## {ENV_HEADING}'"
    )
    return {
        m.group(0): t
        for t in tables
        for row in t.rows
        if (m := re.search(r"[A-Z][A-Z0-9_]{2,}", row[0]))
    }


def test_env_scan_finds_the_known_variables():
    """The scan is not vacuous: the variables packtool is known to read are found."""
    assert {"PACKTOOL_CACHE", "PACKTOOL_DEBUG", "PACKTOOL_ALLOW_DOWNLOAD"} <= set(env_reads())


def test_readme_environment_table():
    reads, documented = env_reads(), readme_env()
    missing = sorted(set(reads) - set(documented))
    assert not missing, (
        "README.md's Environment table lacks variables packtool reads: "
        + ", ".join(f"{n} (read at {', '.join(reads[n])})" for n in missing)
    )
    stale = sorted(set(documented) - set(reads))
    assert not stale, (
        f"README.md's Environment table documents {', '.join(stale)}, which packtool's source "
        "does not read: remove or fix the row"
    )


def test_root_help_lists_environment_and_commands():
    result = CliRunner().invoke(packtool.cli.app, ["--help"])
    assert result.exit_code == 0, result.output
    epilog = GROUP.epilog or ""
    for name, where in sorted(env_reads().items()):
        assert re.search(rf"^\s*{re.escape(name)}\b", epilog, re.M), (
            f"the `packtool --help` epilog (packtool/cli.py) lacks a line for {name} (read at {', '.join(where)})"
        )
        assert name in result.output, f"`packtool --help` does not show {name}"
    for name, command in COMMANDS.items():
        assert command.get_short_help_str().strip(), (
            f"`packtool {name}` has no help line (its docstring)"
        )
        assert re.search(rf"^\W*{name}\s+\w", result.output, re.M), (
            f"`packtool --help` does not list `{name}`"
        )
