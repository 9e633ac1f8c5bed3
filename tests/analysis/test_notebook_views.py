"""attnlab.analysis.notebook: head_view / model_view build self-contained HTML that draws in headless Chromium."""

from __future__ import annotations

import re

import pytest
import torch

from attnlab.analysis.explanation import Explanation
from attnlab.analysis.notebook import head_view, model_view


def fake_explanation(layers=3, heads=4, ls=5, lt=6, bahdanau=False) -> Explanation:
    """Random row-stochastic weights of the right shapes: the views only draw what they are given."""
    g = torch.Generator().manual_seed(0)

    def w(n, lq, lk):
        return torch.softmax(torch.randn(n, heads, lq, lk, generator=g), dim=-1)

    src = [f"s{i}" for i in range(ls - 1)] + ["<eos>"]
    tgt = [f"t{i}" for i in range(lt - 1)] + ["<eos>"]
    n_self = 0 if bahdanau else layers
    return Explanation(
        text=" ".join(src[:-1]),
        translation=" ".join(tgt[:-1]),
        src_tokens=src,
        tgt_tokens=tgt,
        tgt_input_tokens=["<bos>"] + tgt[:-1],
        beam=1,
        finished=True,
        model_type="bahdanau" if bahdanau else "transformer",
        maps={"encoder_self": w(n_self, ls, ls), "decoder_self": w(n_self, lt, lt), "cross": w(layers, lt, ls)},
    )


def test_views_embed_weights_and_drawing_code_without_network(tmp_path):
    ex = fake_explanation()
    view = model_view(ex)
    assert len(view.data["attention"]["cross"]) == 3 and len(view.data["attention"]["cross"][0]) == 4
    page = view.save_html(tmp_path / "m.html").read_text(encoding="utf-8")
    assert "window.AttnDraw" in page and page.startswith("<!doctype html>")
    assert not re.search(r"(src|href)=[\"']?https?://", page)  # nothing fetched: works offline
    assert "<script>" in head_view(ex)._repr_html_()


def test_views_refuse_what_the_model_lacks():
    ex = fake_explanation(bahdanau=True)
    with pytest.raises(ValueError, match="no encoder_self attention; choose kind from cross"):
        model_view(ex, kind="encoder_self")
    with pytest.raises(ValueError, match=r"layer must be in 0..2"):
        head_view(fake_explanation(), layer=3)
    with pytest.raises(ValueError, match="kind must be one of"):
        head_view(ex, kind="self")


def test_static_fallback_is_a_figure():
    fig = head_view(fake_explanation(), layer=1).figure()
    assert len([a for a in fig.axes if a.images]) == 4  # one panel per head of the chosen layer


@pytest.mark.browser
def test_model_view_draws_every_layer_and_head(driver, until_js, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    path = model_view(fake_explanation(layers=3, heads=4)).save_html(tmp_path / "model.html")
    driver.get(path.as_uri())
    sizes = (
        "return [...document.querySelectorAll('canvas.attn-canvas')].map(c => c.dataset.rows + 'x' + c.dataset.cols)"
    )
    until_js(sizes, lambda got: got == ["6x5"] * 12)  # 3 layers x 4 heads of cross-attention
    # A drawn canvas, not a blank one: the pixel of the strongest weight is dark blue.
    dark = """const c = document.querySelector('canvas.attn-canvas'), x = c.getContext('2d');
              const d = x.getImageData(0, 0, c.width, c.height).data; let m = 255;
              for (let i = 0; i < d.length; i += 4) m = Math.min(m, d[i]); return m;"""
    assert driver.execute_script(dark) < 150
    Select(driver.find_element(By.CSS_SELECTOR, "select[data-control=attention]")).select_by_value("encoder_self")
    assert driver.execute_script(sizes) == ["5x5"] * 12
    driver.save_screenshot(str(tmp_path / "model.png"))
    assert not [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


@pytest.mark.browser
def test_head_view_draws_one_colour_per_head_and_switches_layers(driver, until_js, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    path = head_view(fake_explanation(layers=3, heads=4)).save_html(tmp_path / "head.html")
    driver.get(path.as_uri())
    until_js("return document.querySelectorAll('svg.attn-lines g[data-head]').length", lambda n: n == 4)
    Select(driver.find_element(By.CSS_SELECTOR, "select[data-control=layer]")).select_by_value("2")
    assert driver.find_element(By.CSS_SELECTOR, "svg.attn-lines .attn-title").text == "layer 3"
    driver.find_element(By.CSS_SELECTOR, ".heads span[data-head='0']").click()  # hide head 1
    assert len(driver.find_elements(By.CSS_SELECTOR, "svg.attn-lines g[data-head]")) == 3
    driver.save_screenshot(str(tmp_path / "head.png"))
    assert not [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


@pytest.mark.browser
def test_large_model_view_draws(driver, until_js, tmp_path):
    """6 layers x 8 heads x 40 tokens draws completely: 48 canvases of 40 x 40, on this page."""

    path = model_view(fake_explanation(layers=6, heads=8, ls=40, lt=40)).save_html(tmp_path / "big.html")
    driver.get(path.as_uri())
    drawn = """return location.href === arguments[0] ? [...document.querySelectorAll('canvas.attn-canvas')]
                 .filter(c => c.dataset.rows === '40' && c.dataset.cols === '40' && c.width > 0).length : -1"""
    until_js(drawn, lambda n: n == 48, path.as_uri())
    assert not [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def test_views_name_the_position_scheme_and_key_value_heads():
    ex = fake_explanation()
    ex.positions, ex.num_heads, ex.num_kv_heads = "alibi", 4, 2
    for view in (head_view(ex), model_view(ex)):
        layout = re.search(r'<div class="layout">([^<]*)</div>', view._repr_html_())
        assert layout is not None
        assert layout.group(1) == "transformer · positions: alibi · 2 key/value heads for 4 query heads (grouped-query)"
    ex.positions, ex.num_kv_heads = "rope", 1
    assert "positions: rope · 1 key/value head shared by 4 query heads (multi-query)" in head_view(ex)._repr_html_()
    assert '<div class="layout">bahdanau</div>' in head_view(fake_explanation(bahdanau=True))._repr_html_()


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("transformer", ("rope", 4, 2)),
        ("decoder-only", ("sinusoidal", 4, 4)),
        ("bahdanau", (None, None, None)),
    ],
)
def test_attention_layout_reads_the_models_config(model, expected):
    from attnlab.analysis.explanation import attention_layout
    from attnlab.models import DecoderOnly, DecoderOnlyConfig, Transformer, TransformerConfig
    from attnlab.models.seq2seq import BahdanauConfig, EncoderDecoder

    small = {"num_hiddens": 16, "num_heads": 4, "num_layers": 1, "ffn_num_hiddens": 16}
    if model == "transformer":
        m = Transformer(TransformerConfig(10, 10, **small, positions="rope", num_kv_heads=2))
    elif model == "decoder-only":
        m = DecoderOnly(DecoderOnlyConfig(10, 10, **small))
    else:
        m = EncoderDecoder.from_config(BahdanauConfig(10, 10, embed_size=8, num_hiddens=8, num_layers=1))
    assert attention_layout(m) == expected
