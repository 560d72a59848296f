"""Non-finite, negative or empty option values are usage errors at start-up, before anything runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from task_files import ROOT

@pytest.mark.parametrize(("args", "message"), [
    (["--agentperturb-backoff", "inf"], "*--agentperturb-backoff: backoff must be a finite number, got 'inf'*"),
    (["--agentperturb-episode-timeout", "nan"], "*episode timeout must be a finite number, got 'nan'*"),
    (["--agentperturb-request-timeout=-inf"], "*request timeout must be a finite number*"),
    (["--agentperturb-seed", "-1"], "*--agentperturb-seed: seed must be at least 0, got '-1'*"),
    (["--agentperturb-model", ""], "*--agentperturb-model: an empty value; expected MODEL*"),
    (["--agentperturb-model", "reference/literal", "--agentperturb-model", " "], "*--agentperturb-model: an empty*"),
    (["--agentperturb-families", ""], "*--agentperturb-families: an empty value; expected LIST*"),
    (["--agentperturb-families", " , "], "*--agentperturb-families: ',' names no family*"),
    (["--agentperturb-run-id", ""], "*--agentperturb-run-id: an empty value*"),
    (["--agentperturb-max-drop", ""], "*--agentperturb-max-drop: an empty value*"),
])
def test_odd_option_values_are_usage_errors(pytester: pytest.Pytester, suite: Path, args: list[str],
                                            message: str) -> None:
    result = pytester.runpytest("--agentperturb", "suites/workflows", "-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-2000:]
    result.stderr.fnmatch_lines([message])
    assert not (pytester.path / "reports").exists()  # nothing ran


def test_resolver_rejects_non_finite_numbers_for_every_caller() -> None:
    from pytest_agentperturb.model.errors import OptionError
    from pytest_agentperturb.model.options import resolve

    def lookup(value: dict[str, Any]) -> Any:
        return lambda o: (value.get(o.dest), o.flag if o.dest in value else "default")

    assert resolve(lookup({}), ROOT).llm.backoff == 30.0
    for dest, raw in [("backoff", "inf"), ("backoff", "1e999"), ("episode_timeout", "nan"), ("concurrency", "nan")]:
        with pytest.raises(OptionError, match=dest.replace("_", " ")):
            resolve(lookup({dest: raw}), ROOT)
