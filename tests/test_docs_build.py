"""The documentation site builds with ``mkdocs build --strict``: a broken link, a missing page or
a page left out of the navigation fails the build, and so this test. The build runs offline
(mkdocs.yml uses only the built-in search plugin and no web fonts)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import re

ROOT = Path(__file__).resolve().parent.parent


def test_mkdocs_build_strict(tmp_path):
    import material  # noqa: F401 (mkdocs and mkdocs-material are in the test extra)
    import mkdocs  # noqa: F401
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    assert (tmp_path / "site" / "index.html").exists()
    assert (tmp_path / "site" / "reference" / "settings" / "index.html").exists()
    shutil.rmtree(tmp_path / "site", ignore_errors=True)


def test_every_docs_page_is_in_the_navigation():
    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def pages(nav):
        for entry in nav:
            for value in entry.values():
                yield from (pages(value) if isinstance(value, list) else [value])

    listed = set(pages(config["nav"]))
    present = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert present - listed == set(), f"pages missing from mkdocs.yml's nav: {sorted(present - listed)}"
    assert listed - present == set(), f"nav entries without a page: {sorted(listed - present)}"


def test_readme_is_short_and_for_users():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 250
    assert not re.search(r"\bissue\s*#?\d+|\(issue|Targets \(", text, re.I), "no issue numbers in the README"
    assert "../" not in text, "no paths outside the repository"
    for link in re.findall(r"\]\(([^)#]+)", text):
        if not link.startswith("http"):
            assert (ROOT / link).exists(), f"README links to a missing file: {link}"
