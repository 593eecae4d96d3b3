"""The frame of `pobo report`'s pages: the page itself (style, self-check script, no
absolute paths), its tables and escaping, the folder's name, reading a record, and the
error a folder that cannot be reported raises."""
from __future__ import annotations

import html
import json
import re
from pathlib import Path


class ReportError(ValueError):
    """A folder that is neither a run nor a sweep, or a result in it that cannot be read."""


def load_json(path: Path) -> dict:
    """A JSON object from `path`; ReportError (one line) when it cannot be read."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReportError(f"cannot read {path}: {type(exc).__name__}: {exc}") from None
    if not isinstance(data, dict):
        raise ReportError(f"{path} does not hold a JSON object")
    return data


def _where(folder: Path) -> str:
    """The folder by its name only: the page may be mailed, its absolute path stays here."""
    return f"<p class='where'>folder {_e(folder.resolve().name or folder)}</p>"


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 70em; color: #222;
       padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #ccc; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; }
td, th { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
pre { background: #f8f8f8; padding: 0.6em; overflow-x: auto; white-space: pre-wrap; }
.where { color: #666; font-size: 0.9em; }
.verdict { font-weight: bold; padding: 0.4em 0.6em; display: inline-block; }
.verdict.ok { background: #e3f5e1; } .verdict.bad { background: #fbe3e3; }
.verdict.none { background: #f1f1f1; } .violation { color: #a00; }
svg.pobo-figure { display: block; margin: 1em 0; background: #fff; }
svg .title { font-size: 14px; font-weight: bold; } svg .tick { font-size: 11px; fill: #444; }
svg .axis, svg .legend { font-size: 12px; }
"""

# Collects script errors, then on load writes each figure's rendered size, position and
# curve count, and where the answer (#result) sits, into #pobo-selfcheck (hidden), so that
# a headless browser's dumped DOM shows them.
_SELFCHECK = """
(function () {
  var errors = [];
  window.addEventListener('error', function (e) { errors.push(String(e.message || e)); });
  window.addEventListener('load', function () {
    var figures = Array.prototype.map.call(document.querySelectorAll('svg.pobo-figure'),
      function (svg) {
        var box = svg.getBoundingClientRect();
        return {id: svg.id, width: box.width, height: box.height, top: box.top,
                curves: svg.querySelectorAll('polyline.curve').length};
      });
    var section = document.getElementById('result');
    var answer = section && section.querySelector('.answer');
    var result = section && answer ? {top: section.getBoundingClientRect().top,
      answer_bottom: answer.getBoundingClientRect().bottom, answer: answer.textContent} : null;
    document.getElementById('pobo-selfcheck').textContent =
      JSON.stringify({figures: figures, errors: errors, result: result});
  });
})();
"""


# an absolute POSIX path in the escaped page text (not a tag's "</" nor an escaped one,
# not a URL's "//", not a ratio "a/b")
_ABSOLUTE_PATH = re.compile(r"(?<![\w.~:/<-])(?<!&lt;)/(?:[^\s/<>'\"&;]+/)*([^\s/<>'\"&;]+)")


def without_paths(text: str) -> str:
    """`text` with every absolute path cut to its last part (…/data.csv): a result.json
    may name files by where they were on the machine that ran it, the page names none."""
    return _ABSOLUTE_PATH.sub(lambda m: "…/" + m.group(1), text)


def _page(title: str, body: list[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
            f"<title>{without_paths(_e(title))}</title>\n<style>{_STYLE}</style>\n"
            f"<script>{_SELFCHECK}</script>\n</head>\n<body>\n"
            + without_paths("\n".join(body))
            + "\n<pre id='pobo-selfcheck' hidden></pre>\n</body>\n</html>\n")


def _table(header, rows, head: bool = True) -> str:
    th = ("<tr>" + "".join(f"<th>{_e(h)}</th>" for h in header) + "</tr>") if head else ""
    return ("<table>" + th + "".join("<tr>" + "".join(f"<td>{_e(_value(c))}</td>" for c in row)
                                     + "</tr>" for row in rows) + "</table>")


def _value(v: object) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(_value(x) for x in v)
    if isinstance(v, dict):
        return "; ".join(f"{k}: {_value(x)}" for k, x in v.items())
    return str(v)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)
