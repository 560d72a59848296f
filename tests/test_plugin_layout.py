"""The plugin package's layout: an entry point that declares, a session registered only when on, small role modules."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PLUGIN = Path(__file__).resolve().parents[1] / "pytest_agentperturb" / "plugin"
ROLES = ("session", "registries", "running", "reporting", "finish")


def test_each_role_module_is_small_and_says_its_job() -> None:
    for name in ROLES:
        path = PLUGIN / f"{name}.py"
        text = path.read_text()
        assert len(text.splitlines()) <= 300, path
        assert ast.get_docstring(ast.parse(text)), path


def test_the_entry_point_imports_the_session_only_inside_its_hooks() -> None:
    tree = ast.parse((PLUGIN / "__init__.py").read_text())
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not [n for n in top if isinstance(n, ast.ImportFrom) and n.level == 1 and n.module not in ("options", None)]
    assert not [n for n in top if isinstance(n, ast.ImportFrom) and n.level == 1 and n.module is None
                and any(a.name != "options" for a in n.names)]


def test_a_plain_pytest_run_registers_no_session(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text("def test_x(request):\n"
                                        "    pm = request.config.pluginmanager\n"
                                        "    assert not pm.has_plugin('agentperturb-session')\n"
                                        "    import sys\n"
                                        "    assert 'pytest_agentperturb.plugin.session' not in sys.modules\n")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                          "test_x.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
