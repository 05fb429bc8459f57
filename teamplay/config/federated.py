"""The ``federated`` section: sites, shards, rounds, and how the server screens and combines the
sites' updates."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from teamplay.config.base import Section
from teamplay.config.env import TaskConfig


class FedGrpoConfig(Section):
    """Fed-GRPO's three mechanisms, each switchable for ablation (teamplay.federated.aggregation)."""

    signal_weighting: bool = Field(True, description="Aggregation weight of a site proportional to its "
                                                     "within-group reward std this round (else data size).")
    weight_floor: float = Field(0.05, gt=0.0, description="Floor on a site's signal, so a site without "
                                                          "signal this round keeps a small weight.")
    calibration: bool = Field(True, description="Scale each problem's advantages by the gap between the "
                                                "global mean reward of its type and its group's mean.")
    calibration_strength: float = Field(1.0, ge=0.0, description="Slope of that scale per unit of reward gap.")
    calibration_clip: tuple[float, float] = Field((0.5, 2.0), description="Bounds [lo, hi] of that scale.")
    sparse: bool = Field(True, description="Upload the top-k entries of the update (with error feedback).")
    budget: float = Field(1.0, gt=0.0, le=1.0, description="B: global upload budget as a fraction of dense "
                                                           "entries, split across sites by signal (1 = dense).")


class RobustConfig(Section):
    """How the server refuses outlying site updates and combines the rest (teamplay.federated.screen,
    teamplay.federated.aggregation.AGGREGATORS)."""

    aggregator: Literal["mean", "median", "trimmed_mean", "clipped_mean"] = Field(
        "mean", description="mean: the strategy's weighted mean; median / trimmed_mean: coordinate-wise, "
                            "sites weighted equally (Flower's FedMedian / FedTrimmedAvg rules); clipped_mean: "
                            "each update clipped to clip_factor x the round's median norm, then the weighted mean.")
    trim_fraction: float = Field(0.2, ge=0.0, lt=0.5, description="trimmed_mean: share of sites cut from each "
                                                                  "tail per entry (floor(fraction x sites)).")
    clip_factor: float = Field(1.0, gt=0.0, description="clipped_mean: norm bound as a multiple of the round's "
                                                        "median update norm.")
    max_norm_ratio: float | None = Field(10.0, gt=1.0, description="Refuse an update whose norm exceeds this "
                                                                   "multiple of the round's median norm (3+ "
                                                                   "updates); null: no such check.")


class FailureDrill(Section):
    """Make one site fail in one round (to rehearse fault handling; off unless listed)."""

    site: int = Field(..., ge=0, description="Site index (0-based).")
    round: int = Field(..., ge=1, description="Round in which it fails.")
    kind: Literal["raise", "nan"] = Field("raise", description="raise: the site raises; nan: its upload "
                                                               "carries NaN (the server must refuse it).")


class FederatedSection(Section):
    """Sites, shards, rounds and the aggregation strategy of a federated run."""

    clients: int = Field(3, ge=1, description="K: number of sites (each a Flower SuperNode).")
    rounds: int = Field(2, ge=1, description="Federated rounds.")
    local_steps: int = Field(1, ge=1, description="S: ordinary training steps per site per round.")
    partition: Literal["iid", "by_key"] = Field("iid", description="iid, or by_key: non-IID shards sorted "
                                                                   "by a metadata key (label skew).")
    partition_key: str | None = Field("level", description="Metadata key of by_key shards and of problem "
                                                           "types for calibration (None = one type).")
    extra_tasks: list[TaskConfig] = Field(default_factory=list, description="More items of the same task "
                                                                            "joined to `task` before sharding, "
                                                                            "e.g. other arith levels.")
    strategy: Literal["fedavg", "fedgrpo"] = Field("fedgrpo", description="fedavg (data-size weights, dense) "
                                                                          "or fedgrpo.")
    fedgrpo: FedGrpoConfig = Field(default_factory=FedGrpoConfig, description="Fed-GRPO mechanisms.")
    robust: RobustConfig = Field(default_factory=RobustConfig, description="Outlier checks and robust "
                                                                          "aggregation.")
    min_sites: int = Field(1, ge=1, description="A round with fewer valid site results (after failures, "
                                                "timeouts and refused results) stops the run with an error.")
    round_timeout: float = Field(3600.0, gt=0.0, description="Seconds the server waits for a round's "
                                                             "replies; late sites are left out of it.")
    client_cpus: float = Field(1.0, gt=0.0, description="Simulation: CPUs per site (Ray actor).")
    failure_drills: list[FailureDrill] = Field(default_factory=list, description="Sites made to raise in a "
                                                                                 "round (fault rehearsal).")
