"""Token-level credit methods: hand-worked formulas, invariants (hypothesis), the dispatcher contract."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teamplay.credit.registry import CreditBatch, CreditResources
from teamplay.credit.token import GroupTokenStats, TokenStats, assign_tokens, token_methods
from teamplay.credit.token.aem import aem_scales
from teamplay.credit.token.base import message_tokens
from teamplay.credit.token.dgpo import DGPOOptions, dgpo_weights
from teamplay.credit.token.ep_grpo import ep_grpo_tokens, progress_tokens
from teamplay.credit.token.gear import gear_weights
from teamplay.credit.token.s_trace import s_trace_weights
from teamplay.credit.token.vpr import claims, evaluate
from teamplay.errors import ConfigError
from teamplay.records import Episode, Message


def episode(lengths, roles=None, reward=1.0, skipped=()):
    roles = roles or ["solver"] * len(lengths)
    msgs = tuple(Message(f"{r}_0", r, t, "solve", "" if t in skipped else "x",
                         completion_ids=() if t in skipped else (1,) * n,
                         logprobs=() if t in skipped else (-1.0,) * n, spoke=t not in skipped)
                 for t, (n, r) in enumerate(zip(lengths, roles, strict=True)))
    return Episode("p/0", "g", tuple(sorted({m.agent for m in msgs})), msgs, "1", reward)


def group_batch(episodes, stats):
    return CreditBatch(tuple(episodes), resources=CreditResources(token_stats=GroupTokenStats(
        tuple(tuple(row) for row in stats))))


def test_token_methods_registered_with_needs():
    methods = token_methods()
    assert methods["dgpo"].needs == {"entropies", "hellinger"} and methods["dgpo"].conserves
    assert methods["dgpo"].excludes_kl
    assert methods["aem"].needs == frozenset() and not methods["aem"].conserves
    assert methods["ep_grpo"].needs == {"entropies", "ref_logprobs"} and methods["ep_grpo"].conserves
    assert methods["gear"].needs == {"teacher_logprobs"} and methods["vpr"].needs == {"text_offsets"}


# ---------------------------------------------------------------------------------------- DGPO
def test_dgpo_hand_worked():
    # s = H * e = [0.5*1, 0*2, 0.2*0.5] = [0.5, 0, 0.1]; mean 0.2 -> s/mean = [2.5, 0, 0.5]
    # mix 0.5: w = 0.5 + 0.5 * [2.5, 0, 0.5] = [1.75, 0.5, 0.75] (sum 3 = C); A = 2 -> [3.5, 1, 1.5]
    w = dgpo_weights(np.array([0.5, 0.0, 0.2]), np.array([1.0, 2.0, 0.5]), mix=0.5)
    np.testing.assert_allclose(w, [1.75, 0.5, 0.75], atol=1e-12)
    ep = episode([3])
    stats = TokenStats(np.full(3, -1.0), entropies=np.array([1.0, 2.0, 0.5]),
                       hellinger=np.array([0.5, 0.0, 0.2]))
    rows = assign_tokens("dgpo", group_batch([ep], [[stats]]), [np.array([2.0])], {"mix": 0.5, "floor": 0.0})
    np.testing.assert_allclose(rows[0][0], [3.5, 1.0, 1.5], atol=1e-12)
    # the noise floor 0.1: d = [0.4, 0, 0.1], s = [0.4, 0, 0.05], mean 0.15 -> s/mean = [8/3, 0, 1/3]
    # w = 0.5 + 0.5 * s/mean = [11/6, 1/2, 2/3] (sum 3); A = 2 -> [11/3, 1, 4/3]
    rows = assign_tokens("dgpo", group_batch([ep], [[stats]]), [np.array([2.0])], {"mix": 0.5, "floor": 0.1})
    np.testing.assert_allclose(rows[0][0], [11 / 3, 1.0, 4 / 3], atol=1e-12)
    # rounding-size distances (two forward passes of identical weights) are no deviation: uniform
    noise = TokenStats(np.full(3, -1.0), entropies=np.array([1.0, 2.0, 0.5]), hellinger=np.array([3e-7, 1e-6, 5e-7]))
    rows = assign_tokens("dgpo", group_batch([ep], [[noise]]), [np.array([2.0])], {"mix": 1.0})
    np.testing.assert_allclose(rows[0][0], [2.0, 2.0, 2.0], atol=1e-12)
    # mix 0 is GRPO (uniform); no deviation anywhere keeps the scalar on every token
    np.testing.assert_allclose(dgpo_weights(np.array([0.5, 0.0, 0.2]), np.ones(3), mix=0.0), np.ones(3))
    np.testing.assert_allclose(dgpo_weights(np.zeros(3), np.ones(3), mix=1.0), np.ones(3))


def test_dgpo_softmax_variant_hand_worked():
    # s = [1, 0]; temperature 1: softmax = [e/(e+1), 1/(e+1)] = [0.731059, 0.268941]; * C = 2 ->
    # [1.462117, 0.537883]; mix 1 -> those weights.
    w = dgpo_weights(np.array([1.0, 0.0]), np.array([1.0, 1.0]), mix=1.0, temperature=1.0)
    np.testing.assert_allclose(w, [1.462117, 0.537883], atol=1e-6)


@settings(max_examples=60, deadline=None)
# no subnormal advantage: the bounds below divide the row by it, and A * w of a subnormal A keeps
# too few bits for w to come back (A = 5e-324 gives w in {0, 1, 2})
@given(st.lists(st.integers(1, 12), min_size=1, max_size=4), st.floats(-3, 3, allow_subnormal=False),
       st.floats(0, 1), st.one_of(st.none(), st.floats(0.05, 5)), st.integers(0, 2**31 - 1))
def test_dgpo_conserves_each_message_total(lengths, adv, mix, temperature, seed):
    rng = np.random.default_rng(seed)
    ep = episode(lengths)
    stats = [TokenStats(-rng.random(n), entropies=rng.random(n) * 3,
                        hellinger=rng.random(n) * (rng.random(n) > 0.3)) for n in lengths]
    A = np.full(len(lengths), adv)
    rows = assign_tokens("dgpo", group_batch([ep], [stats]), [A], {"mix": mix, "temperature": temperature})
    for n, row in zip(lengths, rows[0], strict=True):
        assert np.isfinite(row).all()
        assert row.sum() == pytest.approx(n * adv, abs=1e-9)
        # bounds: w in [1 - mix, 1 - mix + mix * C], same sign as A
        w = row / adv if adv != 0 else np.ones(n)
        assert (w >= 1 - mix - 1e-9).all() and (w <= 1 - mix + mix * n + 1e-9).all()


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.floats(-3, 3), st.floats(0, 1), st.integers(0, 2**31 - 1))
def test_dgpo_per_message_rule_equals_the_group_method(n, adv, mix, seed):
    # the rule the update applies from its own forward pass gives the group method's tokens
    rng = np.random.default_rng(seed)
    stats = TokenStats(-rng.random(n), entropies=rng.random(n) * 3, hellinger=rng.random(n))
    method, options = token_methods()["dgpo"], DGPOOptions(mix=mix)
    row = message_tokens(method, adv, stats, options)
    group = assign_tokens("dgpo", group_batch([episode([n])], [[stats]]), [np.array([adv])], options)
    np.testing.assert_allclose(row, group[0][0], atol=1e-12)


def test_message_tokens_checks_the_rule():
    stats = TokenStats(np.zeros(3), entropies=np.ones(3), hellinger=np.ones(3))
    base = token_methods()["dgpo"]
    with pytest.raises(ValueError, match="no per-message rule"):
        message_tokens(token_methods()["vpr"], 1.0, stats, None)
    bad_shape = dataclasses.replace(base, row=lambda a, st_, o: np.ones(2))
    with pytest.raises(RuntimeError, match="shape"):
        message_tokens(bad_shape, 1.0, stats, DGPOOptions())
    leaks = dataclasses.replace(base, row=lambda a, st_, o: np.array([a, a, 2 * a]))  # sums to 4A, not 3A
    with pytest.raises(RuntimeError, match="conservation"):
        message_tokens(leaks, 1.0, stats, DGPOOptions())
    nan = dataclasses.replace(base, row=lambda a, st_, o: np.array([a, np.nan, a]))
    with pytest.raises(RuntimeError, match="non-finite"):
        message_tokens(nan, 1.0, stats, DGPOOptions())


def test_dgpo_refuses_missing_statistics():
    ep = episode([2])
    with pytest.raises(ValueError, match="needs token statistic 'hellinger'"):
        assign_tokens("dgpo", group_batch([ep], [[TokenStats(np.zeros(2), entropies=np.ones(2))]]),
                      [np.array([1.0])])


# ----------------------------------------------------------------------------------------- AEM
def test_aem_hand_worked():
    # surprisal u = [1, 2, 3] (mean 2) -> rho = [0.5, 1, 1.5]; A = [1, -1, -1]: 1 positive, 2 negative
    # -> kappa = (2 - 1) / 3 = 1/3; c = rho ** (1/3) = [0.793701, 1, 1.144714]
    c = aem_scales(np.array([1.0, 2.0, 3.0]), np.array([1.0, -1.0, -1.0]), strength=1.0, max_scale=2.0)
    np.testing.assert_allclose(c, [0.793701, 1.0, 1.144714], atol=1e-6)
    # mostly succeeding flips the exponent: kappa = -1/3 -> c = rho ** (-1/3) = [1.259921, 1, 0.873580]
    c = aem_scales(np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0, -1.0]), strength=1.0, max_scale=2.0)
    np.testing.assert_allclose(c, [1.259921, 1.0, 0.873580], atol=1e-6)
    # through the dispatcher: the episode's three messages, log-probs -1, -2, -3 per token
    msgs = tuple(Message("solver_0", "solver", t, "solve", "x", completion_ids=(1, 1),
                         logprobs=(-(t + 1.0),) * 2) for t in range(3))
    ep = Episode("p/0", "g", ("solver_0",), msgs, "1", 1.0)
    stats = [TokenStats(np.array(m.logprobs)) for m in msgs]
    rows = assign_tokens("aem", group_batch([ep], [stats]), [np.array([1.0, -1.0, -1.0])])
    np.testing.assert_allclose(np.concatenate(rows[0]), np.repeat([0.793701, -1.0, -1.144714], 2), atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 8.0), st.floats(-3, 3)), min_size=1, max_size=8),
       st.floats(0, 4), st.floats(1, 5))
def test_aem_keeps_signs_and_bounds(items, strength, max_scale):
    u = np.array([x for x, _ in items])
    a = np.array([y for _, y in items])
    c = aem_scales(u, a, strength, max_scale)
    assert np.isfinite(c).all()
    assert (c >= 1 / max_scale - 1e-12).all() and (c <= max_scale + 1e-12).all()
    assert (np.sign(c * a) == np.sign(a)).all()  # exact: signs, and c > 0
    np.testing.assert_allclose(aem_scales(u, a, 0.0, max_scale), np.ones_like(u))


# ---------------------------------------------------------------------------------- dispatcher
def test_roles_filter_and_skipped_messages_keep_scalars():
    ep = episode([2, 0, 3], roles=["proposer", "reviewer", "reviewer"], skipped=(1,))
    stats = [TokenStats(np.full(2, -1.0), entropies=np.ones(2), hellinger=np.array([1.0, 0.0])), None,
             TokenStats(np.full(3, -1.0), entropies=np.ones(3), hellinger=np.array([1.0, 0.0, 0.0]))]
    rows = assign_tokens("dgpo", group_batch([ep], [stats]), [np.array([1.0, 0.0, -1.0])], {"mix": 1.0},
                         roles={"proposer"})
    np.testing.assert_allclose(rows[0][0], [2.0, 0.0])  # proposer: all the credit on the deviating token
    assert rows[0][1] is None and rows[0][2] is None  # skipped; reviewer not listed


def test_unknown_method_and_bad_options_name_the_field():
    ep = episode([1])
    b = group_batch([ep], [[TokenStats(np.zeros(1))]])
    with pytest.raises(ConfigError, match="unknown token credit method 'nope'"):
        assign_tokens("nope", b, [np.zeros(1)])
    with pytest.raises(ConfigError, match=r"credit.token.options.mix"):
        assign_tokens("dgpo", b, [np.zeros(1)], {"mix": 2.0})


# -------------------------------------------------------------------------------------- EP-GRPO
def test_ep_grpo_hand_worked():
    # e = [1, 3] -> e/mean = [0.5, 1.5]; mix 0.5 -> w = [0.75, 1.25]
    # l - r = [0.5, -0.5], tau 1 -> z = [0.462117, -0.462117] (mean 0)
    # A = -2, process 0.5: a = -2 w + 0.5 * 2 * z = [-1.5 + 0.462117, -2.5 - 0.462117]
    a = ep_grpo_tokens(-2.0, np.array([1.0, 3.0]), np.array([-1.0, -2.0]), np.array([-1.5, -1.5]),
                       mix=0.5, process=0.5, tau=1.0)
    np.testing.assert_allclose(a, [-1.037883, -2.962117], atol=1e-6)
    assert a.sum() == pytest.approx(-4.0)  # C * A
    # progress: e = [1, 1, 2] -> P = [0.25, 0.5, 1]; R = 1, scale 0.2 -> [0.05, 0.1, 0.2]; R = 0 negated
    np.testing.assert_allclose(progress_tokens(1.0, np.array([1.0, 1.0, 2.0]), 0.2), [0.05, 0.1, 0.2])
    np.testing.assert_allclose(progress_tokens(0.0, np.array([1.0, 1.0, 2.0]), 0.2), [-0.05, -0.1, -0.2])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 10), min_size=1, max_size=3), st.floats(-3, 3), st.floats(0, 1), st.floats(0, 2),
       st.floats(0.1, 5), st.integers(0, 2**31 - 1))
def test_ep_grpo_conserves_and_zero_variance_is_bounded(lengths, adv, mix, process, tau, seed):
    rng = np.random.default_rng(seed)
    stats = [TokenStats(-rng.random(n) * 5, entropies=rng.random(n) * 2, ref_logprobs=-rng.random(n) * 5)
             for n in lengths]
    eps = [episode(lengths, reward=1.0), episode(lengths, reward=0.0)]
    opts = {"mix": mix, "process": process, "tau": tau, "zero_variance": 0.3}
    rows = assign_tokens("ep_grpo", group_batch(eps, [stats, stats]),
                         [np.full(len(lengths), adv), np.full(len(lengths), -adv)], opts)
    for g, sign in ((0, 1), (1, -1)):
        for n, row in zip(lengths, rows[g], strict=True):
            assert np.isfinite(row).all() and row.sum() == pytest.approx(n * sign * adv, abs=1e-9)
    same = [episode(lengths, reward=0.0), episode(lengths, reward=0.0)]  # zero variance: progress signal
    rows = assign_tokens("ep_grpo", group_batch(same, [stats, stats]), [np.zeros(len(lengths))] * 2, opts)
    for row in rows[0]:
        assert (row <= 0).all() and (np.abs(row) <= 0.3 + 1e-12).all()


# ------------------------------------------------------------------------------------------ VPR
def char_stats(text: str, logprob: float = -1.0) -> TokenStats:
    """One token per character: token j ends at offset j + 1."""
    return TokenStats(np.full(len(text), logprob), text=text, token_ends=np.arange(1, len(text) + 1))


def text_episode(text: str, reward: float) -> Episode:
    msg = Message("solver_0", "solver", 0, "solve", text, completion_ids=(1,) * len(text),
                  logprobs=(-1.0,) * len(text))
    return Episode("p/0", "g", ("solver_0",), (msg,), "1", reward)


def test_vpr_oracle_and_parser():
    assert evaluate("3-2") == 1 and evaluate("2+3*4") == 14 and evaluate("7/2") == Fraction(7, 2)
    assert evaluate("1/0") is None
    # "12 + 7 = 19" true, "19*2 = 39" false, "10 / 4 = 2.5" true; "x = 3" is not a claim
    assert [c[2] for c in claims("12 + 7 = 19, so 19*2 = 39; 10 / 4 = 2.5 and x = 3")] == [1.0, -1.0, 1.0]


def test_vpr_hand_worked():
    # ep0 "1+1=2 ok" (claim [0, 5) true), ep1 "1+1=3 no" (false): rewards at claim 0 = [1, -1],
    # mean 0, std 1 -> Rhat = [1, -1] / (1 + 1e-6); weight 0.5; message advantages [1, -1]:
    # tokens 0..4 (start inside the claim) get A + 0.5 Rhat, tokens 5..7 keep A.
    eps = [text_episode("1+1=2 ok", 1.0), text_episode("1+1=3 no", 0.0)]
    b = group_batch(eps, [[char_stats("1+1=2 ok")], [char_stats("1+1=3 no")]])
    rows = assign_tokens("vpr", b, [np.array([1.0]), np.array([-1.0])], {"weight": 0.5})
    step = 0.5 / (1 + 1e-6)
    np.testing.assert_allclose(rows[0][0], [1 + step] * 5 + [1.0] * 3, atol=1e-12)
    np.testing.assert_allclose(rows[1][0], [-1 - step] * 5 + [-1.0] * 3, atol=1e-12)
    # normalise none: raw +-1 rewards
    rows = assign_tokens("vpr", b, [np.array([1.0]), np.array([-1.0])], {"weight": 0.5, "normalise": "none"})
    np.testing.assert_allclose(rows[1][0], [-1.5] * 5 + [-1.0] * 3, atol=1e-12)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.text(alphabet="0123456789+-*/=. x", max_size=30), min_size=1, max_size=4),
       st.floats(0, 2), st.floats(-2, 2))
def test_vpr_never_raises_and_weight_zero_is_the_message_advantage(texts, weight, adv):
    texts = [t or "0" for t in texts]
    eps = [text_episode(t, float(i % 2)) for i, t in enumerate(texts)]
    stats = [[char_stats(t)] for t in texts]
    advs = [np.array([adv])] * len(texts)
    for row in assign_tokens("vpr", group_batch(eps, stats), advs, {"weight": weight}):
        assert np.isfinite(row[0]).all() and (np.abs(row[0] - adv) <= weight * 10 + 1e-9).all()
    for row in assign_tokens("vpr", group_batch(eps, stats), advs, {"weight": 0.0}):
        np.testing.assert_allclose(row[0], adv)


# ----------------------------------------------------------------------------------------- GEAR
def test_gear_hand_worked():
    # D = l - q = [0.2, 2.0, -0.5, 0.1]; threshold 1: a spike at j = 1, its segment runs to the end.
    # anchors: j0 aligned -> 0.2; j1..j3 -> D_1 = 2.0. m = 1 + tanh(anchor) =
    # [1.197375, 1.964028, 1.964028, 1.964028], sum 7.089458; w = 4 m / sum =
    # [0.675581, 1.108140, 1.108140, 1.108140]
    w = gear_weights(np.array([-1.0, -1.0, -1.0, -1.0]), np.array([-1.2, -3.0, -0.5, -1.1]), 1.0, 1.0)
    np.testing.assert_allclose(w, [0.675581, 1.108140, 1.108140, 1.108140], atol=1e-6)
    # no divergence: uniform; strength 0: uniform
    np.testing.assert_allclose(gear_weights(np.zeros(3), np.zeros(3), 1.0, 1.0), np.ones(3))
    np.testing.assert_allclose(gear_weights(np.zeros(3), -np.ones(3) * 5, 1.0, 0.0), np.ones(3))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=3), st.floats(-3, 3), st.floats(0.1, 3), st.floats(0, 3),
       st.integers(0, 2**31 - 1))
def test_gear_conserves_each_message_total(lengths, adv, threshold, strength, seed):
    rng = np.random.default_rng(seed)
    stats = [TokenStats(-rng.random(n) * 4, teacher_logprobs=-rng.random(n) * 4) for n in lengths]
    rows = assign_tokens("gear", group_batch([episode(lengths)], [stats]), [np.full(len(lengths), adv)],
                         {"threshold": threshold, "strength": strength})
    for n, row in zip(lengths, rows[0], strict=True):
        assert np.isfinite(row).all() and row.sum() == pytest.approx(n * adv, abs=1e-9)
        # every weight lies in [1, 1 + strength] / mean: positive, so each token keeps A's sign
        assert (row * np.sign(adv) >= 0).all()


# -------------------------------------------------------------------------------------- S-trace
def test_s_trace_hand_worked():
    # e = [0.1, 2, 0.5, 3], select 0.5 -> decisions {1, 3}; on-policy (rho = 1), lam 0.5:
    # traces backwards: token 3 -> 1, token 1 -> 0.5; sum 1.5; mix 1, C = 4:
    # w = [0, 4 * 0.5 / 1.5, 0, 4 * 1 / 1.5] = [0, 1.333333, 0, 2.666667]
    e = np.array([0.1, 2.0, 0.5, 3.0])
    np.testing.assert_allclose(s_trace_weights(e, np.zeros(4), 0.5, 0.5, 1.0, 1.0), [0, 4 / 3, 0, 8 / 3], atol=1e-12)
    # mix 0.5: 0.5 + 0.5 * that = [0.5, 1.166667, 0.5, 1.833333]
    np.testing.assert_allclose(s_trace_weights(e, np.zeros(4), 0.5, 0.5, 1.0, 0.5),
                               [0.5, 1.166667, 0.5, 1.833333], atol=1e-6)
    # successor ratio rho_3 = 0.5 (clip 1 keeps it): token 1's trace = 0.5 * 0.5 = 0.25; sum 1.25:
    # w = [0, 4 * 0.25 / 1.25, 0, 4 / 1.25] = [0, 0.8, 0, 3.2]; rho_3 = 2 is clipped to 1 (as rho = 1)
    np.testing.assert_allclose(s_trace_weights(e, np.log([1, 1, 1, 0.5]), 0.5, 0.5, 1.0, 1.0), [0, 0.8, 0, 3.2],
                               atol=1e-12)
    np.testing.assert_allclose(s_trace_weights(e, np.log([1, 1, 1, 2.0]), 0.5, 0.5, 1.0, 1.0), [0, 4 / 3, 0, 8 / 3],
                               atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=3), st.floats(-3, 3), st.floats(0.05, 1),
       st.floats(0.05, 1), st.floats(0.1, 3), st.floats(0, 1), st.integers(0, 2**31 - 1))
def test_s_trace_conserves_each_message_total(lengths, adv, select, lam, clip, mix, seed):
    rng = np.random.default_rng(seed)
    stats = [TokenStats(-rng.random(n) * 3, entropies=rng.random(n) * 2,
                        current_logprobs=-rng.random(n) * 3) for n in lengths]
    rows = assign_tokens("s_trace", group_batch([episode(lengths)], [stats]), [np.full(len(lengths), adv)],
                         {"select": select, "lam": lam, "clip": clip, "mix": mix})
    for n, row in zip(lengths, rows[0], strict=True):
        assert np.isfinite(row).all() and row.sum() == pytest.approx(n * adv, abs=1e-9)
