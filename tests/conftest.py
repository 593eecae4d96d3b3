"""Shared fixtures: small public session parameters and one message of every kind."""
import numpy as np
import pytest

from protocol.messages import (
    PROTOCOL_VERSION, Dataset, End, Error, Hello, KernelParams, Mechanism, ProjectedDataset,
    Query, Reward, SessionParams, Welcome,
)
from protocol.policy import DP_PROJECTION


@pytest.fixture
def params() -> SessionParams:
    return SessionParams("test", 5, 2, 3, "private", (Mechanism(DP_PROJECTION, 1.0, 1e-5),),
                         KernelParams("se", 1.0, 1.0, 1e-4), "seeded")


@pytest.fixture
def release() -> ProjectedDataset:
    Z = np.arange(10, dtype=float).reshape(5, 2)
    return ProjectedDataset(DP_PROJECTION, 1.0, 1e-5, 3.5, Z)


@pytest.fixture
def every_message(params, release) -> list:
    return [Hello(PROTOCOL_VERSION, "pytest"), Welcome(PROTOCOL_VERSION, "abc", params),
            Dataset(release), Query(1, 4), Reward(1, 4, -0.25), End("done"),
            Error("policy", "no")]
