"""A served team scored by lm-evaluation-harness itself: ``lm_eval --model local-chat-completions``
pointed at ``teamplay serve``, on an lm-eval task that reads a local GSM8K file (no hub).

``write_task(data_file, out_dir)`` writes ``out_dir/teamplay_gsm8k.yaml``, an lm-eval 0.4.13 task
for a file with GSM8K's ``question`` and ``answer`` fields (``.jsonl``, ``.json``, ``.csv`` or
``.parquet``, as ``teamplay.envs.tasks.catalog.gsm8k`` reads them). lm-eval's task files cannot read an
environment variable, so the file's absolute path is written into the YAML; the YAML imports
nothing from teamplay, so lm-eval may run in another environment. From a shell::

    python -m teamplay.serving.files.lm_eval_task path/to/gsm8k/test.jsonl lm_eval_tasks/
    lm_eval --model local-chat-completions --tasks teamplay_gsm8k --include_path lm_eval_tasks \\
        --apply_chat_template --model_args model=NAME,base_url=http://127.0.0.1:8000/v1/chat/completions,...

How the task fits the server (``teamplay.serving.episodes.engine``, ``teamplay.serving.api.render``):

* the question: ``doc_to_text`` is the ``question`` field itself, the prompt teamplay's GSM8K task
  gives the team (``TaskItem.prompt``). With ``--apply_chat_template`` it is the one user message,
  so the server finds the item (and its reference) by it, when it serves the same file. The team's
  system prompts and answer instruction are its protocol's, as in ``teamplay eval``.
* the answer: the reply is the team's final answer as ``The answer is \\boxed{X}.``; the ``boxed``
  filter takes X (``[invalid]``, never a match, when there is no box: the team gave no answer).
* the score: ``exact_match`` with the options of lm-eval's own ``gsm8k`` task: ``,``, ``$``, a
  worked solution up to its ``#### `` and a final ``.`` removed from both sides, case ignored (what
  ``teamplay.envs.tasks.answers.lm_eval_compat.gsm8k_exact_match`` re-implements). X is teamplay's
  canonical number (``1000``, ``-3``), so the mean equals ``teamplay eval``'s team accuracy on the
  same problems whenever the references are integers, as every GSM8K row's is; a reference written
  ``#### 2.50`` would not match X = ``2.5`` (lm-eval compares strings).
* decoding: greedy (lm-eval sends a temperature with every request, and the server uses it); no
  stop strings (the team ends its own turns, and lm-eval's default stop, a blank line, would only cut
  the reply); ``max_gen_toks`` far above any message length, because a request's ``max_tokens``
  only ever lowers the served config's ``sampling.max_new_tokens``, which then decides.

This is the served team's accuracy measured by lm-eval's code, not a number to set beside published
``gsm8k`` strict-match or flexible-extract results: those read a model's raw text, and the server
returns the answer teamplay extracted (docs/how-to/evaluate.md, "Which number to compare with which").
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from teamplay.errors import DataError

TASK_NAME = "teamplay_gsm8k"
#: the ``datasets`` builder that reads each kind of local file
BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
#: the reply ``The answer is \boxed{X}.`` -> X (the one box: greedy up to its last brace)
BOXED = r"\\boxed\{(.*)\}"
#: lm-eval's gsm8k ``exact_match`` options (tasks/gsm8k/gsm8k.yaml in 0.4.13), applied in this order
GSM8K_IGNORE = [",", r"\$", r"(?s).*#### ", r"\.$"]
#: far above any per-message budget: the served config's ``max_new_tokens`` decides
MAX_GEN_TOKS = 1_000_000

_HEADER = """\
# lm-evaluation-harness 0.4.13 task: a team behind `teamplay serve` on a local GSM8K file.
# Written by `python -m teamplay.serving.files.lm_eval_task DATA_FILE OUT_DIR`; rerun it (or edit
# data_files) for another file. Serve the same file so the server knows each reference:
#   teamplay serve ... --set task.name=gsm8k --set task.source=DATA_FILE
#   lm_eval --model local-chat-completions --tasks {name} --include_path OUT_DIR --apply_chat_template \\
#     --model_args model=NAME,base_url=http://127.0.0.1:8000/v1/chat/completions,num_concurrent=8,max_retries=1,tokenized_requests=False
# exact_match,boxed is the served team's accuracy (see teamplay/serving/files/lm_eval_task.py).
"""


def task_config(data_file: Path, name: str = TASK_NAME) -> dict[str, Any]:
    """The lm-eval task (a YAML mapping) reading ``data_file``, absolute, as its test split; see
    the module doc for each choice. ``DataError`` when the file is absent or of another kind."""
    path = Path(data_file).expanduser().resolve()
    builder = BUILDERS.get(path.suffix.lower())
    if builder is None:
        raise DataError(f"{data_file}: lm-eval reads {', '.join(BUILDERS)} files; convert it to one of them")
    if not path.is_file():
        raise DataError(f"{data_file}: no such file")
    return {
        "task": name,
        "dataset_path": builder,
        "dataset_kwargs": {"data_files": {"test": str(path)}},
        "test_split": "test",
        "output_type": "generate_until",
        "doc_to_text": "question",
        "doc_to_target": "answer",
        "generation_kwargs": {"until": [], "do_sample": False, "temperature": 0.0, "max_gen_toks": MAX_GEN_TOKS},
        "filter_list": [{"name": "boxed", "filter": [
            {"function": "regex", "regex_pattern": BOXED, "group_select": -1},
            {"function": "take_first"}]}],
        "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True,
                         "ignore_case": True, "ignore_punctuation": False, "regexes_to_ignore": GSM8K_IGNORE}],
        "metadata": {"version": 1.0, "source": "teamplay"},
    }


def write_task(data_file: Path, out_dir: Path, name: str = TASK_NAME) -> Path:
    """Write ``out_dir/<name>.yaml`` (``task_config``), creating ``out_dir``; returns its path. Give
    ``out_dir`` to lm-eval as ``--include_path`` and ``name`` as ``--tasks``."""
    text = _HEADER.format(name=name) + yaml.safe_dump(task_config(data_file, name), sort_keys=False, width=1000)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m teamplay.serving.files.lm_eval_task",
                                     description="Write the lm-eval task that scores a served team on a local "
                                                 "GSM8K file.")
    parser.add_argument("data_file", type=Path, help="GSM8K file with question and answer fields")
    parser.add_argument("out_dir", type=Path, help="folder for the task YAML (lm_eval --include_path)")
    parser.add_argument("--name", default=TASK_NAME, help="task name (lm_eval --tasks)")
    args = parser.parse_args(argv)
    try:
        print(write_task(args.data_file, args.out_dir, args.name))
    except DataError as exc:
        parser.exit(2, f"error: {exc}\n")


if __name__ == "__main__":
    main()
