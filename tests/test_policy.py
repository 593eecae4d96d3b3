"""The boundary policy: every forbidden message is refused on send and on receive."""
import numpy as np
import pytest

from pobo.protocol.errors import ErrorCode, PolicyViolation, ProtocolError
import dataclasses

from pobo.protocol.messages import (
    PROTOCOL_VERSION, Dataset, End, Error, Hello, Pending, ProjectedDataset, Query, Reward,
    Welcome,
)
from pobo.protocol.policy import CURATOR, IDENTITY, MODELER, NON_PRIVATE, PRIVATE, Boundary


def _ready_pair(params, release, policy=PRIVATE):
    """A curator and a modeler boundary after the handshake and the dataset."""
    cur, mod = Boundary(policy, CURATOR), Boundary(policy, MODELER)
    for msg in (Hello(PROTOCOL_VERSION, "t"), Welcome(PROTOCOL_VERSION, "s", params),
                Dataset(release)):
        sender, receiver = (mod, cur) if isinstance(msg, Hello) else (cur, mod)
        sender.outgoing(msg)
        receiver.incoming(msg)
    return cur, mod


def _refused_both_ways(sender: Boundary, receiver: Boundary, message, error=ProtocolError):
    with pytest.raises(error):
        sender.outgoing(message)
    with pytest.raises(error):
        receiver.incoming(message)


@pytest.mark.parametrize("kind", ["hello", "query"])
def test_curator_may_not_send_modeler_kinds(params, release, kind):
    cur, mod = _ready_pair(params, release)
    message = Hello(PROTOCOL_VERSION, "x") if kind == "hello" else Query(1, 0)
    _refused_both_ways(cur, mod, message, PolicyViolation)


@pytest.mark.parametrize("kind", ["welcome", "dataset", "reward", "pending"])
def test_modeler_may_not_send_curator_kinds(params, release, kind):
    cur, mod = _ready_pair(params, release)
    message = {"welcome": Welcome(PROTOCOL_VERSION, "s", params), "dataset": Dataset(release),
               "reward": Reward(1, 0, 0.5), "pending": Pending(1, 0, 0.0)}[kind]
    _refused_both_ways(mod, cur, message, PolicyViolation)


def test_raw_dataset_is_refused_under_the_private_policy(params, release):
    cur, mod = Boundary(PRIVATE, CURATOR), Boundary(PRIVATE, MODELER)
    raw = Dataset(ProjectedDataset(IDENTITY, 0.0, 1.0, 0.0, release.Z))
    _refused_both_ways(cur, mod, raw, PolicyViolation)
    # ...and admitted only when both sides run the explicit non-private policy
    np_params = params.__class__(**{**params.__dict__, "policy": "non-private"})
    cur, mod = Boundary(NON_PRIVATE, CURATOR), Boundary(NON_PRIVATE, MODELER)
    for msg in (Welcome(PROTOCOL_VERSION, "s", np_params), raw):
        cur.outgoing(msg)
        mod.incoming(msg)


def test_unannounced_or_misshapen_release_is_refused(params, release):
    cur, mod = Boundary(PRIVATE, CURATOR), Boundary(PRIVATE, MODELER)
    welcome = Welcome(PROTOCOL_VERSION, "s", params)
    cur.outgoing(welcome)
    mod.incoming(welcome)
    other_eps = ProjectedDataset(release.mechanism, 2.0, 1e-5, 1.0, release.Z)
    _refused_both_ways(cur, mod, Dataset(other_eps), PolicyViolation)
    wrong_shape = ProjectedDataset(release.mechanism, 1.0, 1e-5, 1.0, np.zeros((4, 2)))
    _refused_both_ways(cur, mod, Dataset(wrong_shape))
    bad_delta = ProjectedDataset(release.mechanism, 1.0, 1.0, 1.0, release.Z)
    _refused_both_ways(cur, mod, Dataset(bad_delta), PolicyViolation)


def test_policy_mismatch_in_welcome_is_refused(params):
    np_params = params.__class__(**{**params.__dict__, "policy": "non-private"})
    _refused_both_ways(Boundary(PRIVATE, CURATOR), Boundary(PRIVATE, MODELER),
                       Welcome(PROTOCOL_VERSION, "s", np_params), PolicyViolation)


def test_version_mismatch_is_refused_at_the_handshake(params):
    with pytest.raises(ProtocolError) as info:
        Boundary(PRIVATE, CURATOR).incoming(Hello(PROTOCOL_VERSION + 1, "future"))
    assert info.value.code is ErrorCode.VERSION_MISMATCH and not info.value.recoverable
    with pytest.raises(ProtocolError):
        Boundary(PRIVATE, MODELER).incoming(Welcome(0, "s", params))


def test_queries_are_checked_for_order_range_and_budget(params, release):
    cur, mod = _ready_pair(params, release)  # n = 5, T = 3
    for bad, code in ((Query(0, 0), ErrorCode.SEQUENCE), (Query(1, 5), ErrorCode.INDEX_OUT_OF_RANGE),
                      (Query(1, -1), ErrorCode.INDEX_OUT_OF_RANGE)):
        with pytest.raises(ProtocolError) as info:
            cur.incoming(bad)
        assert info.value.code is code and info.value.seq == bad.seq
    for seq in (1, 2, 3):
        mod.outgoing(Query(seq, seq))
        cur.incoming(Query(seq, seq))
        cur.outgoing(Reward(seq, seq, 0.1))
        mod.incoming(Reward(seq, seq, 0.1))
    with pytest.raises(ProtocolError) as info:
        cur.incoming(Query(4, 0))
    assert info.value.code is ErrorCode.BUDGET_EXHAUSTED


def test_rewards_must_answer_an_outstanding_query(params, release):
    cur, mod = _ready_pair(params, release)
    _refused_both_ways(cur, mod, Reward(1, 0, 0.0))  # nobody asked
    mod.outgoing(Query(1, 3))
    cur.incoming(Query(1, 3))
    _refused_both_ways(cur, mod, Reward(1, 2, 0.0))  # wrong row
    cur.outgoing(Reward(1, 3, 0.0))
    mod.incoming(Reward(1, 3, 0.0))
    _refused_both_ways(cur, mod, Reward(1, 3, 0.0))  # answered already


def test_messages_out_of_handshake_order_are_refused(params, release):
    cur, mod = Boundary(PRIVATE, CURATOR), Boundary(PRIVATE, MODELER)
    _refused_both_ways(cur, mod, Dataset(release))  # before the welcome
    _refused_both_ways(mod, cur, Query(1, 0))  # before the welcome
    cur, mod = _ready_pair(params, release)
    _refused_both_ways(cur, mod, Dataset(release))  # a second dataset
    _refused_both_ways(cur, mod, Welcome(PROTOCOL_VERSION, "s", params))  # a second welcome
    for msg in (End("bye"), Error("internal", "x")):  # allowed both ways
        cur.outgoing(msg)
        mod.incoming(msg)
        mod.outgoing(msg)
        cur.incoming(msg)


def _refusal(boundary: Boundary, query: Query) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        boundary.incoming(query)
    return info.value


def test_query_checks_come_in_the_stated_order_and_name_the_query(params, release):
    """PROTOCOL.md 7: before the dataset, seq < 1, seq > T, a seq asked with another row,
    the row, the batch; each refusal names the refused query in its seq."""
    cur = Boundary(PRIVATE, CURATOR)
    cur.incoming(Hello(PROTOCOL_VERSION, "t"))
    cur.outgoing(Welcome(PROTOCOL_VERSION, "s", params))
    exc = _refusal(cur, Query(params.T + 2, params.n + 7))  # before the dataset: first
    assert (exc.code, exc.seq) == (ErrorCode.SEQUENCE, params.T + 2)
    cur.outgoing(Dataset(release))
    cases = [(Query(params.T + 2, params.n + 7), ErrorCode.BUDGET_EXHAUSTED),  # T before row
             (Query(0, params.n + 7), ErrorCode.SEQUENCE),
             (Query(-4, 0), ErrorCode.SEQUENCE)]
    for query, code in cases:
        exc = _refusal(cur, query)
        assert (exc.code, exc.seq) == (code, query.seq), (query, exc)
    cur.incoming(Query(1, 0))  # batch 1: now full
    exc = _refusal(cur, Query(2, params.n))  # the row before the batch
    assert (exc.code, exc.seq) == (ErrorCode.INDEX_OUT_OF_RANGE, 2)
    exc = _refusal(cur, Query(2, 1))
    assert (exc.code, exc.seq) == (ErrorCode.SEQUENCE, 2) and "outstanding" in str(exc)
    exc = _refusal(cur, Query(1, 3))  # seq 1 asked with row 0
    assert (exc.code, exc.seq) == (ErrorCode.SEQUENCE, 1)


def test_a_refused_query_frees_its_seq_and_batch_slot_for_pipelined_queries(params, release):
    """A bad row among pipelined queries refuses that one only: the later ones are taken,
    the refused seq is asked again with a good row, and the session reaches T."""
    params = dataclasses.replace(params, batch=3)  # n = 5, T = 3
    cur, mod = _ready_pair(params, release)
    exc = _refusal(cur, Query(1, params.n))
    assert (exc.code, exc.seq) == (ErrorCode.INDEX_OUT_OF_RANGE, 1)
    for seq in (2, 3):  # pipelined behind the refused one: not `sequence`
        mod.outgoing(Query(seq, seq))
        cur.incoming(Query(seq, seq))
    mod.outgoing(Query(1, 4))
    cur.incoming(Query(1, 4))  # the refused seq, asked again
    for seq in (3, 1, 2):
        cur.outgoing(Reward(seq, cur.asked[seq], 0.5))
        mod.incoming(Reward(seq, cur.asked[seq], 0.5))
    assert cur.outstanding == mod.outstanding == {} and len(cur.asked) == params.T


def test_a_query_the_curator_refuses_after_admitting_it_is_withdrawn_on_both_sides(
        params, release):
    """A query the policy admitted and the curator then refused (its row's LDP budget, a
    spent T) is not asked: on both sides its seq and its only batch slot are free again."""
    cur, mod = _ready_pair(params, release)  # batch 1
    mod.outgoing(Query(1, 2))
    cur.incoming(Query(1, 2))
    refusal = Error("privacy_budget", "row 2 is spent", 1)
    cur.outgoing(refusal)
    mod.incoming(refusal)
    assert cur.outstanding == mod.outstanding == {} and cur.asked == mod.asked == {}
    mod.outgoing(Query(1, 3))  # the seq again, another row, in the one slot
    cur.incoming(Query(1, 3))
    assert cur.asked == mod.asked == {1: 3}


def test_an_error_about_an_answered_query_withdraws_nothing(params, release):
    """A retry with another row is refused naming the query, which stays asked: only a
    query with no answer at all yet can be withdrawn; nor does a retryable error."""
    cur, mod = _ready_pair(params, release)
    mod.outgoing(Query(1, 2))
    cur.incoming(Query(1, 2))
    for answer in (Pending(1, 2, 0.0), Error("sequence", "query 1 was for row 2, not 3", 1)):
        cur.outgoing(answer)
        mod.incoming(answer)
    assert cur.asked == mod.asked == {1: 2} and cur.outstanding == mod.outstanding == {1: 2}
    cur2, mod2 = _ready_pair(params, release)
    mod2.outgoing(Query(1, 2))
    cur2.incoming(Query(1, 2))
    for answer in (Error("evaluation_failed", "retry", 1), Error("budget_exhausted", "x", 1)):
        cur2.outgoing(answer)
        mod2.incoming(answer)
    assert cur2.asked == mod2.asked == {1: 2}  # reserved: the failed evaluation took it


def test_hello_nonce_is_32_hex_digits_or_empty(params):
    from pobo.protocol.messages import new_nonce
    nonce = new_nonce()
    assert len(nonce) == 32 and nonce != new_nonce()
    Boundary(PRIVATE, CURATOR).incoming(Hello(PROTOCOL_VERSION, "t", nonce=nonce))
    Boundary(PRIVATE, CURATOR).incoming(Hello(PROTOCOL_VERSION, "t"))
    for bad in ("00" * 15, "AB" * 16, "g" * 32):
        with pytest.raises(ProtocolError) as info:
            Boundary(PRIVATE, CURATOR).incoming(Hello(PROTOCOL_VERSION, "t", nonce=bad))
        assert info.value.code is ErrorCode.MALFORMED


def test_the_reward_noise_a_session_expects_follows_its_params(params, release):
    """The noise a reward must carry is worked out once per session's params and kept:
    a boundary whose params change (a session announcing the LDP mechanism) expects the
    new noise, never the one it worked out before."""
    from pobo.protocol.messages import Mechanism
    from pobo.protocol.policy import LDP_REWARD

    cur, mod = _ready_pair(params, release)
    mod.outgoing(Query(1, 3))
    cur.incoming(Query(1, 3))
    cur.outgoing(Reward(1, 3, 0.0))  # no reward mechanism announced: no noise
    mod.incoming(Reward(1, 3, 0.0))
    ldp = dataclasses.replace(params, mechanisms=params.mechanisms
                              + (Mechanism(LDP_REWARD, 1.0, 0.0),))
    cur.params = ldp
    mod.outgoing(Query(2, 4))
    cur.incoming(Query(2, 4))
    with pytest.raises(PolicyViolation, match="local-DP"):
        cur.outgoing(Reward(2, 4, 0.0))
    cur.outgoing(Reward(2, 4, 0.0, LDP_REWARD))


def test_every_reward_with_the_wrong_noise_is_the_same_typed_refusal(params, release):
    """Not only the session's first: once the expected noise is kept, a second reward
    carrying the wrong one is refused alike (it raised UnboundLocalError before)."""
    from pobo.protocol.policy import LDP_REWARD

    cur, mod = _ready_pair(params, release)
    mod.outgoing(Query(1, 3))
    cur.incoming(Query(1, 3))
    for _ in range(2):
        with pytest.raises(PolicyViolation, match="announced no reward mechanism") as refused:
            cur.outgoing(Reward(1, 3, 0.5, LDP_REWARD))
        assert refused.value.code is ErrorCode.POLICY
        with pytest.raises(PolicyViolation, match="announced no reward mechanism"):
            mod.incoming(Reward(1, 3, 0.5, LDP_REWARD))


def _distinct_pair(params, release, strategy="gp-ucb", T=8, batch=1):
    """A curator and a modeler boundary of a session under the `distinct` rule (n = 5)."""
    params = dataclasses.replace(params, distinct=True, T=T, batch=batch)
    cur, mod = Boundary(PRIVATE, CURATOR), Boundary(PRIVATE, MODELER)
    for msg in (Hello(PROTOCOL_VERSION, "t", strategy=strategy, batch=batch),
                Welcome(PROTOCOL_VERSION, "s", params), Dataset(release)):
        sender, receiver = (mod, cur) if isinstance(msg, Hello) else (cur, mod)
        sender.outgoing(msg)
        receiver.incoming(msg)
    return cur, mod


def _answer(cur, mod, seq, row):
    for side in (mod.outgoing, cur.incoming):
        side(Query(seq, row))
    for side in (cur.outgoing, mod.incoming):
        side(Reward(seq, row, 0.5))


@pytest.mark.parametrize("strategy", ["gp-ucb", "random", ""])
def test_distinct_refuses_a_row_asked_before_until_every_row_has_been(params, release,
                                                                      strategy):
    """Issue 49: `distinct` was announced and nothing enforced it. A second query of a row
    is refused `policy`, naming the query (a refusal: its seq stays free), on both sides;
    once every row has been queried, rows may repeat; a retry is no second query."""
    cur, mod = _distinct_pair(params, release, strategy)
    _answer(cur, mod, 1, 3)
    for side in (mod.outgoing, cur.incoming):
        with pytest.raises(ProtocolError) as caught:
            side(Query(2, 3))
        assert (caught.value.code, caught.value.seq) == (ErrorCode.POLICY, 2)
    for side in (mod.outgoing, cur.incoming):
        side(Query(1, 3))  # the retry of query 1: the same row, the same seq
    for side in (cur.outgoing, mod.incoming):
        side(Reward(1, 3, 0.5))
    for seq, row in zip(range(2, 6), (0, 1, 2, 4)):
        _answer(cur, mod, seq, row)
    _answer(cur, mod, 6, 3)  # every row queried: the rule is spent


def test_distinct_frees_the_row_of_a_withdrawn_query_and_spares_the_heavy_tailed(params,
                                                                                 release):
    cur, mod = _distinct_pair(params, release, batch=2)
    for side in (mod.outgoing, cur.incoming):
        side(Query(1, 2))
    refusal = Error("evaluation_failed", "no", 1)  # not a withdrawal: row 2 stays asked
    cur.outgoing(refusal), mod.incoming(refusal)
    with pytest.raises(ProtocolError):
        mod.outgoing(Query(2, 2))
    withdrawn = Error("privacy_budget", "no", 3)  # query 3 refused by the curator's record
    for side in (mod.outgoing, cur.incoming):
        side(Query(3, 4))
    cur.outgoing(withdrawn), mod.incoming(withdrawn)
    for side in (mod.outgoing, cur.incoming):
        side(Query(3, 4))  # its row is free again
    cur, mod = _distinct_pair(params, release, strategy="moma-gp-ucb")
    _answer(cur, mod, 1, 3)
    _answer(cur, mod, 2, 3)  # MoMA re-queries a row by design: exempt


def test_a_hello_declaring_a_release_with_a_batch_is_refused_policy(params):
    """Issue 49: such a Hello was admitted, and the release refused after T evaluations."""
    hello = Hello(PROTOCOL_VERSION, "t", strategy="gp-ucb", release_delta=0.01, batch=4)
    for side in (Boundary(PRIVATE, MODELER).outgoing, Boundary(PRIVATE, CURATOR).incoming):
        with pytest.raises(PolicyViolation):
            side(hello)
    Boundary(PRIVATE, CURATOR).incoming(dataclasses.replace(hello, batch=1))


def test_a_welcome_granting_distinct_to_a_release_hello_is_refused(params):
    """The curator refuses such a Hello (remote._admit, runners.serve_session): a Welcome
    to it is a policy violation on either side, and so in an audit of either transcript."""
    hello = Hello(PROTOCOL_VERSION, "t", strategy="gp-ucb", release_delta=0.01)
    welcome = Welcome(PROTOCOL_VERSION, "s", dataclasses.replace(params, distinct=True))
    cur, mod = Boundary(PRIVATE, CURATOR), Boundary(PRIVATE, MODELER)
    mod.outgoing(hello), cur.incoming(hello)
    with pytest.raises(PolicyViolation, match="distinct"):
        cur.outgoing(welcome)
    with pytest.raises(PolicyViolation, match="distinct"):
        mod.incoming(welcome)
    cur.outgoing(dataclasses.replace(welcome, params=params))  # without the rule: welcome
