"""The boundary policy: every forbidden message is refused on send and on receive."""
import numpy as np
import pytest

from pobo.protocol.errors import ErrorCode, PolicyViolation, ProtocolError
from pobo.protocol.messages import (
    PROTOCOL_VERSION, Dataset, End, Error, Hello, ProjectedDataset, Query, Reward, Welcome,
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


@pytest.mark.parametrize("kind", ["welcome", "dataset", "reward"])
def test_modeler_may_not_send_curator_kinds(params, release, kind):
    cur, mod = _ready_pair(params, release)
    message = {"welcome": Welcome(PROTOCOL_VERSION, "s", params), "dataset": Dataset(release),
               "reward": Reward(1, 0, 0.5)}[kind]
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
    for bad, code in ((Query(2, 0), ErrorCode.SEQUENCE), (Query(1, 5), ErrorCode.INDEX_OUT_OF_RANGE),
                      (Query(1, -1), ErrorCode.INDEX_OUT_OF_RANGE)):
        with pytest.raises(ProtocolError) as info:
            cur.incoming(bad)
        assert info.value.code is code
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
