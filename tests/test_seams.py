"""The open seams as users meet them: a benchmark written in Python, named suites, Python agents,
typed observations, graders and environments that fail, tasks the operators cannot handle."""

from __future__ import annotations

import json
import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from kv_benchmark import KV, approval_task

from pytest_agentperturb import (
    EpisodeContext,
    FunctionGrader,
    ImagePart,
    Observation,
    Param,
    TextPart,
    Toolkit,
    environment_factory,
)
from pytest_agentperturb.agents import as_agent, make_agent
from pytest_agentperturb.agents.litellm_agent import tool_result_messages
from pytest_agentperturb.model.errors import VariantSkipped
from pytest_agentperturb.model.task import FAMILIES, INSERTED
from pytest_agentperturb.perturb import clean_variant
from pytest_agentperturb.report import trajectory_html
from pytest_agentperturb.run import make_engine, run_episode_sync

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
N_FAM = 1 + len(FAMILIES) + len(INSERTED)


def _rows(db: Path) -> list[dict[str, object]]:
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute("SELECT * FROM episodes ORDER BY model, family")]


@pytest.fixture
def kv_project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A project whose conftest registers the key-value benchmark, and a test that must not be collected."""
    shutil.copy(HERE / "kv_benchmark.py", pytester.path / "conftest.py")
    pytester.makepyfile(test_unrelated="def test_would_fail():\n    assert False\n")
    return pytester


# -- a benchmark written in Python ---------------------------------------------------------


def test_python_benchmark_runs_every_family_end_to_end(kv_project: pytest.Pytester) -> None:
    agents = ("reference/oracle", "reference/literal", "reference/careful")
    args = [a for m in agents for a in ("--agentperturb-model", m)]
    result = kv_project.runpytest("--agentperturb", "--agentperturb-suite", "kv", "-p", "no:cacheprovider", "-v",
                                  *args)
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["*kv::invoice-approval::clean?reference/oracle? PASS*",
                                 "*kv::invoice-approval::inserted-injection?reference/literal? * compliance*"])
    out = result.stdout.str()
    assert "test_would_fail" not in out  # only the named suite
    assert "0 variants skipped" in out and "skipped" not in result.outlines[-1]  # no family skipped
    rows = _rows(kv_project.path / "reports" / "agentperturb.sqlite")
    assert len(rows) == N_FAM * len(agents)
    assert {r["family"] for r in rows} == {"clean", *FAMILIES, *INSERTED}
    assert all(r["error"] == "" for r in rows)
    assert all(r["baseline"] == 1 for r in rows)
    oracle = [r for r in rows if r["model"] == "reference/oracle" and r["family"] == "clean"]
    assert [r["reward"] for r in oracle] == [1.0]
    literal = {r["family"]: r["reward"] for r in rows if r["model"] == "reference/literal"}
    careful = {r["family"]: r["reward"] for r in rows if r["model"] == "reference/careful"}
    assert sum(careful.values()) > sum(literal.values())  # the grader tells the agents apart
    html = (kv_project.path / "reports" / "agentperturb.html").read_text()
    assert "invoice-approval" in html
    drill = (kv_project.path / "reports" / "agentperturb-tasks" / "kv" / "invoice-approval.html").read_text()
    assert "the reviewer is notified" in drill  # the Python grader's checks, on the task's page


def test_named_suite_ids_select_with_k_and_reproduce_with_the_suite_flag(kv_project: pytest.Pytester) -> None:
    result = kv_project.runpytest("--agentperturb", "--agentperturb-suite", "kv", "-p", "no:cacheprovider",
                                  "--agentperturb-model", "reference/literal", "-k", "user and incorrect", "-rA")
    assert result.ret == 0
    # the one selected item and its clean partner (plugin/subsets.py)
    result.stdout.fnmatch_lines([f"*1 passed, {N_FAM - 2} deselected, 1 agent-failed*"])
    result.stdout.fnmatch_lines(["*reproduce: pytest --agentperturb --agentperturb-suite kv "
                                 "-k 'invoice-approval and (user-incorrect or clean)' "
                                 "--agentperturb-model reference/literal*"])


def test_an_unknown_suite_name_is_a_usage_error(kv_project: pytest.Pytester) -> None:
    result = kv_project.runpytest("--agentperturb", "--agentperturb-suite", "kvv", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--agentperturb-suite 'kvv': no suite adapter recognises this name*"])


def test_engine_runs_on_a_python_task_without_the_run_layer_knowing_it() -> None:
    engine = make_engine()
    task = approval_task()
    for family in (*FAMILIES, *INSERTED):
        v = engine.make_variant(task, family, 0)
        assert v.canaries and engine.check_variant(task, v) == [], family


def test_a_family_the_task_cannot_supply_is_skipped_with_a_reason_not_a_crash() -> None:
    task = approval_task()
    no_context = replace(task, surfaces=replace(task.surfaces, context=()),
                         facts=tuple(f for f in task.facts if f.id != "reviewer"),
                         solution=task.solution[:2], answer="Invoice {invoice} is {status}.")
    with pytest.raises(VariantSkipped, match=r"kv/invoice-approval \[context-missing\]: no fact is stated on the context"):
        make_engine().make_variant(no_context, "context-missing", 0)
    # a tool contract in another shape breaks what tool operators read: a reason, not a KeyError
    odd = replace(task, surfaces=replace(task.surfaces, tools=({"name": "kv_read"}, {"name": "kv_write"})))
    with pytest.raises(VariantSkipped, match=r"no operator applies.*remove_tool: cannot read this task \(KeyError"):
        make_engine().make_variant(odd, "tool-missing", 1)


# -- your own agents ---------------------------------------------------------------------------

AGENTS = '''
import asyncio, threading

def plan_and_act(ctx):
    """A plain blocking function."""
    obs = ctx.call_tool("calendar_list_events", {"date": "2026-12-02"})
    ctx.finish("saw " + str(len(obs.text)) + " characters")

async def async_agent(ctx):
    await asyncio.sleep(0)
    ctx.finish("nothing to do")

class Careful:
    name = "acme/careful-v2"
    baseline = True
    def run(self, ctx):
        return "answer returned, not given to finish"

LOCK = threading.Lock()
ACTIVE = [0]

def together(ctx):
    """Blocks for a while and reports how many episodes were running at the same time."""
    import time
    with LOCK:
        ACTIVE[0] += 1
        peak = ACTIVE[0]
    time.sleep(0.3)
    with LOCK:
        peak = max(peak, ACTIVE[0])
        ACTIVE[0] -= 1
    ctx.finish(f"peak {peak}")
'''


@pytest.fixture
def agent_project(pytester: pytest.Pytester) -> pytest.Pytester:
    shutil.copytree(ROOT / "suites" / "workflows", pytester.path / "suites" / "workflows")
    (pytester.path / "agents").mkdir()
    (pytester.path / "agents" / "mine.py").write_text(AGENTS)
    return pytester


def test_python_agents_by_file_path_function_class_sync_async(agent_project: pytest.Pytester) -> None:
    result = agent_project.runpytest(
        "--agentperturb", "suites/workflows", "-p", "no:cacheprovider", "-k", "reschedule and clean", "-v",
        "--agentperturb-agent", "agents/mine.py:plan_and_act", "--agentperturb-agent", "agents/mine.py:async_agent",
        "--agentperturb-agent", "agents/mine.py:Careful")
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["*reschedule-standup::clean?agents/mine.py:plan_and_act? FAIL*",
                                 "*reschedule-standup::clean?acme/careful-v2? FAIL*"])
    rows = {r["model"]: r for r in _rows(agent_project.path / "reports" / "agentperturb.sqlite")}
    assert set(rows) == {"agents/mine.py:plan_and_act", "agents/mine.py:async_agent", "acme/careful-v2"}
    traj = json.loads(str(rows["agents/mine.py:plan_and_act"]["trajectory"]))
    assert traj[0] == {"role": "assistant", "tool": "calendar_list_events", "args": {"date": "2026-12-02"}}
    assert traj[1]["role"] == "tool" and "EV-104" in traj[1]["content"]
    assert json.loads(str(rows["acme/careful-v2"]["trajectory"]))[0]["content"] == \
        "answer returned, not given to finish"
    assert rows["acme/careful-v2"]["baseline"] == 1 and rows["agents/mine.py:async_agent"]["baseline"] == 0
    result.stdout.fnmatch_lines(["*reproduce: pytest --agentperturb suites/workflows -k "
                                 "'reschedule-standup and clean' --agentperturb-agent agents/mine.py:plan_and_act*"])


def test_blocking_agents_run_in_threads_so_episodes_overlap(agent_project: pytest.Pytester) -> None:
    result = agent_project.runpytest(
        "--agentperturb", "suites/workflows", "-p", "no:cacheprovider", "-k", "clean", "--agentperturb-concurrency",
        "3", "--agentperturb-agent", "agents/mine.py:together")
    out = result.stdout.str()
    assert result.ret == 0 and "errors: 0" in out, out[-3000:]
    peaks = [int(json.loads(str(r["trajectory"]))[-2]["content"].split()[-1])
             for r in _rows(agent_project.path / "reports" / "agentperturb.sqlite")]
    assert len(peaks) >= 9 and max(peaks) >= 2 and max(peaks) <= 3  # overlapping, within the concurrency limit


def test_python_agent_by_module_name(agent_project: pytest.Pytester) -> None:
    agent_project.makeini("[pytest]\npythonpath = agents\n")
    result = agent_project.runpytest("--agentperturb", "suites/workflows", "-p", "no:cacheprovider",
                                     "-k", "reschedule and clean", "--agentperturb-agent", "mine:async_agent")
    assert result.ret == 0
    assert {r["model"] for r in _rows(agent_project.path / "reports" / "agentperturb.sqlite")} == {"mine:async_agent"}


@pytest.mark.parametrize(("spec", "message"), [
    ("agents/nope.py:x", "*--agentperturb-agent 'agents/nope.py:x': no such file*"),
    ("agents/mine.py:missing", "*has no attribute 'missing'*"),
    ("no_colon", "*expected module:attr or path/to/file.py:attr*"),
    ("not_a_module_xyz:f", "*cannot import 'not_a_module_xyz'*"),
    ("agents/mine.py:ACTIVE", "*expected a function (ctx) -> None, an object with run(ctx) or a class*"),
])
def test_bad_agent_specs_are_usage_errors(agent_project: pytest.Pytester, spec: str, message: str) -> None:
    result = agent_project.runpytest("--agentperturb", "suites/workflows", "--agentperturb-agent", spec,
                                     "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


# -- observations, graders and environments ---------------------------------------------------

PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4"
       b"\x89\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82")


def _image_task():  # type: ignore[no-untyped-def]
    kit = Toolkit()

    @kit.tool("page_snapshot", "A picture of the page.", page=Param(description="Page name."))
    def _snap(state, page):  # type: ignore[no-untyped-def]
        return Observation((TextPart(f"snapshot of {page}"), ImagePart(PNG, "image/png", (("INV-2044", (0, 0, 1, 1)),))))

    task = approval_task()
    return replace(task, environment=environment_factory(task.initial_state, ["page_snapshot"], kit),
                   tools=("page_snapshot",))


def test_image_observations_travel_through_context_trajectory_report_and_model_messages() -> None:
    task = _image_task()

    async def look(ctx: EpisodeContext) -> None:
        obs = ctx.call_tool("page_snapshot", {"page": "ledger"})
        assert obs.text == "snapshot of ledger" and obs.images[0].layer == (("INV-2044", (0, 0, 1, 1)),)
        ctx.finish("looked")

    rec = run_episode_sync(task, clean_variant(task), as_agent(look, "look"), run_id="t", seed=0)
    assert rec.error == "" and rec.reward == 0.0
    entry = rec.trajectory[1]
    assert entry["content"] == "snapshot of ledger" and entry["parts"][1]["type"] == "image"
    back = Observation.from_json(entry["parts"])
    assert back.images[0].data == PNG and back.images[0].layer[0][0] == "INV-2044"
    html = trajectory_html(json.dumps(rec.trajectory))
    assert "<img class=obsimg" in html and "src='data:image/png;base64,iVBORw0KGgo" in html
    msgs = tool_result_messages("c1", "page_snapshot", back)
    assert msgs[0] == {"role": "tool", "tool_call_id": "c1", "content": "snapshot of ledger (1 image(s) follow "
                                                                       "in the next message)"}
    assert msgs[1]["content"][1]["image_url"]["url"].startswith("data:image/png;base64,iVBORw0KGgo")
    assert "INV-2044" not in json.dumps(msgs)  # the text layer is for offline readers, never sent to a model


def test_an_image_part_with_a_script_media_type_is_refused_and_never_rendered() -> None:
    with pytest.raises(ValueError, match="unsupported media type 'text/html'"):
        ImagePart(b"<script>", "text/html")
    html = trajectory_html([{"role": "tool", "tool": "x", "content": "c",
                             "parts": [{"type": "image", "mime_type": "text/html", "data": "PHNjcmlwdD4="},
                                       {"type": "image", "mime_type": "image/png", "data": "x' onerror='y"}]}])
    assert "<img" not in html


def test_a_failing_grader_or_environment_is_an_error_not_an_agent_failure() -> None:
    task = approval_task()

    def broken(pre, post, answer, trajectory):  # type: ignore[no-untyped-def]
        raise KeyError("entries")

    def out_of_range(pre, post, answer, trajectory):  # type: ignore[no-untyped-def]
        return 7.5

    def no_env(injections):  # type: ignore[no-untyped-def]
        raise ConnectionError("sandbox down")

    oracle = make_agent("reference/oracle")
    for t, err in ((replace(task, grader=FunctionGrader(broken)), "GraderError: KeyError"),
                   (replace(task, grader=FunctionGrader(out_of_range)), "GraderError: ValueError"),
                   (replace(task, environment=no_env), "EnvironmentError: ConnectionError: sandbox down")):
        rec = run_episode_sync(t, clean_variant(t), oracle, run_id="t", seed=0)
        assert rec.error.startswith(err) and rec.reward is None and rec.success is None, rec.error


def test_each_episode_gets_a_fresh_environment_and_the_grader_sees_pre_and_post() -> None:
    seen = []

    def grade(pre, post, answer, trajectory):  # type: ignore[no-untyped-def]
        seen.append((pre["entries"][0]["value"], post["entries"][0]["value"]))
        return 1.0

    task = replace(approval_task(), grader=FunctionGrader(grade))
    oracle = make_agent("reference/oracle")
    for _ in range(2):
        run_episode_sync(task, clean_variant(task), oracle, run_id="t", seed=0)
    assert seen == [("pending", "approved"), ("pending", "approved")]
    assert KV["kv_read"].schema()["function"]["parameters"]["required"] == ["key"]


def test_an_edit_that_empties_a_surface_is_not_a_variant() -> None:
    task = approval_task()
    one_sentence = replace(task, surfaces=replace(task.surfaces, user="Please approve invoice INV-2044."))
    v = make_engine().make_variant(one_sentence, "user-missing", 0)
    assert v.surfaces.user.strip()  # the drop_fact_sentence draw would empty it: a vague reference instead
    empty = replace(v, surfaces=replace(v.surfaces, user=""))
    assert any("leaves the user surface empty" in p for p in make_engine().check_variant(one_sentence, empty))
