"""Text from the data (a model's or sweep's name, a reason, a layer) written so that it shows as
itself in Markdown: imported by every layer that writes Markdown (farm compare's report, the
dashboard's pages, `--format markdown`)."""

from __future__ import annotations

import re
from typing import Any

MARKDOWN_SPECIALS = re.compile(r"([\\`*_\[\]<>#!|~$])")  # what starts markup inside a line


def markdown_text(value: Any) -> str:
    """Text from the data (a model's or sweep's name, a reason, a layer) as Markdown that shows
    exactly that text: what would start an image, a link, emphasis, code, HTML, Streamlit's
    `:red[...]` or LaTeX (`$`) is escaped, so `![x](http://host/x.png)` in a model's name is
    shown, never fetched as an image (the dashboard's pages, `--format markdown`)."""
    return MARKDOWN_SPECIALS.sub(r"\\\1", str(value))
