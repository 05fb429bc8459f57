"""The model card (``README.md``) of an exported team: Hugging Face Hub metadata and what the run did.

The YAML header carries what the Hub indexes (``base_model``, ``library_name: peft``, ``license``,
``tags``); the body shows the team, the held-out evaluations the run logged up to the exported
checkpoint, the credit method, the training config, and how to use the adapters with teamplay,
PEFT and vLLM.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from teamplay.agents.backends.vllm import _lora_rank
from teamplay.agents.models import SMOLLM2_ALIAS
from teamplay.report.data import HeldoutPoint, load_run
from teamplay.serving.files.team_file import TeamFile, spec_file

#: hub id of the model behind teamplay's embedded alias (the alias is a quantised copy of it)
SMOLLM2_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
#: license of the card when none is given: the base model's where teamplay knows it, else "other"
KNOWN_LICENSES = {SMOLLM2_HUB_ID: "apache-2.0"}
BASE_TAGS = ("teamplay", "multi-agent", "lora", "peft")


def hub_id(model: str) -> str:
    """The Hub id of a base model spec (the embedded alias becomes the model it was made from).

    >>> hub_id("smollm2-135m"), hub_id("Qwen/Qwen2.5-0.5B-Instruct")
    ('HuggingFaceTB/SmolLM2-135M-Instruct', 'Qwen/Qwen2.5-0.5B-Instruct')
    """
    return SMOLLM2_HUB_ID if model == SMOLLM2_ALIAS else model


def default_license(team: TeamFile) -> str:
    return KNOWN_LICENSES.get(hub_id(team.base_model), "other")


def model_card(team: TeamFile, config: dict, run_dir: Path | None, step: int | None, license: str) -> str:
    """The whole ``README.md``: metadata header, then the sections of the body.

    ``config`` is the run's training config (a dumped ``TrainConfig``, or ``FederatedConfig``);
    ``run_dir`` the run folder whose ``metrics.jsonl`` holds the held-out evaluations (None: a
    checkpoint outside a run); ``step`` the exported checkpoint's step, a federated run's round
    (evaluations after it are not this team's).
    """
    header = yaml.safe_dump(card_metadata(team, license), sort_keys=False)
    body = [_intro(team, config), _team_section(team), _results_section(team, run_dir, step),
            _training_section(config, step), _usage_section(team)]
    return f"---\n{header}---\n\n" + "\n\n".join(body) + "\n"


def card_metadata(team: TeamFile, license: str) -> dict:
    bases = list(dict.fromkeys(hub_id(entry.base_model) for entry in team.adapters.values()))
    tags = [*BASE_TAGS, *(name for name in (team.protocol.name, team.task.name) if "/" not in name)]
    return {"base_model": bases[0] if len(bases) == 1 else bases, "library_name": "peft",
            "license": license, "tags": list(dict.fromkeys(tags)), "pipeline_tag": "text-generation"}


def _intro(team: TeamFile, config: dict) -> str:
    agents = sum(role.count for role in team.team.roles)
    roles = ", ".join(role.name for role in team.team.roles)
    return (f"# A teamplay team: {team.protocol.name} on {team.task.name}\n\n"
            f"{agents} agents ({roles}) solve {team.task.name} problems together under the "
            f"`{team.protocol.name}` protocol. Each model-played role writes with its own LoRA adapter "
            f"on the shared base model `{team.base_model}`; the adapters were trained with teamplay, "
            f"credit method `{config['credit']['method']}`.")


def _team_section(team: TeamFile) -> str:
    rows = ["| role | agents | plays with | trained |", "|---|---|---|---|"]
    for role in team.team.roles:
        plays = f"`{role.policy}`" if role.scripted else f"`{team.adapters[role.adapter_name].path}`"
        trained = "no" if role.scripted else ("yes" if team.adapters[role.adapter_name].trainable else "no (frozen)")
        rows.append(f"| {role.name} | {role.count} | {plays} | {trained} |")
    lines = ["## Team", "", *rows, "",
             f"Protocol `{team.protocol.name}` with options `{_inline(team.protocol.options)}`. Every role's "
             f"full system prompt is in `team.yaml` (`team.roles[].prompt`); the task's answer format is "
             f"appended to it: \"{team.task.answer_format}\"",
             "", f"Decoding: `{_inline(team.decoding.model_dump(mode='json'))}`."]
    if team.controllers is not None:
        lines += ["", f"Learned speak/skip controllers decide the skippable turns (mode "
                      f"`{team.controllers.mode}`; their regret tables, one per agent and stage, are in `team.yaml`)."]
    if any(name.startswith("bundled/") and spec_file(name).endswith(".py")
           for name in (team.protocol.name, team.task.name)):
        lines += ["", "The team's protocol or task is a Python file in `bundled/`: loading the team runs it."]
    return "\n".join(lines)


def _results_section(team: TeamFile, run_dir: Path | None, step: int | None) -> str:
    task = team.task
    selection = f"the first {task.limit}" if task.limit else "all"
    lines = ["## Held-out results", ""]
    points = _heldout_points(run_dir, step)
    if not points:
        return "\n".join(lines + ["The run logged no held-out evaluation (it had no `eval_task`)."])
    lines += [f"`{task.name}` split `{task.split}` ({selection} problems), greedy decoding, as the run logged "
              f"them in `metrics.jsonl`:", "",
              "| evaluation | step | team accuracy | any agent right | tokens / problem | model calls / problem |",
              "|---|---|---|---|---|---|"]
    for point in points:
        m = point.metrics
        label = "after training" if point.final else ("before training" if point.step == 0 else "during training")
        lines.append(f"| {label} | {point.step} | {m.team_accuracy:.3f} | {m.any_agent_right:.3f} | "
                     f"{m.tokens_per_problem:.1f} | {m.calls_per_problem:.2f} |")
    return "\n".join(lines)


def _heldout_points(run_dir: Path | None, step: int | None) -> Sequence[HeldoutPoint]:
    """The run's held-out evaluations of the exported adapters and of those before them."""
    if run_dir is None or not (run_dir / "metrics.jsonl").is_file():
        return ()
    return [p for p in load_run(run_dir).heldout if step is None or p.step <= step]


def _training_section(config: dict, step: int | None) -> str:
    from teamplay.credit import credit_methods

    credit = config["credit"]
    method = credit_methods().get(credit["method"])
    summary = f": {method.summary}" if method is not None else ""
    token = credit.get("token")
    shown = "?" if step is None else step
    federated = config.get("federated")  # a federated run's checkpoints are numbered by round
    of = f"round {shown} of {federated['rounds']}" if federated else f"step {shown} of {config['steps']}"
    lines = ["## Training", "",
             f"Credit method `{credit['method']}`{summary} (options `{_inline(credit.get('options') or {})}`"
             + (f"; token credit `{token['method']}`" if token else "") + ").",
             f"Objective `{config['objective']['name']}`; the exported adapters are those of {of}.", "",
             "Training config (`teamplay train --config`):", "", "```yaml",
             yaml.safe_dump(config, sort_keys=False).rstrip(), "```"]
    return "\n".join(lines)


def _usage_section(team: TeamFile) -> str:
    base = hub_id(team.base_model)
    names = list(team.adapters)
    first, rest = names[0], names[1:]
    peft_lines = [f'model = PeftModel.from_pretrained(base, "adapters/{first}", adapter_name="{first}")',
                  *(f'model.load_adapter("adapters/{name}", adapter_name="{name}")' for name in rest)]
    vllm_lines = [f'{name} = LoRARequest("{name}", {i}, "adapters/{name}")' for i, name in enumerate(names, start=1)]
    caveat = ([] if team.base_model != SMOLLM2_ALIAS else [
        "", f"The adapters were trained on teamplay's embedded copy of `{base}` (its 4-bit GGUF file, "
            f"dequantized): on the original weights they behave close to, not exactly as, in teamplay."])
    return "\n".join([
        "## Use", "", "With teamplay (the whole team: protocol, prompts, controllers, decoding):", "", "```bash",
        "teamplay eval --team . --limit 50", "teamplay play --team . --index 0", "```", "",
        "One role's adapter with PEFT:", "", "```python",
        "from peft import PeftModel", "from transformers import AutoModelForCausalLM", "",
        f'base = AutoModelForCausalLM.from_pretrained("{base}")', *peft_lines, "```", "",
        "With vLLM (each request names the role's adapter):", "", "```python",
        "from vllm import LLM", "from vllm.lora.request import LoRARequest", "",
        f'llm = LLM(model="{base}", enable_lora=True, max_loras={len(names)}, max_lora_rank={_lora_rank(team.lora.r)})',
        *vllm_lines, "```", *caveat])


def _inline(value) -> str:
    """A small mapping as one line of YAML flow style (``{rounds: 3}``)."""
    return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
