"""The report page (--acc-report): one self-contained index.html, compare and logs alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_accuracy.report.html_page import Part, esc, joined, page_parts, wide


def render(doc: dict[str, Any], out_dir: Path, images: list[Path]) -> str:
    """The whole page; images are embedded, so the file works alone (a CI artifact, offline)."""
    return "\n".join(joined(part) for part in render_parts(doc, out_dir, images))


def render_parts(doc: dict[str, Any], out_dir: Path, images: list[Path]) -> list[Part]:
    """``render``'s page as the lines it joins with newlines."""
    from pytest_accuracy.report.html_compare import compare_section_parts, headline
    from pytest_accuracy.report.html_logs import config_section, loss_sections, precheck_section
    from pytest_accuracy.report.html_suites import suites_section

    sections: list[Part] = []
    lines: list[str] = []
    if doc.get("merge"):
        lines.append(f"Merged {len(doc['merge'].get('parts') or [])} parts")
        sections.append(_merge(doc["merge"]))
    compare = doc.get("compare")
    if compare:
        lines.append("Compare: " + headline(compare))
        sections += compare_section_parts(compare, (doc.get("criteria") or {}).get("compare") or {})
    loss = doc.get("loss")
    if loss:
        failed = [n for n, c in (loss.get("checks") or {}).items() if c.get("status") == "fail"]
        lines.append(f"Training logs: {len(failed)} of {len(loss.get('checks') or {})} criteria "
                     "missed" + (f": {esc(', '.join(failed))}" if failed else ""))
        note = out_dir / "plots_unavailable.txt"
        sections += loss_sections(loss, images, _note(note))
    if doc.get("config"):
        lines.append("Config: " + _counted(doc["config"].get("keys"), "checklist keys", "differ"))
        sections.append(config_section(doc["config"]))
    if doc.get("precheck"):
        lines.append("Precheck: " + _counted(doc["precheck"].get("apis"), "APIs", "fail"))
        sections.append(precheck_section(doc["precheck"]))
    if doc.get("suites"):
        lines.append("Your suites: " + _counted(doc["suites"].get("tests"), "tests", "fail"))
        sections.append(suites_section(doc["suites"]))
    for group, field, title in _OTHER:
        records = (doc.get(group) or {}).get(field) if isinstance(doc.get(group), dict) else None
        if records:
            lines.append(f"{title}: " + _counted(records, "checks", "fail"))
            sections.append(_other_section(title, group, records))
    sections.append(_inputs(doc))
    verdict = str(doc.get("verdict"))
    return page_parts(f"pytest-accuracy: {verdict.upper()}", verdict, "<br>".join(lines) or
                      "nothing was checked", sections, _footer(doc, out_dir))


# the groups whose records are a name, a status and a summary: (document key, list, title)
_OTHER = (("data", "keys", "Data"), ("replicas", "keys", "Data-parallel replicas"),
          ("overflow", "keys", "Overflow"), ("monitor", "states", "Monitor"))


def _other_section(title: str, group: str, records: list[Any]) -> str:
    """A table of the group's checks, failing first: name, status, what it found."""
    from pytest_accuracy.report.html_page import section

    order = {"fail": 0, "error": 0, "carried": 1, "skip": 2, "pass": 3}
    shown = sorted((r for r in records if isinstance(r, dict)),
                   key=lambda r: order.get(str(r.get("status")), 2))
    rows = "".join(
        f"<tr data-status='{esc(r.get('status'))}'><td><code>{esc(r.get('name'))}</code></td>"
        f"<td class='s-{esc(r.get('status'))}'>{esc(r.get('status'))}</td>"
        f"<td>{esc(r.get('summary') or '')}</td></tr>" for r in shown)
    return section(title, wide("<table class='sortable'><thead><tr><th>check</th>"
                               "<th>status</th><th>what it found</th></tr></thead>"
                               f"<tbody>{rows}</tbody></table>"), group)


def _counted(records: Any, unit: str, verb: str) -> str:
    """``3 of 63 checklist keys differ: a, b, c`` or ``all 212 APIs pass``; names escaped."""
    records = [r for r in records or [] if isinstance(r, dict)]
    bad = [str(r.get("name")) for r in records if r.get("status") not in ("pass", "skip")]
    if not bad:
        return f"all {len(records)} {unit} pass"
    shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
    return f"{len(bad)} of {len(records)} {unit} {verb}: {esc(shown)}"


def _note(note: Path) -> str | None:
    """Our own note beside the page; whatever else was planted there is not read."""
    from pytest_accuracy.errors import AccuracyInputError
    from pytest_accuracy.safe_io import read_input_text

    try:
        return read_input_text(note, 1 << 16) if note.exists() else None
    except (OSError, UnicodeDecodeError, AccuracyInputError):
        return None


def _merge(merge: dict[str, Any]) -> str:
    """The parts a merged document (--acc-merge) was made of, and why it fails."""
    from pytest_accuracy.report.html_page import section

    reasons = "".join(f"<li>{esc(r)}</li>" for r in merge.get("fail_reasons") or [])
    rows = "".join(
        f"<tr><td><code>{esc(p.get('file'))}</code></td><td class='s-{esc(p.get('verdict'))}'>"
        f"{esc(p.get('verdict'))}</td><td>{esc(p.get('steps'))}</td><td>{esc(p.get('ranks'))}"
        f"</td><td class='num'>{esc(p.get('nodes'))}</td></tr>" for p in merge.get("parts") or [])
    return section("Merged parts", (f"<ul>{reasons}</ul>" if reasons else "")
                   + wide("<table class='sortable'><thead><tr><th>part</th><th>verdict</th>"
                          "<th>steps</th><th>ranks</th><th>nodes</th></tr></thead>"
                          f"<tbody>{rows}</tbody></table>"), "merge")


def _inputs(doc: dict[str, Any]) -> str:
    from pytest_accuracy.report.html_page import section

    inputs = doc.get("inputs")
    rows = "".join(f"<tr><td class='key'>{esc(k)}</td><td>{_input_value(v)}</td></tr>"
                   for k, v in (inputs.items() if isinstance(inputs, dict) else []))
    body = wide(f"<table>{rows}</table>") if rows else ""
    suites = doc.get("suites")
    if isinstance(suites, dict):
        from pytest_accuracy.report.html_suites import suite_input_rows

        mine = suite_input_rows(suites)
        if mine:
            body += ("<p>Read by your suite tests:</p>" + wide(
                "<table class='sortable'><thead><tr><th>as</th><th>path</th><th>tests</th></tr>"
                f"</thead><tbody>{mine}</tbody></table>"))
    return section("Inputs", body or "<p class='note'>No inputs were named.</p>", "inputs")


def _input_value(value: Any) -> str:
    """One path as code; several (two bench logs) as a list of paths, never a Python repr."""
    from pytest_accuracy.report.html_compare import breakable

    if isinstance(value, (list, tuple)):
        items = "".join(f"<li><code>{breakable(v)}</code></li>" for v in value)
        return f"<ul class='paths'>{items}</ul>"
    return f"<code>{breakable(value)}</code>"


def _footer(doc: dict[str, Any], out_dir: Path) -> str:
    files = [p.name for p in sorted(out_dir.glob("*.csv")) + sorted(out_dir.glob("*.yaml"))]
    links = ", ".join(f"<a href='{esc(f)}'>{esc(f)}</a>" for f in files)
    tables = f" Tables beside this page: {links}." if links else ""
    return (f"pytest-accuracy {esc(doc.get('plugin_version'))}, document version "
            f"{esc(doc.get('version'))}.{tables}")
