"""Numbers that go bad, through `teamplay train` as a user meets them: a user's credit method that
returns NaN, or finite advantages of absurd size (ones that would overflow the float32 loss), is
refused in one `error:` line naming it, before any checkpoint is written."""

from __future__ import annotations

import json
import textwrap

from tests.reliability.helpers import EVEN_TASK, error_line, invoke
from tests.tiny import tiny_train_config

PLUGIN = EVEN_TASK + textwrap.dedent('''
    """A user's task with reward variance on the tiny model, and a credit method gone bad."""
    import numpy as np
    from pydantic import BaseModel

    from teamplay.credit import register_credit


    class NoOptions(BaseModel):
        pass


    def centred(batch):
        rewards = np.array([ep.reward for ep in batch.episodes])
        return [np.full(len(ep.messages), r) for ep, r in zip(batch.episodes, rewards - rewards.mean())]

''')

#: one credit method per plugin file: a name registers once per process, and each test imports its own file
METHODS = {
    "nan_credit": textwrap.dedent('''
        @register_credit("user_nan", NoOptions, "NaN everywhere")
        def nan_credit(batch, options):
            return [a * np.nan for a in centred(batch)]
    '''),
    "huge_credit": textwrap.dedent('''
        @register_credit("user_huge", NoOptions, "finite in float64, infinite in the float32 loss")
        def huge_credit(batch, options):
            return [np.sign(a) * 1e300 for a in centred(batch)]
    '''),
}


def config(tmp_path, model, method: str, **extra) -> object:
    plugin = tmp_path / "my_plugin.py"
    plugin.write_text(PLUGIN + METHODS[method])
    path = tmp_path / "train.yaml"
    path.write_text(json.dumps(tiny_train_config(
        model, tmp_path / "run", task_name=f"{plugin}:EvenTask", lora_r=2, problems_per_step=2, group_size=8,
        max_new_tokens=2, credit={"method": f"{plugin}:{method}"},
        **{"steps": 4, "checkpoint_every": 1, "keep_checkpoints": 5, **extra})))
    return path


def test_a_plugin_credit_method_returning_nan_is_one_error_line(tmp_path, tiny_model):
    result = invoke("train", "--config", config(tmp_path, tiny_model, "nan_credit"))
    line = error_line(result)  # exit 2, one line, no traceback
    assert line.startswith("error: credit method 'user_nan' (")
    assert "my_plugin.py:nan_credit) returned a non-finite advantage (nan for message 0 of episode" in line
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_plugin_credit_method_returning_absurd_advantages_is_one_error_line(tmp_path, tiny_model):
    result = invoke("train", "--config", config(tmp_path, tiny_model, "huge_credit"))
    line = error_line(result)  # exit 2, one line, no traceback
    assert line.startswith("error: credit method '"), line
    assert "my_plugin.py:huge_credit' returned an advantage of absurd size (-1e+300 for message 0 of episode 0)" in line
    assert not (tmp_path / "run" / "checkpoints").exists()
