"""The page ``nsq admin --serve`` sends: textual-serve's ``app_index.html``
(textual_serve/templates/) made to load nothing from another host, so it
works on a machine without internet access.

textual-serve's page links the "Roboto Mono" font (the terminal's, set in
its textual.js) from fonts.googleapis.com although the font files ship in
its own ``static/fonts/``. Here every ``<link>`` to an outside host is
dropped and ``@font-face`` rules point at those local files instead; the
inline SVG logo loses its ``xmlns`` (not needed inside HTML, and not a
fetch, but a URL a reader of the page would have to check).
"""

from __future__ import annotations

import re

__all__ = ["local_page"]

#: a <link ...> element whose href is on another host
_OUTSIDE_LINK = re.compile(r"""<link\b[^>]*\bhref\s*=\s*["']?(?:https?:)?//[^>]*>\s*""", re.IGNORECASE)
_SVG_NS = re.compile(r"""\s+xmlns\s*=\s*["']http://www\.w3\.org/2000/svg["']""")

#: the font faces textual-serve's static/fonts/ holds (variable weight)
FONT_FACES = """    <style>
      @font-face {
        font-family: "Roboto Mono";
        src: url("{{ config.static.url }}fonts/RobotoMono-VariableFont_wght.ttf") format("truetype");
        font-weight: 100 700;
        font-style: normal;
      }
      @font-face {
        font-family: "Roboto Mono";
        src: url("{{ config.static.url }}fonts/RobotoMono-Italic-VariableFont_wght.ttf") format("truetype");
        font-weight: 100 700;
        font-style: italic;
      }
    </style>
"""


def local_page(template: str) -> str:
    """``template`` (textual-serve's page, a Jinja2 template) without links
    to other hosts, with the local Roboto Mono faces before ``</head>``."""
    text = _OUTSIDE_LINK.sub("", template)
    text = _SVG_NS.sub("", text)
    return text.replace("</head>", FONT_FACES + "  </head>", 1)
