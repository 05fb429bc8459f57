"""Typed configuration of a teamplay run, loaded from YAML and overridden from the CLI.

Every field has a description; these models are the single source of the configuration
reference (field names, types, defaults, descriptions, the cross-field rules). ``loader.py``
reads a YAML file and ``--set`` overrides into a model, with one error line per invalid field; it
knows no section. The sections, each a module named after what it configures: ``env.py`` (task,
eval_task, protocol), ``model.py`` (model and LoRA, backend, sampling), ``controllers.py``,
``credit.py``, ``curriculum.py`` (difficulty stages), ``learning.py`` (objective, optim, rollout),
``distributed.py``, ``federated.py``, all on ``base.py``'s ``Section``. ``runs.py`` builds the
configs of whole runs from them (``EvalConfig``, ``TrainConfig``, ``FederatedConfig``) and holds the
rules that read several sections.
"""

from teamplay.config.controllers import STAGES, ControllerConfig, Mode, Stage
from teamplay.config.credit import CreditConfig, TokenCreditConfig
from teamplay.config.curriculum import CurriculumConfig, CurriculumStage
from teamplay.config.distributed import (
    DEFAULT_MAX_RESTARTS,
    DistributedConfig,
    DistributedResources,
    WorkerResources,
)
from teamplay.config.env import ProtocolConfig, TaskConfig
from teamplay.config.federated import FailureDrill, FederatedSection, FedGrpoConfig, RobustConfig
from teamplay.config.learning import ObjectiveConfig, OptimConfig, RolloutConfig
from teamplay.config.loader import (
    build_config,
    format_validation_error,
    load_config,
    parse_overrides,
    read_yaml,
    set_dotted,
)
from teamplay.config.model import (
    MAX_TEMPERATURE,
    MIN_TEMPERATURE,
    BackendConfig,
    LoraConfig,
    ModelConfig,
    SamplingConfig,
    VLLMEngineConfig,
)
from teamplay.config.runs import SINGLE_RUN_ONLY, EvalConfig, FederatedConfig, TeamTrainingConfig, TrainConfig

__all__ = [
    "DEFAULT_MAX_RESTARTS", "MAX_TEMPERATURE", "MIN_TEMPERATURE", "SINGLE_RUN_ONLY", "STAGES", "BackendConfig",
    "ControllerConfig", "CreditConfig", "CurriculumConfig", "CurriculumStage", "DistributedConfig",
    "DistributedResources", "EvalConfig", "FailureDrill",
    "FederatedConfig", "FederatedSection", "FedGrpoConfig", "LoraConfig", "Mode", "ModelConfig", "ObjectiveConfig",
    "OptimConfig", "ProtocolConfig", "RobustConfig", "RolloutConfig", "SamplingConfig", "Stage", "TaskConfig",
    "TeamTrainingConfig", "TokenCreditConfig", "TrainConfig", "VLLMEngineConfig", "WorkerResources", "build_config",
    "format_validation_error", "load_config", "parse_overrides", "read_yaml", "set_dotted",
]
