"""Shell variables a launch script assigns itself (`TP=1` ... `--seq-length ${SEQ_LENGTH}`)."""

from __future__ import annotations

import re

# $VAR, ${VAR}, ${VAR:-default} and ${VAR-default}; $(...) and $((...)) are left alone.
_VARIABLE = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}|\$(\w+)")


def expand(text: str, env: dict[str, str]) -> str:
    """`text` with the variables this script assigned so far replaced, as bash would.

    A variable the script never assigned (set by the caller's environment) keeps its `$` form,
    so the checklist names it as a value the reader cannot know instead of guessing.
    """
    if "$" not in text:
        return text

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        if name in env:
            return env[name]
        return match.group(2) if match.group(2) is not None else match.group(0)

    return _VARIABLE.sub(value, text)
