"""Credit cards (`teamplay credit --card`): every registered method has one, every test a card names
exists, and the command prints a card or refuses an unknown name with one `error:` line."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from teamplay.cli import app
from teamplay.credit import credit_methods
from teamplay.credit.audit.cards import CreditCard, card_for, card_names, render_cards
from teamplay.credit.token import token_methods
from teamplay.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def built_in(entries: dict) -> list[str]:
    """Names registered by teamplay itself (other tests register users' methods in this process)."""
    return [name for name, m in entries.items() if m.fn.__module__.startswith("teamplay.")]


BUILT_IN = built_in(credit_methods()) + built_in(token_methods())


def test_the_card_list_covers_both_registries():
    assert {"grpo", "shapley", "continuation", "cosac", "cal_grpo"} <= set(BUILT_IN)
    assert {"dgpo", "ep_grpo", "s_trace", "gear", "aem", "vpr"} <= set(BUILT_IN)
    assert set(BUILT_IN) <= set(card_names())


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_built_in_method_has_a_declared_card(name):
    card = card_for(name)
    assert card.declared and card.name == name
    assert card.estimand and card.assumptions and card.cost and card.falsified_by
    assert card.level == ("message" if name in credit_methods() else "token")
    text = card.render()
    assert text.startswith(name) and "estimand" in text and "falsified by" in text
    assert all(len(line) <= 100 or "::" in line for line in text.splitlines())  # test paths are not cut


def test_a_message_card_reuses_the_registry_cost():
    for name in built_in(credit_methods()):
        assert card_for(name).cost.startswith(credit_methods()[name].cost)
    assert card_for("cal_grpo").protocols == ("debate", "proposer_reviewer")
    assert card_for("grpo").protocols is None


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_named_test_exists(name):
    for ref in card_for(name).falsified_by:
        path, sep, function = ref.partition("::")
        assert sep and function.isidentifier(), ref
        file = ROOT / path
        assert file.is_file(), f"{name}: {path} does not exist"
        assert re.search(rf"^\s*def {function}\(", file.read_text(encoding="utf-8"), re.M), \
            f"{name}: {path} has no def {function}"


def test_cards_name_their_estimand_in_the_words_of_the_spec():
    assert "broadcast" in card_for("grpo").estimand
    assert "masking" in card_for("shapley").estimand and "replay" in card_for("shapley").estimand
    assert "restorable state" in " ".join(card_for("shapley").assumptions)
    assert "later turns" in " ".join(card_for("shapley").assumptions)
    assert "E[R | h_{t+1}] - E[R | h_t]" in card_for("continuation").estimand
    assert "ridge" in card_for("cosac").estimand


def test_an_unknown_name_is_a_config_error_naming_the_known_ones():
    with pytest.raises(ConfigError, match="unknown credit method 'nope'.*grpo.*vpr"):
        card_for("nope")


USER_CREDIT = textwrap.dedent('''
    import numpy as np
    from pydantic import BaseModel

    from teamplay.credit import register_credit


    class Options(BaseModel):
        pass


    @register_credit("user_card_demo", Options, "the team reward on every message", cost="none at all")
    def demo(batch, options):
        return [np.full(len(ep.messages), ep.reward) for ep in batch.episodes]
''')


@pytest.fixture(scope="module")
def user_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("user") / "my_credit.py"
    path.write_text(USER_CREDIT)
    return f"{path}:demo"


def test_a_method_without_a_card_says_no_estimand_was_declared(user_file):
    card = card_for(user_file)
    assert isinstance(card, CreditCard) and not card.declared
    assert card.name == "my_credit.py:demo" and card.summary == "the team reward on every message"
    assert card.cost == "none at all" and card.falsified_by == ()
    assert "not declared" in card.estimand
    by_name = card_for("user_card_demo")  # registered in this process by importing the file
    assert not by_name.declared and "no test named" in by_name.render()


def output_lines(result) -> list[str]:
    return [line for line in result.output.splitlines() if line.strip()]


def test_cli_prints_a_card():
    result = runner.invoke(app, ["credit", "--card", "shapley"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == card_for("shapley").render()
    assert "tests/training/test_replay_credit.py::test_masking_cannot_see_the_review_but_replay_can" in result.output


def test_cli_prints_every_card_with_all():
    result = runner.invoke(app, ["credit", "--card", "all"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == render_cards("all")
    headers = [line.split()[0] for line in result.output.splitlines() if line and not line.startswith(" ")]
    assert set(BUILT_IN) <= set(headers)


def test_cli_card_of_a_user_file(user_file):
    result = runner.invoke(app, ["credit", "--card", user_file])
    assert result.exit_code == 0, result.output
    assert "not declared" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("args, message", [
    (["--card", "nope"], "unknown credit method 'nope'"),
    (["--card", "grpo", "--method", "grpo"], "takes no FOLDER or --method"),
    ([], "give FOLDER and --method"),
])
def test_cli_refuses_with_one_error_line_and_status_2(args, message):
    result = runner.invoke(app, ["credit", *args])
    assert result.exit_code == 2, result.output
    (line,) = output_lines(result)
    assert line.startswith("error:") and message in line


def test_cards_say_what_is_wrong_today_and_where_it_was_measured_to_fail():
    assert "unbiased for A* up to a term of the history alone" in card_for("grpo").fails_where[0]
    assert "helpful reviewer" in card_for("shapley").fails_where[0]
    assert "not unbiased" in card_for("continuation").fails_where[0]
    assert "fails where" in card_for("grpo").render() and "fails where" not in card_for("gspo").render()
