"""Console script ``pytest-accuracy-merge``: merge sharded --acc-json parts without pytest."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.limits import LimitError, check_limits, limit, over
from pytest_accuracy.options import parse_int_set
from pytest_accuracy.report.document import write_html, write_json
from pytest_accuracy.report.merge import merge_files, summary_lines
from pytest_accuracy.safe_io import ensure_dir
from pytest_accuracy.text import escape_line


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0 when the merged verdict passes, 1 when it fails, 2 on unusable parts."""
    parser = argparse.ArgumentParser(
        prog="pytest-accuracy-merge",
        description="Merge the --acc-json documents of runs sharded with --acc-ranks / "
                    "--acc-steps-select into one verdict, first divergence and per-rank table.")
    parser.add_argument("parts", nargs="+", type=Path, help="the parts' JSON documents")
    parser.add_argument("-o", "--output", type=Path, help="write the merged JSON document here")
    parser.add_argument("--report", type=Path, help="write the merged HTML page to this folder")
    parser.add_argument("--steps", type=_int_set, help="the steps the parts must cover "
                        "together, e.g. '0-1' (default: every step some part holds)")
    parser.add_argument("--ranks", type=_int_set, help="the ranks the parts must cover "
                        "together, e.g. '0-127' (default: every rank some part holds)")
    args = parser.parse_args(argv)
    try:
        check_limits()
    except LimitError as exc:
        print(f"pytest-accuracy-merge: {escape_line(exc)}", file=sys.stderr)
        return 2
    try:
        doc = merge_files(args.parts, steps=args.steps, ranks=args.ranks)
        for line in summary_lines(doc):
            print(line)
        if args.output:
            write_json(doc, args.output)
        if args.report:
            write_html(doc, ensure_dir(args.report), [])
    except AccuracyInputError as exc:  # an unusable part, or an output that can't be written
        print(f"pytest-accuracy-merge: {escape_line(exc)}", file=sys.stderr)
        return 2
    return 0 if doc["verdict"] == "pass" else 1


def _int_set(text: str) -> set[int]:
    try:
        count = sum(int(hi or lo) - int(lo) + 1 for lo, _, hi in
                    (part.strip().partition("-") for part in text.split(",")))
        if count > limit("merge_shards"):
            raise argparse.ArgumentTypeError(f"{text!r} names {over('merge_shards', count)}")
        return parse_int_set(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected e.g. '0,2-4', got {text!r}") from None


if __name__ == "__main__":
    sys.exit(main())
