"""Per-API precheck: replay dumped API calls against float64 numpy references.

Import from the modules (``precheck.runner``, ``precheck.report``, ``precheck.results``): the
package itself loads nothing, so the compare's replays (which use ``precheck.args`` and the
references) do not pay for the runner and the report (~20-35 ms per process).
"""
