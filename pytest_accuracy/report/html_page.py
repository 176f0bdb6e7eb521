"""The HTML page shell: inline style and script, tables that sort and filter, escaping helpers."""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain
from typing import Any

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1b1b1b;
background:#fafafa}
header{padding:14px 28px;color:white}
header.pass{background:#2e7d32}header.fail{background:#c62828}
header h1{margin:0;font-size:22px}header p{margin:4px 0 0;opacity:.92;overflow-wrap:anywhere}
main{padding:8px 28px 40px;max-width:1400px}
section{background:white;border:1px solid #e0e0e0;border-radius:6px;padding:12px 18px;
margin:14px 0}
h2{font-size:17px;margin:4px 0 10px}
.card{border-left:5px solid #6a1b9a;padding:6px 12px;background:#f7f2fa}
.card dt{font-weight:600;float:left;clear:left;width:120px}
.card dd{margin:0 0 4px 130px;overflow-wrap:anywhere}
code,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px}
table{border-collapse:collapse;width:100%}
th,td{padding:3px 8px;text-align:left;border-bottom:1px solid #eee;vertical-align:top}
th{background:#f3f3f3;position:sticky;top:0;cursor:pointer;user-select:none;white-space:nowrap}
td.num{text-align:right}.num,td.num,td b{white-space:nowrap;font-variant-numeric:tabular-nums}
.nowrap,td.name{white-space:nowrap}td.text,td.why,td.msg,td.val{overflow-wrap:anywhere}
td.why{min-width:6em}td.val{min-width:5em}table.nodes td.text{min-width:12em}
table.nodes td,table.nodes th{padding:2px 5px}
tr.compact td{padding-top:0;padding-bottom:0;color:#616161}table td.same{color:#9e9e9e}
.clip{width:0;min-width:100%;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.s-pass{color:#2e7d32;font-weight:600}.s-fail,.s-error{color:#c62828;font-weight:600}
.s-carried{color:#e57373}.s-skip,.s-unmatched{color:#757575}.s-waived{color:#f9a825}
tr.first td{background:#f3e5f5}
.legend{display:flex;flex-wrap:wrap;gap:2px 16px;margin:4px 0}.legend span{white-space:nowrap}
.legend i{display:inline-block;box-sizing:border-box;width:10px;height:10px;border-radius:50%;
margin-right:5px}.legend i.line{height:3px;width:14px;border-radius:0;vertical-align:middle}
.hint{color:#616161;font-size:12.5px;margin:0 0 6px}
.chart{background:white}.chart .grid{stroke:#eee}.chart .ax{font-size:11px;fill:#555}
.chart .ct{font-size:13px;font-weight:600;fill:#222}
@media (max-width:1000px){.chart .ax{font-size:15px}.chart .ct{font-size:18px}}
.controls{margin:6px 0 8px;display:flex;flex-wrap:wrap;gap:6px 8px;align-items:center}
.controls input{width:320px;max-width:100%}
ul.paths{margin:0;padding-left:18px}td.key{width:1%;white-space:nowrap}
.note{background:#fff8e1;border:1px solid #ffe082;padding:8px 12px;border-radius:4px}
.tree{overflow-x:auto}.tree details{margin-left:16px}.tree summary{cursor:pointer}
.sw{display:inline-block;width:10px;height:10px;margin-right:6px;border-radius:2px}
.scroll{max-height:640px;overflow:auto}.wide{overflow-x:auto}
td.msg{white-space:pre-line}
footer{color:#757575;font-size:12px;margin-top:20px}
"""

# Sort by a column (numbers as numbers), filter by text and status: a few lines, no library.
SCRIPT = """
document.querySelectorAll('table.sortable').forEach(function(t){
  t.querySelectorAll('th').forEach(function(th,i){th.addEventListener('click',function(){
    var b=t.tBodies[0],rows=Array.from(b.rows),asc=th.dataset.asc!=='1';th.dataset.asc=asc?'1':'0';
    rows.sort(function(x,y){var a=x.cells[i].dataset.v||x.cells[i].textContent,
      c=y.cells[i].dataset.v||y.cells[i].textContent,na=parseFloat(a),nc=parseFloat(c);
      var r=(!isNaN(na)&&!isNaN(nc))?na-nc:a.localeCompare(c);return asc?r:-r;});
    rows.forEach(function(r){b.appendChild(r);});});});});
function accFilter(id){
  var t=document.getElementById(id),q=document.getElementById(id+'-q').value.toLowerCase(),
      s=document.getElementById(id+'-s').value,shown=0;
  Array.from(t.tBodies[0].rows).forEach(function(r){
    var ok=(!q||r.textContent.toLowerCase().indexOf(q)>=0)&&(!s||r.dataset.status===s);
    r.style.display=ok?'':'none';if(ok)shown++;});
  document.getElementById(id+'-n').textContent=shown;}
"""


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


class Memo(dict[Any, str]):
    """``fn(value)`` (an escaping function) worked out once per distinct string or int: a big
    table repeats its statuses, dtypes, steps, reasons in every row. Other values are not
    kept (``1 == 1.0 == True`` would share one entry); the cache starts over when full, as
    distinct node names would otherwise all stay in it."""

    _KEPT = 8192

    def __init__(self, fn: Callable[[Any], str]) -> None:
        super().__init__()
        self.fn = fn

    def __missing__(self, value: Any) -> str:
        if len(self) >= self._KEPT:
            self.clear()
        text = self[value] = self.fn(value)
        return text

    def __call__(self, value: Any) -> str:
        kind = type(value)
        return self[value] if kind is str or kind is int else self.fn(value)


def fmt(value: Any) -> str:
    """Numbers at 4 significant digits; None as an empty cell."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return esc(value)


# A line of the page, or a long one (a 100k-node table) as the pieces it is made of, made
# as they are read (once)
Part = str | Iterable[str]


def joined(part: Part) -> str:
    return part if isinstance(part, str) else "".join(part)


def page_parts(title: str, verdict: str, subtitle: str, sections: Sequence[Part],
               footer: str) -> list[Part]:
    """The page's lines, which ``html.render`` joins with newlines (each a string, or pieces to join
    without one): a writer may write them piece by piece, never joined, where a 100k-node
    table and its page joined were the report run's peak memory."""
    return [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>",
        f"<header class='{esc(verdict)}'><h1>{esc(title)}</h1><p>{subtitle}</p></header>",
        "<main>", *sections, f"<footer>{footer}</footer>", "</main>",
        f"<script>{SCRIPT}</script></body></html>",
    ]


def section(title: str, body: str, anchor: str = "") -> str:
    return joined(section_parts(title, [body], anchor))


def section_parts(title: str, body: Iterable[str], anchor: str = "") -> Iterator[str]:
    """``section`` as pieces: its body's pieces between the heading and the end tag."""
    ident = f" id='{esc(anchor)}'" if anchor else ""
    return chain([f"<section{ident}><h2>{esc(title)}</h2>"], body, ["</section>"])


def wide(table: str) -> str:
    """A table in a box of its own that scrolls sideways where the page is too narrow for it
    (800 px): its right-hand columns are never cut off, and the page itself keeps its width."""
    return f"<div class='wide'>{table}</div>"


def filter_controls(table_id: str, statuses: Sequence[str], total: int,
                    hint: str = "node name, dtype, reason") -> str:
    """A text box and a status menu over table ``table_id`` (its rows carry data-status), run
    by SCRIPT's accFilter; ``hint`` says what the text box searches."""
    options = "".join(f"<option value='{esc(s)}'>{esc(s)}</option>" for s in statuses)
    return (f"<div class='controls'><input id='{table_id}-q' placeholder='filter: "
            f"{esc(hint)}...' oninput=\"accFilter('{table_id}')\">"
            f"<select id='{table_id}-s' onchange=\"accFilter('{table_id}')\">"
            f"<option value=''>every status</option>{options}</select>"
            f"<span>showing <b id='{table_id}-n'>{total}</b> of {total} rows (click a column "
            "to sort)</span></div>")
