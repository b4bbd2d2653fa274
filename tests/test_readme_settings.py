"""The README's settings table is the one generated from gateway.config.OPTIONS."""
from __future__ import annotations

from pathlib import Path

from gateway.config import REFERENCE_BEGIN, REFERENCE_END, reference_markdown

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_settings_table_is_generated_from_the_options():
    text = README.read_text()
    start, end = text.index(REFERENCE_BEGIN), text.index(REFERENCE_END) + len(REFERENCE_END)
    assert text[start:end] == reference_markdown(), \
        "README settings table is stale: replace it with the output of `python -m gateway.config`"
