"""Protocol traits: declared by protocols (Python, YAML), asked for by credit methods, never a name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from teamplay.credit import check_credit, credit_methods
from teamplay.credit.registry import CREDIT, register_credit
from teamplay.envs.protocols import get_protocol, protocol_names
from teamplay.envs.protocols.registry import PROTOCOLS, protocols_with, traits_of
from teamplay.envs.protocols.traits import TRAITS, check_traits
from teamplay.errors import ConfigError, TeamplayWarning

CHAIN_YAML = """\
name: solver_checker
roles: {solver: {prompt: Solve.}, checker: {prompt: Check.}}
schedule:
  - {role: solver, instruction: Solve.}
  - {role: checker, instruction: Check., sees: all}
final: {rule: last, roles: [solver]}
"""


def test_every_registered_protocol_declares_known_traits():
    for name in protocol_names():
        assert traits_of(name) <= set(TRAITS), name
        assert traits_of(name) == traits_of(get_protocol(name)), name


def test_every_trait_a_built_in_method_needs_is_declared_by_some_protocol():
    for name, method in credit_methods().items():
        fitting = method.fitting_protocols()
        assert fitting is None or fitting, name


def test_the_methods_that_asked_for_names_fit_the_same_protocols_as_before():
    before = {"cal_grpo": ("debate", "proposer_reviewer"), "shape_max": ("debate", "sequential", "single", "vote"),
              "oracle": ("relay", "review", "sequential", "split", "vote")}
    for name, protocols in before.items():
        assert credit_methods()[name].fitting_protocols() == protocols, name
    # a chain of turns and RIGHT/WRONG reviews: review has both, as proposer_reviewer does
    assert credit_methods()["cosac"].fitting_protocols() == ("proposer_reviewer", "review", "sequential")
    assert credit_methods()["tracer_roles"].fitting_protocols() == ("proposer_reviewer", "review")


def test_oracle_asks_for_the_trait_of_its_form():
    check_credit("oracle", {"form": "majority"}, "vote", None)
    with pytest.raises(ConfigError, match=r"^credit.method: 'oracle' with these options needs a protocol where "
                                          r".*\(trait 'informants'\); protocol 'vote' does not declare it "
                                          r"\(protocols that do: relay\)$"):
        check_credit("oracle", {"form": "relay"}, "vote", None)


def test_a_yaml_protocol_declares_traits_and_gets_the_methods_that_need_them(tmp_path):
    plain = tmp_path / "plain.yaml"
    plain.write_text(CHAIN_YAML)
    with pytest.raises(ConfigError, match="protocol 'solver_checker' does not declare it"):
        check_credit("cosac", {}, get_protocol(str(plain)), None)
    chained = tmp_path / "chained.yaml"
    chained.write_text(CHAIN_YAML + "traits: [chain]\n")
    protocol = get_protocol(str(chained))
    assert protocol.traits == frozenset({"chain"})
    assert check_credit("cosac", {}, protocol, None) is not None


def test_an_unknown_yaml_trait_is_one_line_with_the_closest_name(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text(CHAIN_YAML + "traits: [chian]\n")
    with pytest.raises(ConfigError, match=r"typo.yaml: protocol.traits: unknown trait 'chian' \(did you mean "
                                          r"'chain'\?\) \(known: adopting_review, chain, "):
        get_protocol(str(path))


def test_a_python_protocol_declares_traits_and_a_typo_is_refused(tmp_path):
    body = ("from teamplay.envs.protocols.catalog.single import Single\n\n\n"
            "class Mine(Single):\n    name = 'mine'\n    traits = frozenset({{{}}})\n")
    good = tmp_path / "good.py"
    good.write_text(body.format("'every_agent_answers', 'revises'"))
    assert check_credit("cal_grpo", {}, get_protocol(str(good)), None) is not None
    bad = tmp_path / "bad.py"
    bad.write_text(body.format("'revise'"))
    with pytest.raises(ConfigError, match=r"bad.py: Mine.traits: unknown trait 'revise' \(did you mean 'revises'\?\)"):
        get_protocol(str(bad))


def test_check_traits_refuses_a_string_for_a_list():
    with pytest.raises(ConfigError, match="traits must be a list of names, got the string 'chain'"):
        check_traits("chain", "protocol 'x'")


def test_an_unregistered_name_declares_no_traits():
    assert traits_of("no_such_protocol") == frozenset()
    assert protocols_with(["chain"]) == ["proposer_reviewer", "review", "sequential"]
    assert "paths" in PROTOCOLS.names() and traits_of("paths") == frozenset()


class _NoOptions(BaseModel):
    pass


def test_a_method_registered_with_protocol_names_still_works_with_one_warning(monkeypatch):
    monkeypatch.setattr(CREDIT, "_entries", dict(CREDIT._entries))
    with pytest.warns(TeamplayWarning, match=r"register_credit\('by_name', protocols=...\) is now traits="):
        register_credit("by_name", _NoOptions, "old style", protocols=("debate",))(lambda batch, options: [])
    assert check_credit("by_name", {}, "debate", None) is not None
    with pytest.raises(ConfigError, match="'by_name' works with the protocols debate, not 'vote'"):
        check_credit("by_name", {}, "vote", None)
    with pytest.raises(ConfigError, match="unknown trait 'chian'"):
        register_credit("by_trait", _NoOptions, "typo", traits=("chian",))


def test_the_how_to_lists_every_trait_with_the_protocols_that_declare_it():
    page = (Path(__file__).resolve().parents[2] / "docs" / "how-to" / "protocol.md").read_text(encoding="utf-8")
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)` \| [^|]+ \| ([^|]+) \|", page, re.MULTILINE)}
    assert sorted(rows) == sorted(TRAITS)
    for trait, listed in rows.items():
        assert sorted(p.strip() for p in listed.split(",")) == protocols_with([trait]), trait


def test_teamplay_list_shows_each_protocols_traits():
    from typer.testing import CliRunner

    from teamplay.cli import app

    result = CliRunner().invoke(app, ["list"], env={"COLUMNS": "240"})
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if "proposer_reviewer" in line and "chain" in line)
    assert "revises" in row and "verdicts" in row
