import numpy as np
import pytest
from scipy.special import ndtr


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def thurstone_counts(truth, pairs, votes_per_pair, rng):
    """Binomial win counts of honest Thurstone observers on ``pairs``."""
    p = ndtr(truth[pairs[:, 0]] - truth[pairs[:, 1]])
    first = rng.binomial(votes_per_pair, p)
    return np.column_stack([first, votes_per_pair - first]).astype(float)
