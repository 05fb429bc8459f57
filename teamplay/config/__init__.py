"""Typed configuration of a teamplay run, loaded from YAML and overridden from the CLI."""

from teamplay.config.runs import (
    MAX_TEMPERATURE, MIN_TEMPERATURE, SINGLE_RUN_ONLY, STAGES, BackendConfig, ControllerConfig, CreditConfig,
    DistributedConfig, DistributedResources, EvalConfig, FailureDrill, FederatedConfig, FederatedSection,
    FedGrpoConfig, LoraConfig, Mode, ModelConfig, ObjectiveConfig, OptimConfig, ProtocolConfig, RobustConfig,
    RolloutConfig, SamplingConfig, Stage, TaskConfig, TeamTrainingConfig, TokenCreditConfig, TrainConfig,
    VLLMEngineConfig, WorkerResources, build_config, format_validation_error, load_config, parse_overrides,
    read_yaml, set_dotted,
)

__all__ = [
    "MAX_TEMPERATURE", "MIN_TEMPERATURE", "SINGLE_RUN_ONLY", "STAGES", "BackendConfig", "ControllerConfig",
    "CreditConfig", "DistributedConfig", "DistributedResources", "EvalConfig", "FailureDrill", "FederatedConfig",
    "FederatedSection", "FedGrpoConfig", "LoraConfig", "Mode", "ModelConfig", "ObjectiveConfig", "OptimConfig",
    "ProtocolConfig", "RobustConfig", "RolloutConfig", "SamplingConfig", "Stage", "TaskConfig",
    "TeamTrainingConfig", "TokenCreditConfig", "TrainConfig", "VLLMEngineConfig", "WorkerResources",
    "build_config", "format_validation_error", "load_config", "parse_overrides", "read_yaml", "set_dotted",
]
