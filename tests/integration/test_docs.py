"""The documentation site against the code: every `docs/…#anchor` the code cites names a heading that exists, the
configuration page lists exactly the settings the project reads, and the README stays short. (`make test` builds the
site with `mkdocs build --strict`, which checks the links between pages; tests/e2e/test_docs_browser.py opens it.)"""
import re
import subprocess
from pathlib import Path

from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CITATION = re.compile(r"\bdocs/([\w./-]+\.md)(?:#([\w-]+))?")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*(?:\{#([\w-]+)\})?\s*$")
ENV_READ = re.compile(r"""environ(?:\.get)?[(\[]\s*["']([A-Z][A-Z0-9_]+)["']|getenv\(\s*["']([A-Z][A-Z0-9_]+)["']""")


def tracked_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    return [ROOT / name for name in out.splitlines() if not name.startswith("docs/") and (ROOT / name).is_file()]


def anchors(page: Path) -> set[str]:
    """The anchors mkdocs gives a page's headings: an explicit {#id}, else the toc extension's slug of the text as
    rendered (code marks, emphasis and link targets gone)."""
    found, fenced = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        match = None if fenced else HEADING.match(line)
        if match:
            text = re.sub(r"\[([^]]*)\]\([^)]*\)", r"\1", match.group(1)).replace("`", "").replace("*", "")
            found.add(match.group(2) or slugify(text, "-"))
    return found


def citations() -> list[tuple[str, int, str, str | None]]:
    found = []
    for path in tracked_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            found += [(str(path.relative_to(ROOT)), number, m.group(1), m.group(2)) for m in CITATION.finditer(line)]
    return found


def test_anchors_are_the_slugs_mkdocs_renders(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Title\n## The cluster's typical jobs\n## `/metrics`\n## Pools {#pools-rule}\n```\n# no\n```\n")
    assert anchors(page) == {"title", "the-clusters-typical-jobs", "metrics", "pools-rule"}


def test_every_docs_page_and_anchor_cited_in_the_code_exists():
    cited = citations()
    assert len(cited) > 60  # the comments that cite the rule they follow
    broken = [f"{where}:{line}: docs/{page}" + (f"#{anchor}" if anchor else "")
              for where, line, page, anchor in cited
              if not (DOCS / page).is_file() or (anchor and anchor not in anchors(DOCS / page))]
    assert not broken, "citations of a docs page or heading that does not exist:\n" + "\n".join(broken)


def documented_settings() -> set[str]:
    page = (DOCS / "reference" / "configuration.md").read_text()
    rows = [line.split("|")[1] for line in page.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row)}


def test_the_configuration_page_lists_every_setting_the_project_reads():
    settings_py = (ROOT / "tidal" / "settings.py").read_text()
    read = {a or b for a, b in ENV_READ.findall(settings_py)}
    assert len(read) > 50
    assert not read - documented_settings(), f"tidal/settings.py reads these, undocumented: {read - documented_settings()}"


def test_every_documented_setting_is_read_somewhere():
    sources = "\n".join(p.read_text(errors="ignore") for p in tracked_files()
                        if p.suffix in {".py", ".sh", ".yaml", ".yml"} or p.name == "Makefile")
    unread = {name for name in documented_settings() if not re.search(rf"\b{name}\b", sources)}
    assert not unread, f"documented but read nowhere: {unread}"


def test_the_readme_is_short_and_points_to_the_docs():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 150
    assert "make run" in readme and "make test" in readme and "make docs" in readme
    for page in re.findall(r"\]\((docs/[\w./-]+\.md)\)", readme):
        assert (ROOT / page).is_file(), page


def hooks():
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_reference_pages_hold_what_the_code_defines():
    """The generators read the code by shape (AST, Typer, argparse, the schema): a rename that hides something
    from them shows here, not as a quietly shorter page."""
    generated = hooks()
    metrics = generated.metrics()
    assert "`tidal_admissions`" in metrics and "`tidal_loop_ticks`" in metrics
    reasons = generated.decision_reasons()
    for code in ("quota-exhausted", "preempted-reclaim", "scale-out", "online-usage-below-min", "long-job",
                 "bind-failed", "loop-skipping"):
        assert f"`{code}`" in reasons, code
    cli = generated.cli()
    assert all(f"## `tidal {name}`" in cli for name in ("login", "submit", "ls", "describe", "logs", "cancel", "top"))
    commands = generated.management_commands()
    assert commands.count("\n## `") >= 10 and "## `load_demo`" in commands
    assert "## jobs" in generated.rest_api() and "`scheduler`" in generated.layers()
    page = "<!-- generated: metrics -->"
    assert generated.on_page_markdown(page, None, None, None) == metrics
