"""`attnlab export --format web` of a run whose decoder is shallower than its encoder (2 + 1 blocks), in
headless Chromium: the page's greedy translation is `attnlab translate --beam 1`'s, the layer selector spans
the encoder's two layers, and each heatmap holds its own stack's weights (the decoder's one layer throughout)."""

from __future__ import annotations

from urllib.parse import quote

import numpy as np
import pytest

from attnlab import explain
from attnlab.cli import main
from attnlab.runs.loading import load_translator
from attnlab.testing import train_tiny

from .test_web import TOL, _drawn, browser, static_server

pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.browser
__all__ = ["browser", "static_server"]  # fixtures of test_web, served here from this module's `page`
TEXT = "he's calm ."


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("web-depths") / "tiny", steps=20, decoder_layers=1)


@pytest.fixture(scope="module")
def page(run, tmp_path_factory):
    out = tmp_path_factory.mktemp("web-depths-out") / "explorer"
    assert main(["export", "--format", "web", "--checkpoint", str(run), "--out", str(out)]) == 0
    return out


def test_the_page_draws_each_stack_at_its_own_depth(run, static_server, browser, capsys):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import Select, WebDriverWait

    translator = load_translator(run)
    assert (len(translator.model.encoder.blocks), len(translator.model.decoder.blocks)) == (2, 1)
    assert main(["translate", "--checkpoint", str(run), "--beam", "1", TEXT]) == 0
    expected = capsys.readouterr().out.strip()
    browser.get(f"{static_server}/index.html?text={quote(TEXT)}")
    WebDriverWait(browser, 60).until(EC.visibility_of_element_located((By.CSS_SELECTOR, "#cross-heatmap rect.cell")))
    assert browser.find_element(By.ID, "translation").text == expected
    layers = Select(browser.find_element(By.ID, "layer"))
    assert [o.text for o in layers.options] == ["1 of 2", "2 of 2"]
    ref = explain(translator, TEXT, translator.options(beam=1))
    for layer in (0, 1):
        layers.select_by_value(str(layer))
        for box, kind in (("enc-heatmap", "encoder_self"), ("cross-heatmap", "cross"), ("dec-heatmap", "decoder_self")):
            maps = ref.maps[kind].numpy()
            want = maps[min(layer, len(maps) - 1)].mean(axis=0)
            np.testing.assert_allclose(_drawn(browser, box), want, atol=TOL, rtol=0, err_msg=f"{kind} {layer}")
    errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
