"""How the driver joins the learner ranks' metrics of one step."""

from teamplay.distributed.learner import mean_over_ranks


def test_floats_are_means_over_the_ranks_that_report_them_maxima_are_maxima_counts_rank_0s():
    ranks = [{"loss": 1.0, "old_logprob_gap_mean": 0.02, "old_logprob_gap_max": 0.3, "optimizer_steps": 2},
             {"loss": 3.0, "old_logprob_gap_mean": 0.04, "old_logprob_gap_max": 0.1, "optimizer_steps": 2},
             {"old_logprob_gap_mean": 0.06, "old_logprob_gap_max": 0.2, "optimizer_steps": 2}]  # no finite loss
    joined = mean_over_ranks(ranks)
    assert joined["loss"] == 2.0
    assert abs(joined["old_logprob_gap_mean"] - 0.04) < 1e-12
    assert joined["old_logprob_gap_max"] == 0.3  # exact: the largest gap of any rank, not a mean of maxima
    assert joined["optimizer_steps"] == 2
