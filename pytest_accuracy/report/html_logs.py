"""The logs, config and precheck parts of the HTML report: criteria tables first, then plots."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from pytest_accuracy.report.html_compare import breakable, number
from pytest_accuracy.report.html_page import esc, filter_controls, fmt, section, wide
from pytest_accuracy.report.svg import bar_chart

PLOT_INSTALL = "pip install 'pytest-accuracy[plot]'"
_TITLES = {"first_loss": "first-step loss", "mean_loss": "mean loss", "grad_norm": "grad norm",
           "band": "within the bench band", "zero_centred": "centred on zero",
           "divergence": "no divergence", "local_norm": "local norms"}


def loss_sections(loss: dict[str, Any], images: list[Path], plot_note: str | None) -> list[str]:
    checks: dict[str, Any] = loss.get("checks") or {}
    out = [section("Migration standard (training logs)", criteria_table(loss, checks), "loss")]
    local = checks.get("local_norm") or {}
    if local.get("bars"):
        out.append(section("Local norms: the parameters that differ most", _local_norm_chart(local),
                           "local-norm"))
    out.append(section("Curves", _plots(images, plot_note), "plots"))
    return out


def criteria_table(loss: dict[str, Any], checks: dict[str, Any]) -> str:
    """The migration standard's checks as a table (the built-in page's and a suite test's)."""
    step = loss.get("divergence_step")
    lead = (f"<p class='note'>The loss curves diverge from <b>step {esc(step)}</b>.</p>"
            if step is not None else "")
    rows = []
    for name, check in checks.items():
        status = str(check.get("status"))
        rows.append(
            f"<tr data-status='{esc(status)}'><td>{esc(_TITLES.get(name, name))} "
            f"<code>{esc(name)}</code></td><td>{_pairs(check.get('measured'))}</td>"
            f"<td>{_pairs(check.get('allowed'))}</td>"
            f"<td><span class='s-{esc(status)}'>{esc(status)}</span></td>"
            f"<td>{esc(', '.join(str(s) for s in check.get('worst_steps') or []))}</td>"
            f"<td class='msg'>{esc(check.get('message') or '')}</td></tr>")
    counted = (f"<p>{esc(loss.get('steps_compared'))} paired steps compared, "
               f"{esc(loss.get('steps_skipped'))} skipped.</p>" if "steps_compared" in loss else "")
    return (lead + counted + wide("<table class='sortable'><thead><tr><th>criterion</th>"
                                  "<th>measured</th><th>allowed</th><th>verdict</th>"
                                  "<th>worst steps</th><th>message</th></tr></thead><tbody>"
                                  + "".join(rows) + "</tbody></table>"))


def _pairs(values: Any) -> str:
    if not isinstance(values, dict):
        return ""
    return "<br>".join(f"{esc(k)} <b>{fmt(v)}</b>" for k, v in values.items())


def _local_norm_chart(local: dict[str, Any]) -> str:
    bars = [b for b in local["bars"] if isinstance(b, dict)
            and number(b.get("rel_diff")) is not None]
    limit = number((local.get("allowed") or {}).get("rel_diff"))
    step = (local.get("measured") or {}).get("step")
    return bar_chart([str(b.get("param")) for b in bars],
                     [float(number(b["rel_diff"]) or 0.0) for b in bars], limit=limit,
                     title=f"relative difference of the local norm at step {step}, worst first")


def _plots(images: list[Path], plot_note: str | None) -> str:
    if not images:
        why = plot_note or "matplotlib is not installed"
        return (f"<p class='note'>No plots: {esc(why.strip())}. Install the plot extra and run "
                f"again: <code>{esc(PLOT_INSTALL)}</code></p>")
    return "".join(f"<p><img alt='{esc(p.stem)}' style='max-width:100%' src='data:image/png;"
                   f"base64,{base64.b64encode(p.read_bytes()).decode()}'></p>" for p in images)


def config_section(config: dict[str, Any]) -> str:
    keys: list[dict[str, Any]] = config.get("keys") or []
    failed = [k for k in keys if k.get("status") in ("fail", "missing")]
    rows = "".join(
        f"<tr data-status='{esc(k.get('status'))}'><td><code>{_key(k.get('name'))}</code></td>"
        f"<td>{esc(k.get('category'))}</td><td><span class='s-{esc(k.get('status'))}'>"
        f"{esc(k.get('status'))}</span></td>{_value_cell(k.get('npu_value'))}"
        f"{_value_cell(k.get('bench_value'))}"
        f"<td class='msg'>{breakable(k.get('summary'))}</td></tr>"
        for k in sorted(keys, key=lambda k: k.get("status") not in ("fail", "missing")))
    return section(f"Config checklist: {len(failed)} of {len(keys)} keys fail",
                   wide("<table class='sortable'><thead><tr><th>key</th><th>category</th>"
                        "<th>verdict</th><th>NPU</th><th>bench</th><th>message</th></tr>"
                        f"</thead><tbody>{rows}</tbody></table>"), "config")


def _key(name: Any) -> str:
    """A checklist key that may break after its underscores and dots on a narrow screen."""
    return breakable(name).replace("_", "_<wbr>")


def _value_cell(value: Any) -> str:
    """A config value: a number stays on one line, text may wrap anywhere (long paths)."""
    cls = "val nowrap" if number(value) is not None else "val"
    return f"<td class='{cls}'>{esc(value)}</td>"


# The precheck table's order: what needs a look first, then what passed, then what was not run
_PRECHECK_ORDER = {"fail": 0, "pass": 2, "skip": 3}  # any other status (a merged part's) is 1


def precheck_section(precheck: dict[str, Any]) -> str:
    """Every API the precheck ran, failures first (run order kept within a status), with the
    node table's text and status filter."""
    apis = [a for a in precheck.get("apis") or [] if isinstance(a, dict)]
    apis.sort(key=_precheck_rank)  # stable: run order within a status
    failed = [a for a in apis if a.get("status") == "fail"]
    present = list(dict.fromkeys(str(a.get("status")) for a in apis))
    rows = "".join(
        f"<tr data-status='{esc(a.get('status'))}'>"
        f"<td class='name'><code>{esc(a.get('name'))}</code></td>"
        f"<td><span class='s-{esc(a.get('status'))}'>{esc(a.get('status'))}</span></td>"
        f"<td class='num'>{fmt(a.get('cosine'))}</td><td class='num'>{fmt(a.get('max_abs'))}</td>"
        f"<td class='text'>{esc(a.get('reason'))}</td></tr>" for a in apis)
    return section(f"Precheck: {len(failed)} of {len(apis)} APIs fail",
                   filter_controls(_PRECHECK_TABLE, present, len(apis), "API name, reason")
                   + f"<div class='scroll'><table id='{_PRECHECK_TABLE}' class='sortable'>"
                   "<thead><tr><th>API</th><th>verdict</th><th>cosine</th><th>max abs</th>"
                   f"<th>reason</th></tr></thead><tbody>{rows}</tbody></table></div>",
                   "precheck")


_PRECHECK_TABLE = "precheck-table"


def _precheck_rank(api: dict[str, Any]) -> int:
    return _PRECHECK_ORDER.get(str(api.get("status")), 1)
