"""The page's decoding options in a real headless Chromium against a real `attnlab serve` (the `driver` and
`server` fixtures): n-best 2 with "show alignment" lists the library's 2 hypotheses and draws alignment
links over the encoder–decoder heatmap; samples appear beside the beam's best."""

from __future__ import annotations

import pytest

from attnlab.decoding.options import DecodeOptions

pytestmark = pytest.mark.browser

TEXT = "i'm home ."


def test_nbest_alignment_and_samples(driver, server, translator):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import Select, WebDriverWait

    wait = WebDriverWait(driver, 30)
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 1440, "deviceScaleFactor": 1, "mobile": False}
    )
    driver.get(server + "/")
    driver.get_log("browser")  # drop messages of earlier pages
    drawn = wait.until(EC.visibility_of_element_located((By.CSS_SELECTOR, "#cross-heatmap rect.cell")))
    box = driver.find_element(By.ID, "text")
    box.clear()
    box.send_keys(TEXT)
    beam = str(translator.defaults.beam)  # the page starts at the run's decoding defaults
    assert driver.find_element(By.ID, "beam").get_attribute("value") == beam
    Select(driver.find_element(By.ID, "beam")).select_by_value("1")
    Select(driver.find_element(By.ID, "nbest")).select_by_value("2")
    assert driver.find_element(By.ID, "beam").get_attribute("value") == "2"  # n-best raised the beam
    driver.find_element(By.ID, "align").click()
    driver.find_element(By.ID, "translate").click()
    wait.until(EC.staleness_of(drawn))
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#nbest-list li.hyp")) == 2)

    (t,) = translator.translate_tokens([TEXT], options=DecodeOptions(beam=2, n_best=2, align=True))
    texts = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#nbest-list li.hyp .hyp-text")]
    assert texts == [h.text or "(empty)" for h in t.nbest]
    assert driver.find_element(By.ID, "translation").text == t.text
    links = driver.find_elements(By.CSS_SELECTOR, "#cross-heatmap rect.align-link")
    assert len(links) >= 1 and len(links) <= len(t.alignment)
    drawn_pairs = {(int(r.get_attribute("data-src-word")), int(r.get_attribute("data-tgt-word"))) for r in links}
    assert drawn_pairs <= set(t.alignment)
    assert "word alignment" in driver.find_element(By.ID, "alignment").text

    # Samples beside the beam's best: seeded, so the library's own samples.
    driver.find_element(By.ID, "sample").click()
    drawn = driver.find_element(By.CSS_SELECTOR, "#cross-heatmap rect.cell")
    driver.find_element(By.ID, "translate").click()
    wait.until(EC.staleness_of(drawn))
    samples = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#samples-list li.hyp .hyp-text"))
    opts = DecodeOptions(sample=True, n_best=3, temperature=1.0, top_p=0.9, seed=0)
    assert [s.text for s in samples] == [
        h.text or "(empty)" for h in translator.translate_tokens([TEXT], options=opts)[0].nbest
    ]
    assert [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"] == []
