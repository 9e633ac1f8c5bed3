"""The demonstrations' computations: the numbers behind the commands and the report."""

import math

import pytest
import torch

from attnlab.chapter.nadaraya_watson import kernel_regression
from attnlab.chapter.parameters import (
    TRANSFORMER_SETTINGS,
    attention_param_table,
    complexity_table,
    ffn_param_table,
    params,
)
from attnlab.chapter.report import Section, format_table, write_report
from attnlab.chapter.scoring_functions import scaling, scaling_stats, softmax_jacobian_norm
from attnlab.chapter.self_attention import positional_encoding, rotation_matrix, sinusoid_reference


def test_positional_encoding_matches_formula_and_rotates():
    r = positional_encoding(num_hiddens=16, num_steps=40)
    P = r.data["P"]
    assert P.shape == (40, 16)
    # Formula written out by hand, independently of both implementations.
    pos, i = 7, 3
    assert float(P[pos, 2 * i]) == pytest.approx(math.sin(pos / 10000 ** (2 * i / 16)), abs=1e-6)
    assert float(P[pos, 2 * i + 1]) == pytest.approx(math.cos(pos / 10000 ** (2 * i / 16)), abs=1e-6)
    assert r.data["formula_max_error"] <= 1e-5
    assert r.data["rotation_max_error"] <= 1e-5
    assert set(r.figures) == {"pe_columns", "pe_heatmap"}
    binary = r.tables[0][1]
    assert [row[1] for row in binary] == [f"{p:03b}" for p in range(8)]


def test_rotation_matrix_is_position_independent_and_orthogonal():
    d = 8
    P = sinusoid_reference(30, d)
    M = rotation_matrix(5, d)
    torch.testing.assert_close(M @ M.T, torch.eye(d, dtype=torch.float64))
    torch.testing.assert_close(P[:-5] @ M.T, P[5:])
    # A wrong shift must fail the check (the test can fail).
    assert (P[:-5] @ rotation_matrix(4, d).T - P[5:]).abs().max() > 1e-2
    with pytest.raises(ValueError, match="even"):
        rotation_matrix(1, 7)


def test_positional_encoding_rejects_odd_size():
    with pytest.raises(ValueError, match="even number"):
        positional_encoding(num_hiddens=7)


def test_softmax_jacobian_norm_matches_autograd():
    torch.manual_seed(0)
    s = torch.randn(5, dtype=torch.float64) * 3
    J = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, -1), s)
    p = torch.softmax(s, -1)
    torch.testing.assert_close(softmax_jacobian_norm(p), torch.linalg.norm(J))


def test_scaling_stats():
    dims = (8, 512)
    st = scaling_stats(dims, samples=200, num_keys=32, seed=0)
    for d, vu, vs in zip(dims, st["var_unscaled"], st["var_scaled"]):
        assert vu == pytest.approx(d, rel=0.2)
        assert vs == pytest.approx(1.0, rel=0.2)
    assert st["jac_unscaled"][1] < st["jac_scaled"][1]
    assert st["maxw_unscaled"][1] > st["maxw_scaled"][1]
    assert st["maxw_unscaled"][1] > st["maxw_unscaled"][0]  # saturation grows with d_k
    r = scaling(dims, samples=50, num_keys=16)
    assert len(r.tables[0][1]) == 2 and "scaling" in r.figures
    with pytest.raises(ValueError, match="samples"):
        scaling_stats(samples=0)


def test_kernel_regression_result():
    r = kernel_regression(seed=0, epochs=2, n_train=20)
    mse = r.data["mse"]
    assert set(mse) == {"average pooling", "gaussian", "boxcar", "epanechnikov", "parametric"}
    assert all(math.isfinite(v) for v in mse.values())
    assert mse["gaussian"] < mse["average pooling"]
    assert len(r.data["losses"]) == 2
    assert {"predictions", "loss", "attention_nonparametric", "attention_parametric"} <= set(r.figures)


def test_param_tables():
    headers, rows = attention_param_table(64, 8)
    single, multi = rows
    assert single.parameters == multi.parameters == 4 * 64**2 and multi.head_dim == 8
    assert len(headers) == len(single)  # named rows still print as table rows
    _, ffn = ffn_param_table(64, 256)
    assert ffn[0].expansion == 4 and ffn[0].parameters == 2 * 64 * 256 + 64 + 256
    r = params()
    counts = r.data["transformer"]
    assert 60e6 < counts["base"] < 66e6  # the paper reports 65M
    assert 205e6 < counts["big"] < 220e6  # and 213M
    assert "base 6+1" in counts  # a deep encoder under a one-block decoder
    # Independent count of the paper's post-norm layout with biases, tied embeddings and an
    # output bias: guards against the model silently growing or losing a sublayer.
    for name, s in TRANSFORMER_SETTINGS.items():
        d, f, n, v = s["num_hiddens"], s["ffn_num_hiddens"], s["num_layers"], s["vocab_size"]
        n_dec = s.get("decoder_layers", n)
        attn, ffn, norm = 4 * (d * d + d), 2 * d * f + d + f, 2 * d
        expected = v * d + v + n * (attn + ffn + 2 * norm) + n_dec * (2 * attn + ffn + 3 * norm)
        assert counts[name] == expected
        assert r.data["transformer_untied"][name] == expected + 2 * v * d
    cx = dict((row[0], row[1:]) for row in complexity_table()[1])
    assert cx["self-attention"] == ["O(n²·d)", "O(1)", "O(1)"]
    assert cx["RNN"] == ["O(n·d²)", "O(n)", "O(n)"]


def test_result_saves_into_a_report(tmp_path):
    r = positional_encoding(num_hiddens=8, num_steps=10)
    section = r.save(tmp_path / "pe")
    assert isinstance(section, Section)
    assert all(p.exists() and p.stat().st_size > 0 for p in section.figures)
    assert (tmp_path / "pe" / "pe_heatmap.svg").exists()
    out = write_report(tmp_path / "report.html", [section])
    assert "pe/pe_heatmap.png" in out.read_text()
    assert "PE == formula" in format_table(*r.tables[1])
