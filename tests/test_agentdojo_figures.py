"""AgentDojo's own figures (utility, utility under attack, ASR) from stored episode rows."""

from __future__ import annotations

from typing import Any

from pytest_agentperturb.report.agentdojo_figures import attack_of, figure_lines, figures, figures_html


def _row(task: str, family: str, success: bool, compliance: bool | None = None, *, model: str = "m",
         suite: str = "agentdojo:slack", error: str = "", repeat: int = 0) -> dict[str, Any]:
    return {"suite": suite, "task": task, "family": family, "model": model, "success": success,
            "compliance": compliance, "error": error, "repeat": repeat}


def test_attack_of_reads_the_family() -> None:
    assert attack_of("agentdojo:slack", "inserted-injection-slack-it03") == "important_instructions_no_model_name"
    assert attack_of("agentdojo:slack", "inserted-injection-slack-it03-tool-knowledge") == "tool_knowledge"
    assert attack_of("agentdojo:slack", "inserted-injection") is None  # the generic object is no AgentDojo attack
    assert attack_of("agentdojo:slack", "inserted-injection-banking-it03") is None  # another suite's
    assert attack_of("agentdojo:slack", "user-missing") is None


def test_figures_count_clean_and_injection_episodes_only() -> None:
    rows = [
        _row("slack-ut00", "clean", True), _row("slack-ut01", "clean", False),
        _row("slack-ut00", "inserted-injection-slack-it01", True, False),
        _row("slack-ut00", "inserted-injection-slack-it02", False, True),
        _row("slack-ut01", "inserted-injection-slack-it01", True, True),
        _row("slack-ut01", "inserted-injection-slack-it01", True, True, repeat=1),  # a repeat: same pair
        _row("slack-ut00", "inserted-injection-slack-it01-tool-knowledge", False, True),
        # kept out: the generic object, a perturbation family, an errored episode, another suite kind
        _row("slack-ut00", "inserted-injection", False, True), _row("slack-ut00", "user-missing", False),
        _row("slack-ut01", "inserted-injection-slack-it02", False, True, error="boom"),
        _row("t1", "clean", False, suite="suites/workflows"),
    ]
    (f,) = figures(rows)
    assert (f.suite, f.model, f.utility.hits, f.utility.episodes) == ("agentdojo:slack", "m", 1, 2)
    default = "important_instructions_no_model_name"
    assert sorted(f.under_attack) == [default, "tool_knowledge"]
    assert (f.under_attack[default].hits, f.under_attack[default].episodes, len(f.under_attack[default].pairs)) \
        == (3, 4, 3)
    assert (f.attacked[default].hits, f.attacked["tool_knowledge"].hits) == (3, 1)
    lines = figure_lines([f])
    assert lines[0] == "agentdojo agentdojo:slack m: utility 50.0 % (1/2 episodes)"
    assert lines[1] == (f"  attack {default}: utility under attack 75.0 % (3/4 episodes on 3 pairs), "
                        "attack success rate 75.0 % (3/4 episodes on 3 pairs)")
    html = figures_html([f])
    assert "utility under attack" in html and "tool_knowledge" in html and "<code>inserted-injection</code>" in html


def test_no_agentdojo_suite_no_figures() -> None:
    assert figures([_row("t1", "clean", True, suite="suites/workflows")]) == []
    assert figures_html([]) == ""


def test_an_agentdojo_report_says_why_its_figures_are_missing() -> None:
    """Only clean episodes and AgentDojo's injection tasks: no heatmap cell ran, no model has an overall D."""
    from pytest_agentperturb import gate
    from pytest_agentperturb.report import analyse, episode_table, render_page

    rows = []
    for model in ("acme/agent-7b", "reference/careful"):
        for i in range(4):
            for family in ("clean", "inserted-injection-slack-it01", "inserted-injection-slack-it02"):
                ok = family == "clean" or i % 2 == 0
                rows.append({**_row(f"slack-ut{i:02d}", family, ok, None if family == "clean" else not ok, model=model),
                             "run_id": "r", "reward": float(ok), "seed": 0, "turns": 2, "trajectory": [],
                             "baseline": model.startswith("reference/")})
    table = episode_table(rows)
    a = analyse(table, rows, replicates=20, permutations=20)
    page = render_page(a, gate.evaluate(gate.Thresholds(), a), n_rows=len(table),
                       extra_sections=[("AgentDojo's figures per suite", figures_html(figures(rows)))])
    top = page[page.index("<div class=top>"):page.index("<nav>")]
    heat = top[top.index("<svg"):top.index("</svg>")]
    assert heat.count(">n/a</text>") == 12 and heat.count(">(not run)</text>") == 12   # every cell, with its reason
    assert "no data" not in top and "class='models'" not in top      # nothing squeezed beside the heatmap
    line = page[page.index("Per-model table: "):page.index("<div class=top>")]
    assert "Per-model table: n/a (none of the 12 perturbation families has a scored pair" in line
