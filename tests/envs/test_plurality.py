"""``majority`` has one meaning, more than half (``vote``'s ``rule: majority``, ``oracle``'s form
``majority``); the most-votes rule is ``plurality``. Its old names still read for one release, each
with one warning line."""

from __future__ import annotations

import warnings

import pytest

from teamplay.envs import voting
from teamplay.envs.protocols import base, get_protocol
from teamplay.errors import TeamplayWarning
from tests.envs.fakes import ITEMS, FakeTask, play

YAML = """\
name: pair_vote
roles: {solver: {prompt: Solve., count: 3}}
schedule: [{role: solver, instruction: Solve., sees: none}]
final: {rule: RULE}
"""


def test_plurality_and_strict_majority_differ_where_the_votes_split():
    answers = ["4", "5", None]
    assert voting.plurality(answers) == "4"  # the most votes, ties to the earliest
    assert voting.strict_majority(answers) is None  # no answer has more than half of 3


def test_the_old_python_names_read_with_one_warning():
    with pytest.warns(DeprecationWarning, match="voting.majority is now plurality"):
        assert voting.majority is voting.plurality
    with pytest.warns(DeprecationWarning, match="majority_of_latest is now plurality_of_latest"):
        assert base.majority_of_latest is base.plurality_of_latest
    with pytest.warns(DeprecationWarning, match="MajorityVote is now PluralityVote"):
        assert base.MajorityVote is base.PluralityVote
    with pytest.raises(AttributeError):
        base.no_such_name  # noqa: B018  (the module's __getattr__ refuses unknown names)


@pytest.mark.filterwarnings("ignore::teamplay.errors.TeamplayWarning")  # the env loads the file again
def test_a_yaml_final_rule_majority_reads_as_plurality_with_one_warning(tmp_path):
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text(YAML.replace("RULE", "majority"))
    new.write_text(YAML.replace("RULE", "plurality"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        protocol = get_protocol(str(old))
    lines = [str(w.message) for w in caught if issubclass(w.category, TeamplayWarning)]
    assert len(lines) == 1 and "protocol.final.rule 'majority' is now 'plurality'" in lines[0]
    assert protocol.spec.final.rule == "plurality"

    def policy(request):  # solver_0 says 1, the others 3 (the reference of item 1)
        return "The answer is 1." if request.agent == "solver_0" else "The answer is 3."

    from teamplay.envs.team_env import TeamEnv

    episodes = [play(TeamEnv(FakeTask(), str(path), items=ITEMS), policy, item=ITEMS[1]) for path in (old, new)]
    assert [ep.final_answer for ep in episodes] == ["3", "3"]
