"""A position scheme is one module: two toy schemes, registered from this file only, train, load, translate,
export (CTranslate2, or a one-line refusal) and draw through the same code as attnlab's own six."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import torch
from torch import nn

from attnlab.analysis.positions import position_figure, position_maps, position_numbers
from attnlab.attention.positions import (
    EMBEDDINGS,
    POSITIONS,
    SCHEMES,
    SCORES,
    PositionScheme,
    StackPositions,
    get_scheme,
    register,
    sinusoidal_encoding,
    unregister,
)
from attnlab.attention.positions.base import stack_bias_maps
from attnlab.cli import main
from attnlab.export.ctranslate2 import source_tokens
from attnlab.export.marian import config_to_marian
from attnlab.models import Transformer, TransformerConfig
from attnlab.runs.loading import load_translator
from attnlab.testing import train_tiny


class ScaledSinusoids(nn.Module):
    """scale * the book's sinusoids added to the embeddings. Shape: X (B, L, D) -> (B, L, D)."""

    def __init__(self, num_hiddens: int, scale: float):
        super().__init__()
        self.num_hiddens, self.scale = num_hiddens, scale

    def encoding(self, length: int, offset: int = 0, device=None) -> torch.Tensor:
        return self.scale * sinusoidal_encoding(torch.arange(offset, offset + length, device=device), self.num_hiddens)

    def forward(self, X: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return X + self.encoding(X.shape[1], offset, X.device).to(X.dtype)[None]


@dataclass(frozen=True)
class ScaledOptions:
    scale: float = 0.5  # what the sinusoids are multiplied by


class Scaled(PositionScheme):
    name, enters, Options, ct2 = "scaled", EMBEDDINGS, ScaledOptions, "position table"

    def build(self, options, shape) -> StackPositions:
        return StackPositions(encoding=ScaledSinusoids(shape.num_hiddens, options.scale))

    def ct2_write(self, spec, stack) -> None:
        spec.position_encodings.encodings = stack.pos_encoding.encoding(256).float().clone()


class NearbyBias(nn.Module):
    """-penalty for keys farther than `reach` from the query: (q_pos, k_pos) -> (1, H, Lq, Lk)."""

    def __init__(self, num_heads: int, reach: int, penalty: float):
        super().__init__()
        self.num_heads, self.reach, self.penalty = num_heads, reach, penalty

    def forward(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        far = ((q_pos[:, None] - k_pos[None, :]).abs() > self.reach).float()
        return (-self.penalty * far).expand(self.num_heads, -1, -1)[None]


@dataclass(frozen=True)
class NearbyOptions:
    reach: int = 1  # keys within this distance are not penalised
    penalty: float = 3.0  # what farther keys lose from their scores


class Nearby(PositionScheme):
    name, enters, Options, view = "nearby", SCORES, NearbyOptions, "bias"
    ct2_refusal = "CTranslate2's spec has no distance penalty"

    def check(self, options, num_hiddens, num_heads) -> None:
        if options.reach < 0:
            raise ValueError(f"positions='nearby' needs reach >= 0, got {options.reach}")

    def build(self, options, shape) -> StackPositions:
        return StackPositions(bias=NearbyBias(shape.num_heads, options.reach, options.penalty))

    def maps(self, model, source_len, target_len) -> dict:
        return stack_bias_maps(model, source_len, target_len)

    def numbers(self, model, source_len, target_len) -> int:
        return model.config.num_heads * (source_len**2 + target_len**2)

    def caption(self, maps, head) -> str:
        return f"nearby · head {head + 1}"


@pytest.fixture(autouse=True, scope="module")
def toy_schemes():
    register(Scaled())
    register(Nearby())
    yield
    unregister("scaled")
    unregister("nearby")


def _model(positions: str, **options) -> Transformer:
    torch.manual_seed(0)
    cfg = TransformerConfig(9, 9, num_hiddens=16, num_heads=2, num_layers=1, ffn_num_hiddens=32, dropout=0.0)
    cfg = TransformerConfig.from_dict({**cfg.to_dict(), "positions": positions, "position_options": options})
    return Transformer(cfg).eval()


def test_the_stack_takes_what_the_scheme_builds():
    scaled, nearby = _model("scaled", scale=0.25), _model("nearby", reach=0)
    assert isinstance(scaled.encoder.pos_encoding, ScaledSinusoids) and scaled.encoder.pos_encoding.scale == 0.25
    assert scaled.encoder.relative_bias is None and scaled.decoder.rotary is None
    assert isinstance(nearby.decoder.relative_bias, NearbyBias) and nearby.encoder.pos_encoding is None
    X = torch.randint(3, 9, (2, 5))
    expected = scaled.encoder.embedding(X) * 4.0 + 0.25 * sinusoidal_encoding(torch.arange(5), 16)
    torch.testing.assert_close(scaled.encoder.embed(X), expected)
    assert nearby.config.position_options == {"reach": 0, "penalty": 3.0}  # the whole block, as config.json keeps it
    with pytest.raises(ValueError, match="needs reach >= 0"):
        _model("nearby", reach=-1)
    with pytest.raises(ValueError, match=r"takes the options \['scale'\], got \['reach'\]"):
        _model("scaled", reach=2)


def test_a_registered_scheme_trains_loads_and_exports(tmp_path):
    run = train_tiny(tmp_path / "run", steps=3, positions="scaled", position_options={"scale": 0.5})
    saved = json.loads((run / "config.json").read_text())["model"]
    assert saved["positions"] == "scaled" and saved["position_options"] == {"scale": 0.5}
    translator = load_translator(run)
    assert isinstance(translator.model.decoder.pos_encoding, ScaledSinusoids)
    sample = ["go .", "i'm home .", "he's calm ."]
    ids = translator.encode(sample)
    greedy = translator.options(beam=1)
    ours = [translator.tgt_vocab.to_tokens(hs[0].tokens) for hs in translator.search(ids, greedy)]
    ctranslate2 = pytest.importorskip("ctranslate2")

    out = tmp_path / "ct2"
    assert main(["export", "--checkpoint", str(run), "--format", "ctranslate2", "--out", str(out)]) == 0
    limit = translator.output_limit(max(map(len, ids)) + 1)  # attnlab's length cap for this batch
    res = ctranslate2.Translator(str(out), intra_threads=1).translate_batch(
        [source_tokens(translator.src_vocab, s) for s in sample],
        beam_size=1,
        max_decoding_length=limit,
        min_decoding_length=0,
    )
    assert ours == [r.hypotheses[0] for r in res]


def test_exporters_refuse_what_their_format_cannot_hold_in_one_line(tmp_path, capsys):
    with pytest.raises(ValueError, match="positions='scaled'"):
        config_to_marian(_model("scaled").config, pad=1, eos=2)  # Marian holds fixed sinusoids only
    run = train_tiny(tmp_path / "run", steps=1, positions="nearby")
    assert main(["export", "--checkpoint", str(run), "--format", "ctranslate2", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert "positions='nearby', which CTranslate2's spec has no distance penalty" in err and "\n" not in err


def test_views_draw_a_registered_scheme():
    model = _model("nearby", reach=1, penalty=2.0)
    maps = position_maps(model, 3, 2)
    assert maps["scheme"] == "nearby" and maps["num_heads"] == 2
    assert maps["encoder_self"][0] == [[0.0, 0.0, -2.0], [0.0, 0.0, 0.0], [-2.0, 0.0, 0.0]]
    assert maps["decoder_self"][1] == [[0.0, None], [0.0, 0.0]]  # causal: later keys hidden
    assert position_numbers(model, 3, 2) == 2 * (9 + 4)
    fig = position_figure(model, head=1, source_len=3, target_len=2)
    assert len(fig.axes) == 4 and fig._suptitle.get_text() == "nearby · head 2"
    assert position_maps(_model("scaled"), 3, 2) == {"scheme": "scaled", "num_heads": 2}  # nothing per head


def test_the_registry_refuses_a_taken_name_and_names_what_there_is():
    with pytest.raises(ValueError, match="exists already"):
        register(Scaled())
    with pytest.raises(ValueError, match="stays"):
        unregister("rope")
    with pytest.raises(ValueError, match=r"must be one of \(.*'nearby'\), got 'xpos'"):
        get_scheme("xpos")
    assert set(POSITIONS) == {"sinusoidal", "learned", "rope", "alibi", "t5", "none"} < set(SCHEMES)
