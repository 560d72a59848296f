"""The episode's identity, its schema and its trajectory entries, each defined once (model/keys.py,
model/records.py, model/trajectory.py), and what the store, the results and resume derive from them."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from dataclasses import fields
from pathlib import Path

from pytest_agentperturb.model.keys import KEY_FIELDS, EpisodeKey, VariantKey
from pytest_agentperturb.model.records import (COLUMNS, KINDS, REPORTED, SCHEMA, STORE_COLUMNS, EpisodeRecord,
                                               Outcome)
from pytest_agentperturb.model.trajectory import (ASK_USER, Action, actions, actions_text, blocked_replies,
                                                  final_answer, recovery_turns, tool_call, tool_result, user_reply)
from pytest_agentperturb.plugin.distribute import Finished, episode_row
from pytest_agentperturb.plugin.results import Results, report_row
from pytest_agentperturb.run.store import Store


def _rec(**kw: object) -> EpisodeRecord:
    base: dict[str, object] = dict(run_id="r", model="m", suite="s", task="t", family="tool-missing",
                                   target="tool", type="missing", operator="op", seed=7, reward=0.0, success=False,
                                   repeat=2)
    base.update(kw)
    return EpisodeRecord(**base)  # type: ignore[arg-type]


def test_the_key_is_the_records_fields_in_the_stores_order_and_compares_as_a_tuple() -> None:
    rec = _rec()
    assert KEY_FIELDS == ("run_id", "model", "suite", "task", "family", "seed", "repeat")
    assert isinstance(rec.key, EpisodeKey) and rec.key == ("r", "m", "s", "t", "tool-missing", 7, 2)
    assert rec.key.variant == VariantKey("s", "t", "tool-missing", 7)
    # from any row: a store row (ints), a report row, a row without repeat (repeat 0), text seeds
    assert EpisodeKey.of(rec.to_row()) == rec.key
    assert EpisodeKey.of({**rec.to_row(), "seed": "7", "repeat": None}) == rec.key._replace(repeat=0)
    assert VariantKey.of(rec.to_row()) == rec.key.variant


def test_every_row_shape_derives_from_the_record_schema() -> None:
    assert STORE_COLUMNS == tuple(f.name for f in fields(EpisodeRecord)) == tuple(c.name for c in SCHEMA)
    assert COLUMNS == STORE_COLUMNS[:-2] and STORE_COLUMNS[-2:] == ("baseline", "repeat")
    assert set(KEY_FIELDS) <= set(STORE_COLUMNS) and REPORTED[:len(KEY_FIELDS)] == KEY_FIELDS
    assert sorted(c for names in KINDS.values() for c in names) == sorted(STORE_COLUMNS)
    rec = _rec(trajectory=[final_answer("done")])
    row = report_row(rec, None, reused=False, reproduce="pytest x")
    # a failed episode's row also carries its reproduce line and the grader checks that failed (its line names them)
    assert set(row) == {*REPORTED, "reused", "reproduce", "checks"} and "trajectory" not in row
    passed = report_row(_rec(reward=1.0, success=True), None, reused=False, reproduce="pytest x")
    assert set(passed) == {*REPORTED, "reused"}
    errored = report_row(_rec(success=None, error="RuntimeError: boom"), None, reused=False, reproduce="pytest x")
    assert set(errored) == {*REPORTED, "reused", "error_kind"}
    sent = episode_row(rec, "d" * 8, None)
    assert set(sent) == {*STORE_COLUMNS, "variant_digest", "diff", "canaries"}


def test_the_store_table_has_the_schemas_columns_and_types_and_is_keyed_by_the_episode_key(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with closing(Store(path)) as store:
        store.put(_rec(trajectory=[final_answer("a")]), "digest")
        store.put(_rec(trajectory=[final_answer("b")]), "digest")   # the same key: replaced
        got = store.get(_rec().key, "digest")
        assert got is not None and got.trajectory == [final_answer("b")] and got.outcome is Outcome.FAIL
        assert store.get(_rec().key._replace(repeat=0), "digest") is None
        assert store.get(_rec().key, "other digest") is None
    with closing(sqlite3.connect(path)) as conn:
        info = {r[1]: (r[2], r[5]) for r in conn.execute("PRAGMA table_info(episodes)")}
    assert [c for c in info if c in STORE_COLUMNS] == list(STORE_COLUMNS)
    assert all(info[c.name][0] == c.sql for c in SCHEMA)
    assert [c for c, (_, pk) in sorted(info.items(), key=lambda kv: kv[1][1]) if pk] == list(KEY_FIELDS)


def test_resume_finds_an_episode_by_its_key_on_a_worker_and_the_results_count_it_once(tmp_path: Path) -> None:
    rec = _rec()
    with closing(Store(tmp_path / "s.sqlite")) as store:
        store.put(rec, "digest")
        finished = store.finished("r")
        results = Results()
        results.add(report_row(rec, None, reused=False, reproduce=""), "node")
        assert [r["task"] for r in results.rows(store, "r")] == ["t"]
    worker = Finished(finished)
    found = worker.get(rec.key, "digest")
    assert found is not None and found.key == rec.key
    assert worker.get(rec.key, "another variant") is None
    assert worker.get(rec.key._replace(model="other"), "digest") is None


def test_the_entries_are_the_json_the_store_has_always_kept() -> None:
    entries = [tool_call("send", {"to": "a"}), tool_result("send", "ok"),
               tool_result("img", "x", [{"type": "text", "text": "x"}]),
               tool_call(ASK_USER, {"question": "which?"}), user_reply("b", disclosed=["f1"], blocked=True),
               user_reply("plain"), final_answer("sent")]
    assert json.dumps(entries, sort_keys=True) == json.dumps([
        {"args": {"to": "a"}, "role": "assistant", "tool": "send"},
        {"content": "ok", "role": "tool", "tool": "send"},
        {"content": "x", "parts": [{"text": "x", "type": "text"}], "role": "tool", "tool": "img"},
        {"args": {"question": "which?"}, "role": "assistant", "tool": "ask_user"},
        {"blocked": True, "content": "b", "disclosed": ["f1"], "role": "user"},
        {"content": "plain", "role": "user"},
        {"content": "sent", "final": True, "role": "assistant"}], sort_keys=True)
    assert recovery_turns(entries) == 1 and blocked_replies(entries) == 1


def test_what_the_agent_did_leaves_questions_and_free_text_out() -> None:
    traj = [tool_call("send", {"to": "é"}), tool_call(ASK_USER, {"question": "q"}), tool_call("raw", '{"a": 1'),
            {"role": "assistant", "content": "thinking", "turn": 1}, tool_result("send", "ok"), final_answer("done")]
    assert actions(traj) == [Action("send", {"to": "é"}), Action("raw", '{"a": 1')]
    assert actions_text(traj) == 'send\n{"to": "é"}\nraw\n{"a": 1\ndone'
    assert actions_text([]) == "" and actions([]) == []
