"""Bad input gives one-line errors that name the field and what to do."""

from __future__ import annotations

import pytest

from teamplay.agents.roles import Role, Team
from teamplay.envs.protocols import get_protocol
from teamplay.envs.team_env import TeamEnv
from teamplay.errors import ConfigError
from tests.envs.fakes import ITEMS, FakeTask

VALID_YAML = """\
name: solver_checker
roles:
  solver: {prompt: Solve.}
  checker: {prompt: Check.}
schedule:
  - {role: solver, instruction: Solve.}
  - {role: checker, instruction: Check.}
  - {role: solver, instruction: Revise.}
final: {rule: last}
"""


def _raises(match, fn, *args, **kwargs) -> str:
    with pytest.raises(ConfigError, match=match) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message, message
    return message


def test_unknown_protocol_lists_the_known_ones():
    message = _raises("unknown protocol 'tournament'", get_protocol, "tournament")
    for name in ("debate", "proposer_reviewer", "sequential", "single", "vote"):
        assert name in message


def test_missing_protocol_file():
    _raises("protocol file not found: nowhere/p.yaml", get_protocol, "nowhere/p.yaml")


def test_yaml_role_not_defined(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(VALID_YAML.replace("role: solver, instruction: Revise.",
                                       "role: critic, instruction: Revise."))
    message = _raises(r"protocol\.schedule\[2\]\.role", get_protocol, str(path))
    assert message == (f"{path}: protocol.schedule[2].role: role 'critic' is not defined in roles "
                       f"(defined: solver, checker)")


@pytest.mark.parametrize("edit,match", [
    (("instruction: Revise.}", "instruction: Revise., sees: everyone}"),
     r"protocol\.schedule\[2\]\.sees: Input should be 'all', 'previous_round', 'latest' or 'none'"),
    (("final: {rule: last}", "final: {rule: best}"), r"protocol\.final\.rule"),
    (("final: {rule: last}", "final: {rule: last, roles: [judge]}"),
     r"protocol\.final\.roles\[0\]: role 'judge' is not defined"),
    (("{role: solver, instruction: Revise.}", "{role: solver, instructions: Revise.}"),
     r"protocol\.schedule\[2\]\.(instruction: Field required|instructions: unknown field)"),
    (("  solver: {prompt: Solve.}", "  solver: {prompt: Solve., count: 0}"),
     r"protocol\.roles\.solver\.count: Input should be greater than or equal to 1"),
    (("  checker: {prompt: Check.}", "  Checker: {prompt: Check.}"), r"protocol\.roles\.Checker: role names"),
    (("final: {rule: last}\n", ""), r"protocol\.final: Field required"),
])
def test_yaml_field_errors(tmp_path, edit, match):
    path = tmp_path / "p.yaml"
    assert edit[0] in VALID_YAML
    path.write_text(VALID_YAML.replace(*edit))
    _raises(match, get_protocol, str(path))


def test_malformed_yaml_names_file_and_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: broken\nroles:\n  solver: {prompt: Solve.\nschedule: []\n")
    message = _raises(r"broken\.yaml:4:\d+: malformed YAML", get_protocol, str(path))
    assert str(path) in message


def test_yaml_top_level_must_be_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- solver\n- checker\n")
    _raises("expected a mapping", get_protocol, str(path))


def test_python_protocol_file_errors(tmp_path):
    two = tmp_path / "two.py"
    two.write_text("from teamplay.envs.protocols.catalog.single import Single\n"
                   "class A(Single):\n    name = 'a'\nclass B(Single):\n    name = 'b'\n")
    _raises(r"exactly one concrete Protocol subclass, found 2 \(A, B\)", get_protocol, str(two))
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\ndef broken(:\n")
    _raises(r"bad\.py:2: invalid Python", get_protocol, str(bad))


@pytest.mark.parametrize("name,options,match", [
    ("proposer_reviewer", {"rounds": 0}, r"option 'rounds': Input should be greater than or equal to 1"),
    ("debate", {"rounds": "many"}, r"option 'rounds'"),
    ("debate", {"n_agents": 1}, r"option 'n_agents'"),
    ("vote", {"rounds": 3}, r"unknown option 'rounds' \(known options: reply_prefix, n_agents, instruction, rule\)"),
    ("single", {"n_agents": 2}, r"unknown option 'n_agents' \(known options: none\)"),
])
def test_bad_option_values(name, options, match):
    _raises(match, get_protocol, name, **options)


@pytest.mark.parametrize("name,roles,match", [
    ("single", [Role(name="solver", count=3)], r"team\.roles\['solver'\]\.count: .* exactly 1 .* got 3"),
    ("proposer_reviewer", [Role(name="proposer")], r"needs role\(s\) reviewer"),
    ("vote", [Role(name="solver"), Role(name="critic")], r"role 'critic' is not used by protocol 'vote'"),
    ("debate", [Role(name="debater", count=1)], r"team\.roles\['debater'\]\.count: .* at least 2"),
])
def test_team_validation(name, roles, match):
    _raises(match, TeamEnv, FakeTask(), name, team=Team(roles=tuple(roles)))


def test_option_and_team_disagree():
    team = Team(roles=(Role(name="solver", count=3),))
    _raises(r"n_agents=5 but team role 'solver' has count 3", TeamEnv, FakeTask(), "vote", team=team,
            protocol_options={"n_agents": 5})


def test_valid_yaml_loads_and_a_custom_count_is_accepted(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(VALID_YAML)
    team = Team(roles=(Role(name="solver", count=2), Role(name="checker")))
    env = TeamEnv(FakeTask(), str(path), team=team)
    assert env.possible_agents == ["solver_0", "solver_1", "checker_0"]


def test_env_argument_errors():
    _raises(r"no problem to play", TeamEnv(FakeTask(), "single").reset)
    _raises(r"items: empty", TeamEnv, FakeTask(), "single", items=[])
    _raises(r"items\[1\]: expected a TaskItem, got dict", TeamEnv, FakeTask(), "single",
            items=[ITEMS[0], {"id": "x"}])
    _raises(r"options\['item'\]: expected a TaskItem", TeamEnv(FakeTask(), "single").reset,
            options={"item": "What is 1+1?"})
    _raises(r"protocol_options only apply", TeamEnv, FakeTask(), get_protocol("vote"),
            protocol_options={"n_agents": 3})
    _raises(r"render_mode: 'rgb_array'", TeamEnv, FakeTask(), "single", render_mode="rgb_array")
    _raises(r"expected a Task", TeamEnv, "gsm8k", "single")


def test_unknown_reset_option_warns():
    env = TeamEnv(FakeTask(), "single", items=ITEMS)
    with pytest.warns(UserWarning, match=r"ignoring unknown options \['itme'\]"):
        env.reset(options={"itme": ITEMS[0]})
