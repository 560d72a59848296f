"""Every command in README.md's code blocks runs as written.

The rule: in a ``` block without a language (or ``sh``/``bash``/``console``),
a line starting with ``pytest ``, ``python -m pytest `` or ``agentperturb ``
(indented or not) is a command (a trailing ``\\`` joins the next line; ``#
...`` comments are the shell's). ``agentperturb gate: ...`` lines are output,
not commands; an output line of that kind right after a command must appear in
the command's output as written, so a figure the README shows cannot go stale.

Each command runs in a copy of the repository's suites (and
``tests/kv_benchmark.py``) in a temporary folder, in README order, through the
shell, with this interpreter's ``pytest``/``agentperturb`` first on PATH. Two
changes, both listed here: a ``pytest`` run of the workflows suite (or of
``suites/``) that selects nothing with ``-k`` gets ``-k forward-invoice``
added, to keep the whole file near two minutes on one core, except the two
runs whose gate line the README shows; the review command's optional
``[--review-size 40]`` is left out. An ``agentperturb`` command runs with
``PYTHONWARNINGS=error::RuntimeWarning``, so a numpy warning fails it.
Commands that need a network, a model, an extra, a server or a placeholder of
the reader's are skipped with the reason in :data:`SKIP` (and the
agentdojo/tau2 commands where the extra is not installed); every other one
runs and must end with an exit status :data:`RC` allows (0 unless listed).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
_CMD = re.compile(r"(pytest |python -m pytest |agentperturb )")
_OUTPUT = re.compile(r"agentperturb [a-z-]+: ")        # "agentperturb gate: ..." is printed, not typed
_SMALL = "forward-invoice"

# a substring of the command -> why it does not run here
SKIP: dict[str, str] = {
    "acme.agent:plan_and_act": "a placeholder for the reader's own agent module",
    "tests/my_agent.py:MyAgent": "a placeholder for the reader's own agent file",
    "openai/": "needs a model provider (network, API key)",
    "ollama_chat/": "needs a local model server",
    "--agentperturb-model M1": "M1/M2 are placeholders for the reader's models",
    "--tx socket=": "needs running xdist socket servers",
    "--tx ssh=": "needs ssh hosts",
    "--agentperturb-image-backend diffusers": "needs the vision extra and a local inpainting model (a placeholder path)",
    "--api-base http://127.0.0.1:P": "needs a local judge server on port P",
    "agentperturb view": "serves pages until stopped",
}
# a substring of the command -> the exit statuses it may end with (default {0})
RC: dict[str, set[int]] = {
    "--agentperturb-max-regression 5": {1},     # the README shows these gates breached
    "--agentperturb-model reference/careful --agentperturb-max-drop 25": {1},
    "--agentperturb-model reference/noisy --agentperturb-repeats 5 --agentperturb-max-drop": {1},
    "agentperturb verify variants/": {0, 1},    # "exit 1 with one line per breach"
}
# commands whose gate line the README shows run unchanged (no -k added)
FULL = ("--agentperturb-run-id careful", "--agentperturb-run-id literal", "--agentperturb-max-drop 25",
        "--agentperturb-model reference/noisy --agentperturb-repeats 5")


def readme_commands() -> list[tuple[int, str, list[str]]]:
    """(line number, command, the output lines shown right after it) for each README command."""
    lines = README.read_text(encoding="utf-8").splitlines()
    out: list[tuple[int, str, list[str]]] = []
    in_block, lang, i = False, "", 0
    while i < len(lines):
        line = lines[i].lstrip()                        # a block may be indented under a list item
        if line.startswith("```"):
            in_block, lang = not in_block, line[3:].strip()
        elif in_block and lang in ("", "sh", "bash", "console") and _OUTPUT.match(line):
            if out and out[-1][0] >= i - 4:         # shown right after the command
                out[-1][2].append(line)
        elif in_block and lang in ("", "sh", "bash", "console") and _CMD.match(line):
            start, cmd = i + 1, line
            while cmd.rstrip().endswith("\\"):
                i += 1
                cmd = cmd.rstrip()[:-1].rstrip() + " " + lines[i].strip()
            out.append((start, cmd, []))
        i += 1
    return out


def runnable(cmd: str) -> str:
    """The command as this test runs it (see the module docstring for the two changes)."""
    cmd = re.sub(r"\s+#\s.*$", "", cmd).strip()
    cmd = cmd.replace(" [--review-size 40]", "")
    if re.match(r"(python -m )?pytest ", cmd) and re.search(r"\ssuites/(workflows)?(\s|$)|\$\(agentperturb suites\)",
                                                             cmd) \
            and " -k " not in cmd and not any(f in cmd for f in FULL):
        cmd += f" -k {_SMALL}"
    return cmd


def skip_reason(cmd: str) -> str | None:
    why = next((why for key, why in SKIP.items() if key in cmd), None)
    if why is None and "agentdojo" in cmd and importlib.util.find_spec("agentdojo") is None:
        why = "needs the agentdojo extra (not installed here)"
    if why is None and "tau2:" in cmd and importlib.util.find_spec("tau2") is None:
        why = "needs the tau2 extra (not installed here)"
    return why


COMMANDS = readme_commands()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder like the repository root, with the inputs the README's commands assume.

    The store (``reports/agentperturb.sqlite``) comes from the first Running
    command, ``episodes.csv`` from the README's export command, and
    ``capability.csv`` (``model,capability``) names the two reference models
    the store holds.
    """
    ws = tmp_path_factory.mktemp("readme")
    shutil.copytree(ROOT / "suites", ws / "suites")
    (ws / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "kv_benchmark.py", ws / "tests" / "kv_benchmark.py")
    shutil.copy(ROOT / "conftest.py", ws / "conftest.py")
    shutil.copy(ROOT / "pyproject.toml", ws / "pyproject.toml")
    (ws / "capability.csv").write_text("model,capability\nreference/literal,40\nreference/careful,70\n",
                                       encoding="utf-8")
    for cmd in (f"pytest --agentperturb suites/workflows -k {_SMALL}",
                "agentperturb export --store reports/agentperturb.sqlite --format csv --out episodes.csv"):
        res = _shell(cmd, ws)
        assert res.returncode == 0, (cmd, res.stdout[-2000:], res.stderr[-2000:])
    return ws


def _shell(cmd: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    if cmd.startswith("agentperturb "):     # report/analyze once printed numpy's "All-NaN slice encountered"
        env["PYTHONWARNINGS"] = "error::RuntimeWarning"
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_rule_finds_the_readme_commands() -> None:
    cmds = [c for _, c, _ in COMMANDS]
    assert len(cmds) >= 30
    assert any(c.startswith("agentperturb report ") for c in cmds)
    assert not any(_OUTPUT.match(c) for c in cmds)      # printed lines are not commands


@pytest.mark.parametrize(("line", "cmd", "shown"), COMMANDS, ids=[f"README.md:{n}" for n, _, _ in COMMANDS])
def test_readme_command_runs_as_written(workspace: Path, line: int, cmd: str, shown: list[str]) -> None:
    why = skip_reason(cmd)
    if why:
        pytest.skip(f"README.md:{line}: {why}")
    run = runnable(cmd)
    res = _shell(run, workspace)
    ok = next((rcs for key, rcs in RC.items() if key in cmd), {0})
    assert res.returncode in ok, (line, run, res.returncode, res.stdout[-3000:], res.stderr[-3000:])
    for expected in shown:                              # a figure the README prints is the one a run prints
        assert expected in res.stdout + res.stderr, (line, expected, res.stdout[-3000:])
