"""Text from inputs made safe to print: control characters escaped, length bounded."""

from __future__ import annotations

import re
import reprlib

from pytest_accuracy.limits import limit

__all__ = ["brief", "escape_controls", "escape_line", "headline", "printable"]

# C0/C1 controls (ESC starts terminal escape sequences), DEL, the Unicode bidi marks and
# overrides, the zero-width and invisible characters (a failing twin of a passing node's name
# must not look the same), the line and paragraph separators, and lone surrogates (JSON can
# hold them; printing or encoding one as UTF-8 raises).
_INVISIBLE = ("\u00ad\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e"
              "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\ud800-\udfff")
_CONTROL = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_INVISIBLE}]")
# The same and newline and tab: for one line, where a name's newline would fake another line.
_LINE_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f{_INVISIBLE}]")
_REPR = reprlib.Repr()
_REPR.maxstring = 80
_REPR.maxother = 80
_REPR.maxlong = 40


def escape_controls(text: object) -> str:
    """``text`` with control characters (but newline and tab) shown as ``\\x1b``-style escapes.

    Node names, config keys and file contents come from other machines; printed raw, an
    escape sequence could rewrite the terminal (hide a failure line, fake a PASSED).
    """
    return _CONTROL.sub(_escape, str(text))


def escape_line(text: object) -> str:
    """``escape_controls`` that also escapes newline and tab: ``text`` stays one line."""
    return _LINE_CONTROL.sub(_escape, str(text))


def _escape(m: re.Match[str]) -> str:
    return m.group().encode("unicode_escape").decode("ascii")


def printable(text: object, max_chars: int | None = None) -> str:
    """``escape_controls(text)`` cut to ``max_chars`` (default: the ``message_chars`` limit)."""
    out = escape_controls(text)
    cap = limit("message_chars") if max_chars is None else max_chars
    return out if len(out) <= cap else out[: max(cap - 3, 0)] + "..."


def brief(value: object) -> str:
    """A short repr of ``value`` built without ever forming the full repr of a huge object."""
    return printable(_REPR.repr(value), 200)


# lines that say what a failure is about but not what missed it
_NO_HEADLINE = re.compile(r"(:|\.py:\d+: \w*(Error|Exception))$|^\[gw\d+\] \S+ -- Python ")


def headline(text: str) -> str:
    """The line of a failure message to show alone (a summary row, a record's reason): the
    first naming an amount and what allowed it ("relative error 0.02 (up to 0.0001
    allowed)"), else the exception's own line (pytest's ``E   `` lines), else the first line
    that is not a heading ("... misses its @accuracy criteria:"), a worker's banner or a
    traceback's ``file.py:26: AssertionError``."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    told = [line[1:].strip() for line in lines if line.startswith("E ")]
    plain = [line for line in lines if not _NO_HEADLINE.search(line)]
    for pool in (told, plain):
        hit = next((line for line in pool if "allowed" in line or "(up to " in line
                    or "required)" in line), None)
        if hit is not None:
            return hit
    return next(iter(told), None) or next(iter(plain), None) or (lines[0] if lines else "")
