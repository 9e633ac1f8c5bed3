"""`attnlab export --format web` in headless Chromium: the exported folder, served by a plain static file
server (no attnlab process), translates in the browser. Three sentences (one from the address, two typed)
give `attnlab translate --beam 1`'s translations, the drawn heatmaps hold attnlab's recorded weights, and no
request goes to any host but the static server.

Needs Debian's chromium + chromium-driver, and onnxruntime-web (the export runs `npm ci`, or reads
$ATTNLAB_ORT_WEB)."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, urlsplit

import numpy as np
import pytest

from attnlab import explain
from attnlab.cli import main
from attnlab.runs.loading import load_translator
from attnlab.testing import train_tiny

pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.browser
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
SENTENCES = ["i'm home .", "he's calm .", "we are friends ."]
TOL = 5e-5 + 1e-5  # the page writes weights with 4 decimals; the graphs equal attnlab's within 1e-5


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("web") / "tiny", steps=20)


PRINTED: dict[str, str] = {}  # what the export printed


@pytest.fixture(scope="module")
def page(run, tmp_path_factory):
    out = tmp_path_factory.mktemp("web-out") / "explorer"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["export", "--format", "web", "--checkpoint", str(run), "--out", str(out)]) == 0
    PRINTED["export"] = printed.getvalue()
    return out


@pytest.fixture(scope="module")
def static_server(page):
    """`python -m http.server`'s handler on a free loopback port, in a thread; yields its base URL."""

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(page)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Headless Chromium keeping its network log (every request the page makes)."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip("needs /usr/bin/chromium and /usr/bin/chromedriver (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-web')}",
    ):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    d = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
    d.set_window_size(1280, 1600)
    yield d
    d.quit()


def _requested(driver) -> set[str]:
    urls = set()
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"] == "Network.requestWillBeSent":
            urls.add(msg["params"]["request"]["url"])
    return urls


def _drawn(driver, box: str) -> np.ndarray:
    """The weights of the heatmap in #box, read back from its cells."""
    cells = driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0] + ' rect.cell'))"
        ".map(c => [Number(c.dataset.row), Number(c.dataset.col), Number(c.dataset.weight)]);",
        f"#{box}",
    )
    rows, cols = max(c[0] for c in cells) + 1, max(c[1] for c in cells) + 1
    out = np.full((rows, cols), np.nan)
    for i, j, w in cells:
        out[i, j] = w
    return out


def _check_maps(driver, ref, layer: int, head: int | None) -> None:
    def want(kind):
        m = ref.maps[kind][layer].numpy()
        return m.mean(axis=0) if head is None else m[head]

    for box, kind in (("cross-heatmap", "cross"), ("enc-heatmap", "encoder_self"), ("dec-heatmap", "decoder_self")):
        np.testing.assert_allclose(_drawn(driver, box), want(kind), atol=TOL, rtol=0, err_msg=f"{kind} {layer} {head}")


def test_page_translates_in_the_browser(run, static_server, browser, capsys):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import Select, WebDriverWait

    assert main(["translate", "--checkpoint", str(run), "--beam", "1", *SENTENCES]) == 0
    expected = capsys.readouterr().out.strip().split("\n")
    translator = load_translator(run)
    wait = WebDriverWait(browser, 60)
    browser.get(f"{static_server}/index.html?text={quote(SENTENCES[0])}")  # translated on load
    wait.until(EC.visibility_of_element_located((By.CSS_SELECTOR, "#cross-heatmap rect.cell")))
    assert browser.find_element(By.ID, "text").get_attribute("value") == SENTENCES[0]
    assert browser.find_element(By.ID, "translation").text == expected[0]
    _check_maps(browser, explain(translator, SENTENCES[0], translator.options(beam=1)), 0, None)
    assert not browser.find_element(By.ID, "beam").is_displayed()  # greedy only: no beam control

    for k, text in enumerate(SENTENCES[1:], start=1):
        box = browser.find_element(By.ID, "text")
        box.clear()
        box.send_keys(text)
        drawn = browser.find_element(By.CSS_SELECTOR, "#cross-heatmap rect.cell")
        browser.find_element(By.ID, "translate").click()
        wait.until(EC.staleness_of(drawn))
        wait.until(EC.visibility_of_element_located((By.CSS_SELECTOR, "#cross-heatmap rect.cell")))
        assert browser.find_element(By.ID, "translation").text == expected[k]
        ref = explain(translator, text, translator.options(beam=1))
        _check_maps(browser, ref, 0, None)
        Select(browser.find_element(By.ID, "layer")).select_by_value("1")
        Select(browser.find_element(By.ID, "head")).select_by_value("1")
        _check_maps(browser, ref, 1, 1)
        Select(browser.find_element(By.ID, "layer")).select_by_value("0")
        Select(browser.find_element(By.ID, "head")).select_by_value("mean")
        step = browser.find_element(By.ID, "step-output").text.split()
        assert step == ref.tgt_tokens  # the step-through lists the produced tokens

    errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    # Network requests only (chrome:// pages of the blank tab and data:/blob: URLs are not): all to the server.
    internal = ("chrome", "chrome-untrusted", "data", "blob", "about")  # the browser's own pages, not the network
    urls = [u for u in _requested(browser) if urlsplit(u).scheme not in internal]
    assert any(u.endswith("/static/ort/ort-wasm-simd-threaded.wasm") for u in urls), urls  # the log sees them
    outside = [u for u in urls if urlsplit(u).netloc != urlsplit(static_server).netloc]
    assert not outside, outside


def test_the_page_opened_from_disk_says_how_to_serve_it(page, browser):
    """file:// cannot fetch the model: the export prints the command that serves the folder, and the page
    opened from disk says the same instead of "Failed to fetch"."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    assert f"serve it with: python -m http.server -d {page} 8000" in PRINTED["export"]
    browser.get((page / "index.html").as_uri())
    info = WebDriverWait(browser, 30).until(
        lambda d: "unavailable" in d.find_element(By.ID, "model-info").text and d.find_element(By.ID, "model-info")
    )
    assert "python -m http.server -d FOLDER 8000" in info.text


def test_folder_layout(page):
    index = (page / "index.html").read_text(encoding="utf-8")
    assert "static/source-onnx.js" in index and "static/source.js" not in index
    for name in ("ort.wasm.min.js", "ort-wasm-simd-threaded.wasm", "ort-wasm-simd-threaded.mjs"):
        assert (page / "static" / "ort" / name).is_file()
    assert {p.name for p in (page / "model").iterdir()} >= {"encoder_model.onnx", "config.json", "src_vocab.json"}
    config = json.loads((page / "model" / "config.json").read_text(encoding="utf-8"))
    assert "Tatoeba" in config["data_attribution"]  # the footer's credit: the tiny run learned from the corpus
    # The views are the server page's own files, byte for byte.
    static = Path(__file__).resolve().parents[2] / "src" / "attnlab" / "serve" / "static"
    for name in ("app.js", "heatmap.js", "positions.js", "style.css"):
        assert (page / "static" / name).read_bytes() == (static / name).read_bytes()


def test_runtime_files_sources(tmp_path, monkeypatch):
    """--runtime / $ATTNLAB_ORT_WEB name a folder (its dist/ or node_modules/ found too); a folder without the
    files, or no npm to fill the cache, is one line saying what to do."""
    from attnlab.export.web import runtime_files
    from attnlab.export.web.runtime_files import FILES

    dist = tmp_path / "pkg" / "node_modules" / "onnxruntime-web" / "dist"
    dist.mkdir(parents=True)
    for name in FILES:
        (dist / name).write_text("x")
    assert runtime_files(tmp_path / "pkg") == {name: dist / name for name in FILES}
    monkeypatch.setenv("ATTNLAB_ORT_WEB", str(dist))
    assert runtime_files()["ort.wasm.min.js"] == dist / "ort.wasm.min.js"
    with pytest.raises(ValueError, match="holds no onnxruntime-web dist files") as err:
        runtime_files(tmp_path)
    assert "\n" not in str(err.value)
    monkeypatch.delenv("ATTNLAB_ORT_WEB")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # an empty cache
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # and no npm
    with pytest.raises(ValueError, match=r"npm \(to fetch it\) is not installed; install Node.js") as err:
        runtime_files()
    assert "\n" not in str(err.value) and "--runtime DIR" in str(err.value)
