"""record_attention keeps its state in a ContextVar: one model, many threads, each its own weights."""

import threading

import torch

from attnlab.attention import MultiHeadAttention, record_attention


def test_two_threads_record_one_model_at_once():
    torch.manual_seed(0)
    model = MultiHeadAttention(8, 2).eval()
    inputs = [torch.randn(1, 4, 8), torch.randn(1, 6, 8)]
    expected = []
    for x in inputs:  # each input alone, one after the other
        with record_attention(model) as rec:
            model(x, x, x)
        expected.append(rec.weights["MultiHeadAttention"])
    assert expected[0][0].shape != expected[1][0].shape

    # Both threads enter their recording before either runs the model, so the recordings overlap.
    barrier, got, errors = threading.Barrier(2), [None, None], []

    def work(i):
        try:
            x = inputs[i]
            with record_attention(model) as rec:
                barrier.wait(timeout=10)
                for _ in range(3):
                    model(x, x, x)
                barrier.wait(timeout=10)
            got[i] = rec.weights["MultiHeadAttention"]
        except Exception as exc:  # noqa: BLE001 (surfaced below: a thread's exception would otherwise vanish)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(2):
        assert len(got[i]) == 3  # only its own three calls, none of the other thread's
        for w in got[i]:
            # the same numbers up to the last bits (threads may take other matmul kernels), none of the other's
            torch.testing.assert_close(w, expected[i][0], rtol=1e-5, atol=1e-7)


def test_other_threads_run_unrecorded_while_one_records():
    model = MultiHeadAttention(8, 2).eval()
    seen = []
    with record_attention(model) as rec:
        t = threading.Thread(target=lambda: seen.append(model.recording))
        t.start()
        t.join()
        assert model.recording
    assert seen == [False] and not model.recording and not rec.weights


def test_nested_recordings_both_capture():
    model = MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, 3, 8)
    with record_attention(model) as outer:
        with record_attention(model) as inner:
            model(x, x, x)
        model(x, x, x)
    assert len(inner.weights["MultiHeadAttention"]) == 1
    assert len(outer.weights["MultiHeadAttention"]) == 2
