"""Position maps (what GET /api/positions returns and `position_figure` draws) against their sources:
`alibi_slopes`, the model's T5 tables looked up through `t5_relative_bucket`, `RotaryEmbedding`'s cos/sin;
and the explorer's endpoint returns the same numbers, with a one-line 422 for lengths out of range."""

from __future__ import annotations

import json
import math

import pytest
import torch
from matplotlib.figure import Figure

from attnlab.analysis.positions import position_figure, position_maps, position_numbers
from attnlab.attention.positions import alibi_slopes, t5_relative_bucket
from attnlab.data import Vocab
from attnlab.decoding.translator import Translator
from attnlab.models import Transformer, TransformerConfig

S, T = 6, 4


def _model(**option) -> Transformer:
    torch.manual_seed(0)
    cfg = TransformerConfig(12, 12, num_hiddens=16, num_heads=4, num_layers=1, ffn_num_hiddens=16, **option)
    model = Transformer(cfg).eval()
    if cfg.positions == "t5":  # tables start at zero: give them values to compare
        for stack in (model.encoder, model.decoder):
            torch.nn.init.normal_(stack.relative_bias.embedding.weight)
    return model


def test_alibi_maps_are_minus_slope_times_distance():
    maps = position_maps(_model(positions="alibi"), S, T)
    slopes = alibi_slopes(4).tolist()
    assert maps["scheme"] == "alibi" and maps["slopes"] == slopes
    for h, slope in enumerate(slopes):
        for i in range(S):
            for j in range(S):
                assert maps["encoder_self"][h][i][j] == pytest.approx(-slope * abs(i - j), abs=1e-4)
        for i in range(T):
            assert maps["decoder_self"][h][i][: i + 1] == pytest.approx(
                [-slope * (i - j) for j in range(i + 1)], abs=1e-4
            )
            assert maps["decoder_self"][h][i][i + 1 :] == [None] * (T - i - 1)  # hidden by the causal mask


def test_t5_maps_are_the_model_tables_bucket_values():
    model = _model(positions="t5", position_options={"num_buckets": 8, "max_distance": 10})
    maps = position_maps(model, S, T)
    assert (maps["num_buckets"], maps["max_distance"]) == (8, 10)
    for kind, stack, L, bidirectional in (
        ("encoder_self", model.encoder, S, True),
        ("decoder_self", model.decoder, T, False),
    ):
        table = stack.relative_bias.embedding.weight  # (buckets, H)
        for i in range(L):
            for j in range(L if bidirectional else i + 1):
                b = int(t5_relative_bucket(torch.tensor(j - i), bidirectional, 8, 10))
                want = table[b].tolist()
                assert [maps[kind][h][i][j] for h in range(4)] == pytest.approx(want, abs=1e-4), (kind, i, j)


def test_rope_angles_are_rotary_embeddings_angles():
    model = _model(positions="rope", position_options={"fraction": 0.5, "base": 100.0})
    maps = position_maps(model, S, T)
    rope = model.encoder.rotary
    cos, sin = rope.cos_sin(S)  # (S, rot): half-split pairs share an angle
    angles = torch.tensor(maps["angles"])
    assert maps["rot_dim"] == rope.rot_dim == 2 and maps["base"] == 100.0 and angles.shape == (S, 1)
    torch.testing.assert_close(torch.cos(angles).float(), cos[:, : rope.rot_dim // 2], atol=1e-4, rtol=0)
    torch.testing.assert_close(torch.sin(angles).float(), sin[:, : rope.rot_dim // 2], atol=1e-4, rtol=0)
    assert maps["inv_freq"] == pytest.approx([1.0])
    assert angles[:, 0].tolist() == pytest.approx([float(p) for p in range(S)])  # theta_0 = 1 whatever the base


@pytest.mark.parametrize("positions", ["alibi", "t5", "rope", "sinusoidal"])
def test_position_figure_is_a_figure(positions):
    fig = position_figure(_model(positions=positions), head=1, source_len=S, target_len=T)
    assert isinstance(fig, Figure) and fig.axes
    if positions in ("alibi", "t5"):
        with pytest.raises(ValueError, match=r"head must be in 0\.\.3"):
            position_figure(_model(positions=positions), head=4)


def test_api_positions_field_values(tmp_path):
    from fastapi.testclient import TestClient

    from attnlab.serve.app import create_app

    model = _model(positions="alibi")
    vocab = Vocab([f"w{i}" for i in range(8)], min_freq=1)
    translator = Translator(model, vocab, vocab, config={"model_type": "transformer", "model": model.config.to_dict()})
    with TestClient(create_app(translator, workers=1)) as client:
        body = client.get("/api/positions", params={"source_len": S, "target_len": T}).json()
        assert body == position_maps(model, S, T) and body["slopes"] == alibi_slopes(4).tolist()
        assert body["encoder_self"][0][0][S - 1] == pytest.approx(-math.ldexp(1, -2) * (S - 1), abs=1e-4)
        bad = client.get("/api/positions", params={"source_len": 0, "target_len": T})
        assert bad.status_code == 422 and "source_len must lie in 1.." in bad.json()["detail"]
        assert "/api/positions" in client.get("/openapi.json").json()["paths"]
        big = client.get("/api/positions", params={"source_len": 1000, "target_len": T})  # 4 x 1000² biases
        assert big.status_code == 413 and "--max-response-bytes" in big.json()["detail"]
    assert position_numbers(model, S, T) == 4 * (S * S + T * T)
    assert len(json.dumps(position_maps(model, S, T))) < 12 * position_numbers(model, S, T)
