"""The page in a real headless Chromium against a real `attnlab serve`: translate, heatmaps, hover,
step-through, the Nadaraya–Watson tab, and no horizontal overflow at laptop and phone widths.

Needs Debian's chromium + chromium-driver (CI's .ci/run installs them). Screenshots go to the test's
tmp dir; with ATTNLAB_UPDATE_SCREENSHOT=1 the laptop one is also copied to docs/explorer.png."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from attnlab.data import data_credit

DOCS_PNG = Path(__file__).resolve().parents[2] / "docs" / "explorer.png"

pytestmark = pytest.mark.browser  # the `driver` fixture (tests/conftest.py) skips where Chromium is missing

# Elements that extend past the viewport's right edge (ignoring hidden ones, and those inside a container that
# scrolls sideways, as the beam search's steps do): the overflow check.
OVERFLOW_JS = """
const vw = document.documentElement.clientWidth, out = [];
const scrolled = (e) => { for (let p = e.parentElement; p; p = p.parentElement)
  if (['auto', 'scroll'].includes(getComputedStyle(p).overflowX)) return true; return false; };
for (const e of document.querySelectorAll('body *')) {
  const r = e.getBoundingClientRect();
  if (r.width > 0 && r.height > 0 && r.right > vw + 1 && e.id !== 'tooltip' && !scrolled(e))
    out.push((e.id ? '#' + e.id : e.tagName.toLowerCase() + '.' + e.className) + ' right=' + Math.round(r.right));
}
return {vw, scroll: document.documentElement.scrollWidth, out: out.slice(0, 10)};
"""


def _viewport(driver, width, height, mobile=False):
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
    )


def _no_overflow(driver, where):
    res = driver.execute_script(OVERFLOW_JS)
    assert res["scroll"] <= res["vw"] and not res["out"], f"horizontal overflow at {where}: {res}"


def test_page_end_to_end(driver, server, translator, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, 60)
    _viewport(driver, 1280, 1440)
    driver.get(server + "/")
    credit = data_credit(translator.config.get("data", {}).get("path"))  # the corpus, or the bundled sample
    assert credit in driver.find_element(By.ID, "attribution").text
    wait.until(lambda d: "transformer" in d.find_element(By.ID, "model-info").text)

    # On load, without a click, the first example is translated and its attention drawn.
    wait.until(EC.visibility_of_element_located((By.CSS_SELECTOR, "#cross-heatmap rect.cell")))
    first = driver.find_element(By.CSS_SELECTOR, "#examples .chip").text
    assert driver.find_element(By.ID, "text").get_attribute("value") == first
    assert driver.find_element(By.ID, "translation").text == translator.translate([first])[0]
    assert driver.find_elements(By.CSS_SELECTOR, "#enc-heatmap rect.cell")
    wait.until(lambda d: "sinusoidal positions" in d.find_element(By.ID, "positions-note").text)  # positions.js

    text = "i'm home ."
    box = driver.find_element(By.ID, "text")
    box.clear()
    box.send_keys(text)
    drawn = driver.find_element(By.CSS_SELECTOR, "#cross-heatmap rect.cell")  # from the translation on load
    driver.find_element(By.ID, "translate").click()
    wait.until(EC.staleness_of(drawn))  # redrawn for the clicked translation, not the one on load
    wait.until(EC.visibility_of_element_located((By.CSS_SELECTOR, "#cross-heatmap rect.cell")))

    expected = translator.translate([text])[0]
    assert driver.find_element(By.ID, "translation").text == expected
    exp_tokens = translator.translate_tokens([text])[0]
    Lt, Ls = len(exp_tokens.tgt_tokens) + 1, len(exp_tokens.src_tokens)  # + the <eos> row
    cells = driver.find_elements(By.CSS_SELECTOR, "#cross-heatmap rect.cell")
    assert len(cells) == Lt * Ls
    assert {(c.get_attribute("data-row"), c.get_attribute("data-col")) for c in cells} == {
        (str(i), str(j)) for i in range(Lt) for j in range(Ls)
    }
    assert len(driver.find_elements(By.CSS_SELECTOR, "#enc-heatmap rect.cell")) == Ls * Ls
    assert len(driver.find_elements(By.CSS_SELECTOR, "#dec-heatmap rect.cell")) == Lt * Lt
    assert driver.find_elements(By.CSS_SELECTOR, "#lines line")

    # Hover a cell: the tooltip names both tokens and the weight.
    cell = driver.find_element(By.CSS_SELECTOR, '#cross-heatmap rect.cell[data-row="0"][data-col="0"]')
    ActionChains(driver).move_to_element(cell).perform()
    tip = driver.find_element(By.ID, "tooltip")
    wait.until(lambda d: tip.is_displayed())
    assert exp_tokens.src_tokens[0] in tip.text and cell.get_attribute("data-weight") in tip.text

    # Step through the decoding, and pick one head instead of the mean.
    label = driver.find_element(By.ID, "step-label")
    assert label.text.startswith("step 1 of")
    driver.find_element(By.ID, "next").click()
    assert label.text.startswith("step 2 of")
    assert len(driver.find_elements(By.CSS_SELECTOR, "#step-source .tok")) == Ls
    driver.find_element(By.CSS_SELECTOR, '#head option[value="1"]').click()
    assert len(driver.find_elements(By.CSS_SELECTOR, "#cross-heatmap rect.cell")) == Lt * Ls
    _no_overflow(driver, "1280 px")
    driver.execute_script("document.activeElement.blur()")
    shot = tmp_path / "explorer-laptop.png"
    driver.save_screenshot(str(shot))

    # Bad input shows the server's message, not a crash.
    box.clear()
    driver.find_element(By.ID, "translate").click()
    err = driver.find_element(By.ID, "error")
    wait.until(lambda d: err.is_displayed())
    assert "empty" in err.text

    # Phone width: nothing sticks out to the right.
    _viewport(driver, 390, 844, mobile=True)
    driver.execute_script("window.scrollTo(0, 0)")
    _no_overflow(driver, "390 px, translator")
    driver.save_screenshot(str(tmp_path / "explorer-phone.png"))

    # Nadaraya–Watson tab: 50 seeded points, the curve follows the bandwidth slider and the click.
    driver.find_element(By.ID, "tab-nw").click()
    wait.until(EC.visibility_of_element_located((By.CSS_SELECTOR, "#nw-plot svg")))
    assert len(driver.find_elements(By.CSS_SELECTOR, "#nw-plot circle")) >= 50
    readout = driver.find_element(By.ID, "nw-readout").text
    before = driver.find_element(By.ID, "nw-readout").text
    driver.execute_script(
        "const s = document.getElementById('bandwidth'); s.value = 0.1;s.dispatchEvent(new Event('input'));"
    )
    assert driver.find_element(By.ID, "nw-readout").text != before
    plot = driver.find_element(By.CSS_SELECTOR, "#nw-plot svg")
    ActionChains(driver).move_to_element_with_offset(plot, plot.size["width"] // 4, 0).click().perform()
    wait.until(lambda d: d.find_element(By.ID, "nw-readout").text != readout)
    _no_overflow(driver, "390 px, Nadaraya–Watson")
    _viewport(driver, 1280, 900)
    _no_overflow(driver, "1280 px, Nadaraya–Watson")
    driver.save_screenshot(str(tmp_path / "explorer-nw.png"))

    assert shot.stat().st_size > 10_000
    if os.environ.get("ATTNLAB_UPDATE_SCREENSHOT") == "1":
        DOCS_PNG.parent.mkdir(exist_ok=True)
        shutil.copy(shot, DOCS_PNG)


def _console_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def test_heads_switches_and_beam_search_view(driver, server, translator):
    """Switching a head off sends the mask and redraws the maps (= the library's mask_heads result);
    beam > 1 draws the search with the winner's path; the page logs no console errors."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from attnlab.analysis.explanation import head_masks_for
    from attnlab.attention import mask_heads

    wait = WebDriverWait(driver, 60)
    _viewport(driver, 1280, 1440)
    driver.get(server + "/")
    driver.get_log("browser")  # drop messages of earlier pages
    wait.until(EC.visibility_of_element_located((By.CSS_SELECTOR, "#cross-heatmap rect.cell")))
    N, H = translator.model.config.num_layers, translator.model.config.num_heads
    heads = driver.find_elements(By.CSS_SELECTOR, "#heads-grid button.head")
    assert len(heads) == 3 * N * H  # encoder self, decoder self, cross
    assert "confidence" in driver.find_element(By.ID, "importance-source").text

    text = driver.find_element(By.ID, "text").get_attribute("value")

    # A masked head's own map stays (its output is dropped after the softmax); what reads the encoder's
    # output changes, so the encoder–decoder map is the one to watch.
    def weights():
        return [
            c.get_attribute("data-weight") for c in driver.find_elements(By.CSS_SELECTOR, "#cross-heatmap rect.cell")
        ]

    before, drawn = weights(), driver.find_element(By.CSS_SELECTOR, "#cross-heatmap rect.cell")
    driver.find_element(
        By.CSS_SELECTOR, '#heads-grid button.head[data-kind="encoder_self"][data-layer="0"][data-head="0"]'
    ).click()
    wait.until(EC.staleness_of(drawn))
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, '#heads-grid button.head.off[data-kind="encoder_self"]'))
    assert weights() != before
    with mask_heads(translator.model, head_masks_for(translator.model, {"encoder_self": [[0, 0]]})):
        expected = translator.translate([text])[0]
    assert driver.find_element(By.ID, "translation").text == expected
    assert "1 head off" in driver.find_element(By.ID, "importance-source").text

    # All heads back on, then beam 3: the search is drawn, with one marked path ending the winner.
    drawn = driver.find_element(By.CSS_SELECTOR, "#cross-heatmap rect.cell")
    driver.find_element(By.ID, "heads-reset").click()
    wait.until(EC.staleness_of(drawn))
    assert weights() == before
    Select(driver.find_element(By.ID, "beam")).select_by_value("3")
    drawn = driver.find_element(By.CSS_SELECTOR, "#cross-heatmap rect.cell")
    driver.find_element(By.ID, "translate").click()
    wait.until(EC.staleness_of(drawn))  # the run's default beam may already show a search: wait for this one
    wait.until(EC.visibility_of_element_located((By.CSS_SELECTOR, "#beam-steps .cand.win")))
    path = driver.find_elements(By.CSS_SELECTOR, "#beam-steps .cand.win .cand-tok")
    exp = translator.translate_tokens([text], options=translator.options(beam=3))[0]
    assert [p.text for p in path][: len(exp.tgt_tokens)] == exp.tgt_tokens
    _no_overflow(driver, "1280 px, beam view")
    assert _console_errors(driver) == []
