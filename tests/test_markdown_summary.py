"""The Markdown summary for a CI page, the CI recipes in docs/ci, and the README a newcomer reads
(issue 26, items 6 and 7)."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from pytest_accuracy.report.markdown import markdown_summary, md_text
from tests.helpers import ROOT, dump, rerun

CI = ROOT / "docs" / "ci"


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def dumps(npu: str = "pt_bug", bench: str = "pt_fp32", config: str = "L1_tensor") -> list[str]:
    return [f"--acc-npu={dump(npu, config)}", f"--acc-bench={dump(bench, config)}"]


def test_the_option_writes_verdict_first_divergence_and_failures(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    out = pytester.path / "summary.md"
    result = run(pytester, *dumps(), f"--acc-markdown={out}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    text = out.read_text()
    assert text.startswith("## ❌ pytest-accuracy: FAIL\n")
    assert "Checked: 1 failed, 48 passed, 197 xfailed" in text
    assert "### First divergence" in text
    assert r"**Tensor.\_\_add\_\_.5.forward** (step 0, rank 0), output.0: relative error" in text
    assert "Likely cause: non-tensor argument differs (input.1: 1e-05 vs bench 1e-06)" in text
    assert ("| accuracy::compare::0/0/Tensor.\\_\\_add\\_\\_.5.forward | output.0: relative "
            "error 0.0184 (up to 0.0001 allowed)") in text


def test_github_step_summary_is_appended_to(pytester: pytest.Pytester,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    page = pytester.path / "step_summary.md"
    page.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(page))
    config = "L1_tensor"
    result = run(pytester, f"--acc-npu={dump('pt_fp32', config)}",
                 f"--acc-bench={rerun(dump('pt_fp32', config), pytester.path)}")
    assert result.ret == pytest.ExitCode.OK
    text = page.read_text()
    assert text.startswith("earlier step\n## ✅ pytest-accuracy: PASS\n")
    assert "First divergence" not in text and "Failures" not in text


def test_a_config_run_lists_its_failed_keys(pytester: pytest.Pytester,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    configs = ROOT / "example_data" / "configs"
    out = pytester.path / "s.md"
    run(pytester, f"--acc-npu-config={configs / 'mindformers_llama2_7b_misaligned.yaml'}",
        f"--acc-bench-config={configs / 'megatron_llama2_7b.sh'}", f"--acc-markdown={out}")
    text = out.read_text()
    assert "pytest-accuracy: FAIL" in text and "| accuracy::config::" in text


def test_input_text_cannot_break_out_of_markdown() -> None:
    hostile = "x`y|z<script>alert(1)</script>*b*_u_[l](http://e)\n# h\x1b[2K"
    text = md_text(hostile)
    assert "<" not in text and ">" not in text and "\n" not in text and "\x1b" not in text
    assert re.search(r"(?<!\\)[`|*_\[\]]", text) is None  # every one escaped
    doc = {"verdict": "fail", "compare": {"first_divergence": {
        "npu_name": hostile, "step": 0, "rank": 0, "tensor": "output.0", "reason": hostile,
        "likely_cause": hostile, "stack": hostile}}}
    block = markdown_summary(doc, [(hostile, hostile)], {"failed": 1})
    assert "<script>" not in block
    table_rows = [line for line in block.splitlines() if line.startswith("| ")]
    # the header and one row, each with exactly three unescaped pipes
    assert all(len(re.findall(r"(?<!\\)\|", row)) == 3 for row in table_rows)


def test_many_failures_are_cut_to_the_top_ten() -> None:
    block = markdown_summary({"verdict": "fail"}, [(f"t{i}", "m") for i in range(25)],
                             {"failed": 25})
    assert "### Failures (25)" in block and "| t9 | m |" in block and "| t10 |" not in block
    assert "and 15 more" in block


# -- the CI recipes -----------------------------------------------------------------------------

def _readme_commands() -> set[str]:
    """Lines inside the README's code blocks."""
    inside, out = False, set()
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith("```"):
            inside = not inside
        elif inside and line.strip():
            out.add(line.strip())
    return out


def _github_commands(doc: dict) -> list[str]:  # type: ignore[type-arg]
    return [step["run"] for job in doc["jobs"].values() for step in job["steps"] if "run" in step]


def test_the_ci_recipes_parse_and_run_the_readme_commands() -> None:
    github = yaml.safe_load((CI / "github-actions.yml").read_text())
    gitlab = yaml.safe_load((CI / "gitlab-ci.yml").read_text())
    assert "jobs" in github and github.get("on", github.get(True))  # YAML 1.1 reads on: as True
    commands = _github_commands(github) + gitlab["accuracy"]["script"]
    assert len(commands) == 4
    readme = _readme_commands()
    for command in commands:
        assert command in readme, command
        assert shlex.split(command)  # a command a shell can split
    gate = next(c for c in commands if c.startswith("pytest "))
    assert "--acc-markdown=acc_summary.md" in gate and "--junitxml=acc-junit.xml" in gate
    assert gitlab["accuracy"]["artifacts"]["reports"]["junit"] == "acc-junit.xml"


def test_the_ci_gate_command_runs(pytester: pytest.Pytester,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The recipes' pytest line, with the bundled dumps as NPU_DUMP and BENCH_DUMP."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    gate = next(c for c in _github_commands(yaml.safe_load(
        (CI / "github-actions.yml").read_text())) if c.startswith("pytest "))
    env = {"NPU_DUMP": str(dump("pt_bug", "L1_tensor")),
           "BENCH_DUMP": str(dump("pt_fp32", "L1_tensor"))}
    args = [re.sub(r"\$(\w+)", lambda m: env[m.group(1)], a) for a in shlex.split(gate)[1:]]
    result = run(pytester, *args)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    for name in ("acc.json", "acc_report/index.html", "acc_summary.md", "acc-junit.xml"):
        assert (pytester.path / name).is_file(), name


# -- the README a newcomer reads --------------------------------------------------------------

def test_the_readme_keeps_its_two_commands_and_ci_runs_the_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## The two commands", 1)[1]
    assert ("(cd example_data && pytest --acc-npu=dumps/pt_bug/L1_tensor "
            "--acc-bench=dumps/pt_fp32/L1_tensor --acc-json=acc.json --acc-report=acc_report)"
            in section)
    assert "pip install -e '.[dev]' 'torch==2.13.0' && python -m pytest -n 2 -q\n" in section
    assert "python -m pytest -n 2 -q" in (ROOT / ".ci" / "run").read_text()
    # the first screen: install, the commands, reading the output, suites, CI
    heads = re.findall(r"^## (.+)$", readme, re.M)
    assert heads[:5] == ["The two commands", "Reading the output",
                         "Your own suites: fixtures and the marker", "Gate a merge in CI",
                         "Reference"]
    assert len(readme.splitlines()) < 250


def test_every_docs_link_resolves_and_every_page_is_linked() -> None:
    readme = (ROOT / "README.md").read_text()
    linked = set(re.findall(r"\]\((docs/[^)#]+)\)", readme))
    for target in linked:
        assert (ROOT / target).exists(), target
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert pages <= linked
    for page in (ROOT / "docs").glob("*.md"):
        for target in re.findall(r"\]\(([^)#:]+)\)", page.read_text()):
            assert (page.parent / target).exists(), (page.name, target)


def test_the_readme_makes_no_claim_the_repository_contradicts() -> None:
    text = "\n".join(p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
    assert "DESIGN.md" not in text and not (ROOT / "DESIGN.md").exists()
    assert "summary's first sentence" not in text
    assert "--index-url https://download.pytorch.org/whl/cpu" in text
