"""One self-contained HTML page: every table and figure, images embedded as base64 PNG (no external file,
script or font is referenced), with the seeds and n stated."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1200px;color:#222;
padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;font-size:.8em;margin:.6em 0}th,td{border:1px solid #ccc;padding:3px 6px;
text-align:right}th{background:#f3f3f3}td:first-child,td:nth-child(2),th:first-child,th:nth-child(2){text-align:left}
tr.paper td{color:#555;font-style:italic;background:#fafafa}
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #eee}figcaption{font-size:.85em;color:#444}
ul.notes{font-size:.85em;color:#333}.meta{font-size:.9em;color:#333}code{background:#f5f5f5;padding:0 2px}
"""


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    row_classes: list[str] = field(default_factory=list)


@dataclass
class Figure:
    title: str
    png: Path
    caption: str = ""


def image_data_uri(png: str | Path) -> str:
    return "data:image/png;base64," + base64.b64encode(Path(png).read_bytes()).decode("ascii")


def render_table(t: Table) -> str:
    out = [f"<h3>{html.escape(t.title)}</h3>", "<table>", "<thead><tr>"]
    out += [f"<th>{html.escape(h)}</th>" for h in t.header]
    out.append("</tr></thead><tbody>")
    for i, r in enumerate(t.rows):
        cls = t.row_classes[i] if i < len(t.row_classes) else ""
        out.append(f'<tr class="{cls}">' + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>")
    out.append("</tbody></table>")
    if t.notes:
        out.append('<ul class="notes">' + "".join(f"<li>{html.escape(n)}</li>" for n in t.notes) + "</ul>")
    return "\n".join(out)


def render_figure(f: Figure) -> str:
    alt = html.escape(f.title, quote=True)
    return (f'<figure><img src="{image_data_uri(f.png)}" alt="{alt}">'
            f"<figcaption><b>{html.escape(f.title)}</b>. {html.escape(f.caption)}</figcaption></figure>")


def render_page(title: str, meta: list[str], sections: list[tuple[str, list[Table | Figure | str]]]) -> str:
    """The page: a header with `meta` lines, then sections of tables, figures and plain paragraphs."""
    body = [f"<h1>{html.escape(title)}</h1>", '<div class="meta"><ul>']
    body += [f"<li>{html.escape(m)}</li>" for m in meta]
    body.append("</ul></div>")
    for name, items in sections:
        if not items:
            continue
        body.append(f"<h2>{html.escape(name)}</h2>")
        for it in items:
            if isinstance(it, Table):
                body.append(render_table(it))
            elif isinstance(it, Figure):
                body.append(render_figure(it))
            else:
                body.append(f"<p>{html.escape(str(it))}</p>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def write_page(path: str | Path, title: str, meta: list[str], sections) -> Path:
    # lazy: tests replace atomic_write_text at its source, read at call time
    from harness.runs.records import atomic_write_text

    path = Path(path)
    atomic_write_text(path, render_page(title, meta, sections))
    return path
