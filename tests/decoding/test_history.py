"""`History`, the beam loop's double-buffered record of every row's tokens: the same histories as Python lists
that copy their parents' every step, through shrinking batches, a prefix and the bans' view."""

import pytest
import torch

from attnlab.decoding.history import History


def test_history_follows_parents_like_copied_lists():
    g = torch.Generator().manual_seed(0)
    R, P, steps = 12, 2, 9
    prefix = torch.randint(0, 50, (R, P), generator=g)
    prefix_lp = -torch.rand(R, P, generator=g)
    hist = History(R, P + steps, torch.device("cpu"))
    hist.start(prefix, prefix_lp)
    want = [(row, lp) for row, lp in zip(prefix.tolist(), prefix_lp.tolist())]
    for step in range(steps):
        R = max(2, R - step % 3)  # rows leave now and then
        parents = torch.randint(0, len(want), (R,), generator=g)
        tok, lp = torch.randint(0, 50, (R,), generator=g), -torch.rand(R, generator=g)
        hist.advance(parents, tok, lp)
        want = [(want[p][0] + [t], want[p][1] + [v]) for p, t, v in zip(parents.tolist(), tok.tolist(), lp.tolist())]
        assert hist.tokens.tolist() == [w[0] for w in want]  # the (R, t) view the bans read
        rows = torch.randperm(R, generator=g)[:3]
        toks, lps = hist.read(rows)
        assert toks == [want[r][0] for r in rows.tolist()]
        assert lps == [want[r][1] for r in rows.tolist()]  # float32 values, exactly
    with pytest.raises(ValueError, match="holds 11 steps"):
        hist.advance(torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long), torch.zeros(1))
