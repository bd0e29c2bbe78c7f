"""The documentation site builds with ``mkdocs build --strict``, and its generated pages
(CLI reference, API reference, configuration keys) cover what the code defines."""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT as ROOT
from tests.helpers import docs_tool

gen_cli_reference = docs_tool("gen_cli_reference")
gen_config_reference = docs_tool("gen_config_reference")


def _missing_docs_tools() -> str | None:
    for module, package in (("mkdocs", "mkdocs"), ("mkdocstrings", "mkdocstrings[python]"),
                            ("mkdocstrings_handlers.python", "mkdocstrings[python]")):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            return f"{module} is not installed (pip install mkdocs '{package}')"
    return None


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    reason = _missing_docs_tools()
    if reason:
        pytest.fail(f"{reason}; the test extra installs it: pip install -e '.[test]'")
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(ROOT / "mkdocs.yml"), "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}{proc.stderr}"
    return out


def test_site_builds_strict(site):
    for page in ("index.html", "cli-reference.html", "api-reference.html",
                 "configuration-keys.html"):
        assert (site / page).is_file(), page


def test_site_links_open_from_disk(site):
    """Opened with file:// (no web server), every link between pages names a file that
    exists: no link to a folder, which a browser would show as a directory listing."""
    checked = 0
    for page in site.rglob("*.html"):
        if page.name == "404.html":  # a web server's page, with links from the site's root
            continue
        html = page.read_text(encoding="utf-8")
        for href in re.findall(r'href="([^"#?]*)[^"]*"', html):
            if not href or re.match(r"[a-z]+:", href) or href.startswith("//"):
                continue  # this page, or another site
            target = (page.parent / href).resolve()
            assert target.is_file(), f"{page.relative_to(site)} links to {href}"
            checked += 1
    assert checked > 100


def _loaded(html: str) -> list[str]:
    """What a page makes the browser fetch: script sources and stylesheet links."""
    scripts = re.findall(r'<script[^>]*\ssrc="([^"]+)"', html)
    sheets = [re.search(r'href="([^"]+)"', tag).group(1)
              for tag in re.findall(r"<link[^>]*>", html)
              if re.search(r'rel="stylesheet"', tag) and 'href="' in tag]
    return scripts + sheets


def test_the_site_loads_nothing_from_the_network(site):
    """Opened offline (a login node, a laptop on a train), every script and stylesheet a page
    loads is a file of the site: no CDN (the theme's highlight.js came from one)."""
    remote = re.compile(r"^(https?:)?//")
    loaded = {}
    for page in site.rglob("*.html"):
        for url in _loaded(page.read_text(encoding="utf-8")):
            loaded.setdefault(url, page.relative_to(site))
    external = {url: str(page) for url, page in loaded.items() if remote.match(url)}
    assert not external, f"pages load from the network: {external}"
    assert any(url.endswith("css/pygments.css") for url in loaded), sorted(loaded)
    for sheet in site.rglob("*.css"):
        text = sheet.read_text(encoding="utf-8", errors="replace")
        imports = re.findall(r"(?:url\(|@import)\s*['\"]?((?:https?:)?//[^'\")\s]+)", text)
        assert not imports, (sheet.relative_to(site), imports)


def test_code_blocks_are_highlighted_when_the_site_is_built(site):
    """Colours come with the HTML (Pygments' spans) and a local stylesheet, not from a script
    that runs in the browser."""
    html = (site / "getting-started.html").read_text(encoding="utf-8")
    assert '<div class="highlight"><pre><span></span><code><span class="kn">from</span>' in html
    assert re.search(r'<span class="k">def</span>', html)
    assert re.search(r'<link[^>]*href="css/pygments.css"', html)
    styles = (site / "css" / "pygments.css").read_text(encoding="utf-8")
    for token in (".highlight .kn", ".highlight .k ", ".highlight .s2", ".highlight .c1"):
        assert token in styles, token
    assert "hljs" not in html


def test_wide_tables_wrap_and_scroll_in_their_own_box(site):
    """The theme's script wraps tables in .wy-table-responsive, whose cells never wrap (a table
    of sentences became a line thousands of pixels wide at 1280 px): docs/css/extra.css wraps
    the cells and lets a table that still cannot fit scroll sideways in its own box. Measured
    with headless Chromium at 1280 px when it was added (guarantees.html's fault table: 3,313
    px wide in a 696 px column before, 696 px after); here: the rules are there and applied."""
    html = (site / "guarantees.html").read_text(encoding="utf-8")
    assert re.search(r'<link[^>]*href="css/extra.css"', html)
    assert html.index("css/extra.css") > html.index("css/theme_extra.css")  # it overrides it
    css = re.sub(r"/\*.*?\*/", "", (site / "css" / "extra.css").read_text(encoding="utf-8"),
                 flags=re.S)
    rules = {" ".join(sel.split()): body for sel, body in re.findall(r"([^{}]+)\{([^}]*)\}", css)}
    cells = rules[".wy-table-responsive table td, .wy-table-responsive table th"]
    assert "white-space: normal" in cells
    table = rules[".rst-content table"]
    assert "display: block" in table and "overflow-x: auto" in table
    assert "max-width: 100%" in table


def test_generated_pages_are_not_stored_in_docs():
    for name in ("cli-reference.md", "api-reference.md", "configuration-keys.md"):
        assert not (ROOT / "docs" / name).exists(), (
            f"docs/{name} is generated at build time (tools/docs/hooks.py); remove the copy")


def test_api_reference_documents_every_export(site):
    import curator_dask

    html = (site / "api-reference.html").read_text(encoding="utf-8")
    for name in curator_dask.__all__:
        obj = getattr(curator_dask, name)
        assert f'id="{obj.__module__}.{obj.__qualname__}"' in html, name


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return [opt for action in parser._actions for opt in action.option_strings
            if action.help is not argparse.SUPPRESS
            and not isinstance(action, argparse._HelpAction)]


def test_cli_reference_lists_every_command_and_option(site):
    from curator_dask.cli.main import build_parser

    html = (site / "cli-reference.html").read_text(encoding="utf-8")
    commands = list(gen_cli_reference.walk(build_parser()))
    assert len(commands) > 1
    for path, parser, _summary in commands:
        assert f'id="{gen_cli_reference.anchor(path)}"' in html, path
        section = html.split(f'id="{gen_cli_reference.anchor(path)}"', 1)[1]
        section = re.split(r"<h[1-4][ >]", section, maxsplit=1)[0]  # up to the next command
        for option in _options(parser):
            assert option in section, (path, option)


def test_cli_reference_text_matches_the_parser():
    from curator_dask.cli.main import build_parser

    text = gen_cli_reference.render(build_parser())
    for path, parser, _summary in gen_cli_reference.walk(build_parser()):
        anchor = "{#" + gen_cli_reference.anchor(path) + "}"
        assert anchor in text, path
        section = text.split(anchor, 1)[1].split("\n## ", 1)[0]  # up to the next command
        for option in _options(parser):
            assert re.search(rf"`[^`]*{re.escape(option)}\b", section), (path, option)


def test_configuration_keys_have_working_environment_variables():
    """Each documented variable really sets its key (checked in a fresh interpreter)."""
    rows = gen_config_reference.keys()
    assert rows
    env = {row["env"]: "__probe__" for row in rows if row["default"] != "__probe__"}
    code = ("import json, curator_dask.config as c; "
            f"print(json.dumps([c.get(k) for k in {[r['key'] for r in rows]!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**_clean_env(), **env}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    import json

    values = json.loads(proc.stdout)
    wrong = [r["key"] for r, v in zip(rows, values, strict=True) if v != "__probe__"]
    assert not wrong, f"environment variables that do not reach their key: {wrong}"


def test_every_configuration_key_is_described():
    """A comment above the key in curator_dask.yaml, or a row in docs/configuration.md."""
    rows = gen_config_reference.keys(str(ROOT / "docs" / "configuration.md"))
    missing = [row["key"] for row in rows if not row["meaning"]]
    assert not missing, (f"configuration keys without a description: {missing}; add a comment "
                         "above each in curator_dask/curator_dask.yaml or a row in "
                         "docs/configuration.md")


def _clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}


def test_cli_reference_usage_lines_fit_and_pages_are_links():
    """Issue 32, item 13: `run`'s usage was cut at the right edge (a choices list wider than
    the page), and `docs/recipes.md` in its description was no link."""
    from curator_dask.cli.main import build_parser

    for path, parser, _summary in gen_cli_reference.walk(build_parser()):
        wide = [line for line in gen_cli_reference.usage(parser).splitlines()
                if len(line) > gen_cli_reference.USAGE_WIDTH]
        assert not wide, (path, wide)
    text = gen_cli_reference.render(build_parser())
    assert "[docs/recipes.md](recipes.md)" in text
    assert not re.search(r"(?<!\[)docs/[\w-]+\.md(?!\])", text)  # every page named is a link
