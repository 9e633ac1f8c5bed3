"""Suite-wide fixtures."""

import pytest


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for tiny models: they gain nothing from intra-op threads, and on a shared 2-core
    machine two OpenMP threads fighting other processes made them ~9-15x slower (measured)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
