"""The reference pages mkdocs generates from the code at build time, so they cannot drift from it.

A page holds a marker (`<!-- generated: NAME -->`) that `on_page_markdown` replaces with GENERATORS[NAME]():
the REST API from the OpenAPI schema drf-spectacular builds (what `manage.py spectacular` writes), the command
line from its Typer app, the management commands from their argparse parsers, the metrics and decision reasons
read from the source (AST: no services needed to build the docs), and the import-linter layers contract from
pyproject.toml."""
from __future__ import annotations

import ast
import os
import re
import sys
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"<!-- generated: ([a-z-]+) -->")
SKIP_DIRS = {".venv", ".git", ".run", "out", "docs", "tests", "node_modules", "__pycache__", "client"}


def on_page_markdown(markdown: str, page, config, files) -> str:
    return MARKER.sub(lambda m: GENERATORS[m.group(1)](), markdown)


@cache
def _django() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tidal.settings")
    import django

    django.setup()


def _cell(text: object) -> str:
    """One Markdown table cell: no newline, no bare pipe."""
    return " ".join(str(text if text is not None else "").split()).replace("|", "\\|")


def _table(header: tuple[str, ...], rows: list[tuple]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# REST API -----------------------------------------------------------------------------------------------------------

def _schema_type(schema: dict) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#schema-{name.lower()})"
    for key in ("oneOf", "anyOf", "allOf"):
        if key in schema:
            return " or ".join(_schema_type(s) for s in schema[key])
    kind = schema.get("type", "object")
    if kind == "array":
        return "list of " + _schema_type(schema.get("items", {}))
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"] if v not in ("", None)) or kind
    return kind + (f" ({schema['format']})" if "format" in schema else "")


def _operation(method: str, path: str, op: dict) -> str:
    out = [f"### {method.upper()} `{path}`", ""]
    if op.get("description"):
        out += [op["description"].strip(), ""]
    params = [(p["name"], p["in"], "yes" if p.get("required") else "", _schema_type(p.get("schema", {})),
               p.get("description", "")) for p in op.get("parameters", [])]
    if params:
        out.append(_table(("parameter", "in", "required", "type", "description"), params))
    body = op.get("requestBody", {}).get("content", {})
    if body:
        kinds = ", ".join(f"`{ct}`: {_schema_type(c.get('schema', {}))}" for ct, c in body.items())
        out += [f"Body: {kinds}", ""]
    responses = [(code, r.get("description", ""),
                  ", ".join(_schema_type(c.get("schema", {})) for c in r.get("content", {}).values()))
                 for code, r in op.get("responses", {}).items()]
    out.append(_table(("status", "meaning", "body"), responses))
    return "\n".join(out)


def _component(name: str, schema: dict) -> str:
    out = [f"### {name} {{#schema-{name.lower()}}}", ""]
    if schema.get("description"):
        out += [schema["description"].strip(), ""]
    required = set(schema.get("required", []))
    props = schema.get("properties", {})
    if props:
        out.append(_table(("field", "type", "required", "read-only", "description"), [
            (f"`{field}`", _schema_type(s), "yes" if field in required else "", "yes" if s.get("readOnly") else "",
             s.get("description", "")) for field, s in props.items()]))
    else:
        out += [f"Type: {_schema_type(schema)}", ""]
    return "\n".join(out)


def rest_api() -> str:
    _django()
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    out = [f"Schema version {schema['info'].get('version', '')}: {len(schema['paths'])} paths.", ""]
    groups: dict[str, list[str]] = {}
    for path, item in schema["paths"].items():
        group = path.removeprefix("/api/").split("/", 1)[0] or "api"
        for method, op in item.items():
            if method in {"get", "post", "put", "patch", "delete"}:
                groups.setdefault(group, []).append(_operation(method, path, op))
    for group in sorted(groups):
        out += [f"## {group}", "", *groups[group]]
    out += ["## Schemas", ""]
    out += [_component(name, s) for name, s in sorted(schema.get("components", {}).get("schemas", {}).items())]
    return "\n".join(out)


# Command line -------------------------------------------------------------------------------------------------------

def _cli_commands(group, prefix: str) -> Iterator[tuple[str, object]]:
    import click

    for name in group.list_commands(click.Context(group)):
        command = group.get_command(click.Context(group), name)
        if command is None or command.hidden:
            continue
        yield f"{prefix} {name}", command
        if isinstance(command, click.Group):
            yield from _cli_commands(command, f"{prefix} {name}")


def _cli_command(path: str, command) -> str:
    import click

    usage = " ".join(command.collect_usage_pieces(click.Context(command)))
    out = [f"## `{path}`", "", (command.help or "").strip(), "", "```text", f"{path} {usage}", "```", ""]
    rows = []
    for param in command.params:
        if isinstance(param, click.Argument):
            rows.append((f"`{param.human_readable_name}`", "argument", "yes" if param.required else "", ""))
        elif not param.hidden:
            default = "" if param.default in (None, False, (), []) or callable(param.default) else param.default
            rows.append((" ".join(f"`{o}`" for o in (*param.opts, *param.secondary_opts)), param.help or "",
                         "yes" if param.required else "", f"`{default}`" if default != "" else ""))
    if rows:
        out.append(_table(("name", "help", "required", "default"), rows))
    if command.epilog:
        out += [command.epilog.strip(), ""]  # Markdown: the app's rich_markup_mode
    return "\n".join(out)


def cli() -> str:
    sys.path.insert(0, str(ROOT / "client"))
    import typer.main

    from tidal_cli.cli import app

    group = typer.main.get_command(app)
    out = [(group.help or "").strip(), ""]
    if group.epilog:
        out += [group.epilog.strip(), ""]
    out += [_cli_command(path, command) for path, command in _cli_commands(group, "tidal")]
    return "\n".join(out)


# Management commands ------------------------------------------------------------------------------------------------

def management_commands() -> str:
    _django()
    from django.apps import apps
    from django.core.management import get_commands, load_command_class

    ours = {a.name for a in apps.get_app_configs() if Path(a.path).resolve().is_relative_to(ROOT)}
    os.environ["COLUMNS"] = "110"  # argparse wraps help to the terminal's width; the page has one width
    out = []
    for name, app in sorted(get_commands().items()):
        if app not in ours:
            continue
        command = load_command_class(app, name)
        parser = command.create_parser("manage.py", name)
        out += [f"## `{name}`", "", f"App `{app}`.", "", "```text", parser.format_help().strip(), "```", ""]
    return "\n".join(out)


# Metrics and decision reasons, read from the source -----------------------------------------------------------------

@cache
def _sources() -> tuple[tuple[str, ast.Module, list[str]], ...]:
    """Every Python module of Tidal's own packages, parsed (the walk skips the virtualenv and runtime folders)."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(f for f in files if f.endswith(".py")):
            path = Path(folder) / name
            text = path.read_text()
            found.append((str(path.relative_to(ROOT)), ast.parse(text), text.splitlines()))
    return tuple(found)


def _const(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


METRIC_KINDS = {"Counter": "counter", "Gauge": "gauge", "Histogram": "histogram", "Summary": "summary"}


def metrics() -> str:
    rows: dict[str, tuple] = {}
    for rel, tree, _ in _sources():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            kind = METRIC_KINDS.get(func.removesuffix("MetricFamily"))
            name = _const(node.args[0])
            if kind is None or not name or not name.startswith("tidal_"):
                continue
            kw = {k.arg: k.value for k in node.keywords}
            doc = _const(node.args[1]) if len(node.args) > 1 else _const(kw.get("documentation"))
            labels = kw.get("labels") or kw.get("labelnames") or (node.args[2] if len(node.args) > 2 else None)
            names = [_const(e) for e in labels.elts] if isinstance(labels, (ast.List, ast.Tuple)) else []
            rows.setdefault(name, (rel, (f"`{name}`", kind, ", ".join(f"`{n}`" for n in names if n), doc or "")))
    out = []
    for module in sorted({rel for rel, _ in rows.values()}):
        out += [f"## `{module}`", "", _table(("metric", "type", "labels", "meaning"),
                                             [row for name, (rel, row) in sorted(rows.items()) if rel == module])]
    return "\n".join(out)


def _comment(line: str) -> str:
    return line.split("#", 1)[1].strip() if "#" in line else ""


def _explained() -> dict[str, str]:
    """Where the hand-written pages first mention each `code`: a link to that page's heading."""
    from markdown.extensions.toc import slugify

    found: dict[str, str] = {}
    for page in sorted((ROOT / "docs").rglob("*.md")):
        rel = page.relative_to(ROOT / "docs")
        if rel.parts[0] in {"reference", "results"}:
            continue
        anchor, fenced = "", False
        for line in page.read_text().splitlines():
            fenced = fenced != line.startswith("```")
            heading = None if fenced else re.match(r"^#{2,6}\s+(.+)$", line)
            if heading:
                anchor = "#" + slugify(heading.group(1).replace("`", ""), "-")
            for code in re.findall(r"`([a-z][a-z-]+)`", line):
                found.setdefault(code, f"[{rel.with_suffix('').as_posix()}](../{rel.as_posix()}{anchor})")
    return found


def decision_reasons() -> str:
    enums, loose = [], {}
    for rel, tree, lines in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and "Reason" in node.name:
                members = [(_const(s.value), _comment(lines[s.lineno - 1])) for s in node.body
                           if isinstance(s, ast.Assign) and _const(s.value)]
                if members:
                    doc = ast.get_docstring(node) or ""
                    enums.append((f"## `{node.name}` ({rel}) {{#{node.name.lower()}-{Path(rel).stem}}}", doc,
                                  members))
            elif isinstance(node, ast.Call):
                for k in node.keywords:
                    if k.arg == "reason" and _const(k.value):
                        loose.setdefault(_const(k.value), set()).add(rel)
    explained, out = _explained(), []
    for heading, doc, members in enums:
        out += [heading, "", doc, "", _table(("code", "note in the source", "explained in"), [
            (f"`{code}`", note, explained.get(code, "")) for code, note in members])]
    enum_codes = {code for _, _, members in enums for code, _ in members}
    rest = [(f"`{code}`", ", ".join(f"`{f}`" for f in sorted(files)), explained.get(code, ""))
            for code, files in sorted(loose.items()) if code not in enum_codes]
    out += ["## Reasons written where they are decided", "",
            "Codes passed as a literal `reason=` (decision log records, alerts, events), with the modules that "
            "write them.", "", _table(("code", "written by", "explained in"), rest)]
    return "\n".join(out)


# The layers contract --------------------------------------------------------------------------------------------

def layers() -> str:
    """Every `layers` contract of pyproject.toml, top layer first: `|` joins independent siblings (they may not
    import each other), `:` siblings that may."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    out = []
    for contract in (c for c in contracts if c.get("type") == "layers"):
        rows = []
        for layer in contract["layers"]:
            independent = "|" in layer
            names = [n.strip() for n in re.split(r"[|:]", layer)]
            note = ("independent: none imports another" if independent else "may import each other") \
                if len(names) > 1 else ""
            rows.append((" ".join(f"`{n}`" for n in names), note))
        out += [f"**{contract['name']}**", "", _table(("layer, top first", "siblings"), rows)]
        ignored = contract.get("ignore_imports", [])
        if ignored:
            out += ["Imports it still lets through (a list that may only shrink):", "",
                    *(f"- `{i}`" for i in ignored), ""]
    return "\n".join(out)


GENERATORS: dict[str, Callable[[], str]] = {
    "rest-api": rest_api,
    "cli": cli,
    "management-commands": management_commands,
    "metrics": metrics,
    "decision-reasons": decision_reasons,
    "layers": layers,
}
