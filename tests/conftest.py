"""Suite-wide fixtures (`one_thread`, the headless Chromium `driver`), and the CI rule: under CI=true
nothing skips.

Every skip in this suite is a missing resource: Chromium and chromedriver for the browser tests, the
fra-eng corpus for training and data tests, an optional package of `[dev]` (transformers, sentencepiece,
ctranslate2, schemathesis) for the modules and conftests that `pytest.importorskip` it at import time. On a
developer's laptop skipping them is a convenience; on CI it would hide that whole parts of the suite never
ran, so there a skip is turned into a failure that names what was missing, both inside a test
(`pytest_runtest_makereport`) and while collecting a module or folder (`pytest_make_collect_report`; a
failed collection stops the run, as any collection error does). xfail is not a skip and is left alone.

A test that cannot run on CI by nature may skip there only under a rule named in `ALLOWED_CI_SKIPS`, with
a reason that starts with the rule's name and a colon (`pytest.skip("no-procfs: ...")`).
"""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

# int8 runs the per-row kernel on every machine, so that its tests test it (without int8 dot products
# `prepare_for_inference` would pick fbgemm's): a test of that choice removes this (monkeypatch.delenv).
os.environ.setdefault("ATTNLAB_INT8_KERNEL", "int_mm")
CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


# rule name -> where it applies; a skip reason "NAME: ..." with a name listed here stays a skip under CI=true
ALLOWED_CI_SKIPS: dict[str, str] = {
    "no-procfs": "a host without /proc/cpuinfo (not Linux): the CPU-feature probe has nothing to read",
    "inductor-compile": "torch.compile's inductor backend generating C++ for a model takes about 5 minutes on 2 "
    "cores, past the suite's budget; its graph capture and autograd run in the suite under 'aot_eager'",
}
FIX = "Install what is missing (pip install -e '.[dev]'; .ci/run installs Chromium; set ATTNLAB_DATA to fra-eng.zip)."


def _skip_reason(longrepr) -> str:
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


def _allowed(reason: str) -> bool:
    return reason.split(":", 1)[0].strip() in ALLOWED_CI_SKIPS


class CISkipRule:
    """Registered as a plugin, not written as conftest hooks: conftest hooks are path-scoped, and a folder
    whose own conftest.py skips while importing is collected before that scope reaches it."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if report.skipped and not hasattr(report, "wasxfail"):
            reason = _skip_reason(report.longrepr)
            if not _allowed(reason):
                report.outcome = "failed"
                report.longrepr = f"skipped under CI=true, which runs everything: {reason}. {FIX}"

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector):
        outcome = yield
        report = outcome.get_result()
        if report.skipped:
            reason = _skip_reason(report.longrepr)
            if not _allowed(reason):
                report.outcome = "failed"
                report.longrepr = (
                    f"{collector.nodeid or collector.path} skipped while collecting under CI=true, "
                    f"which runs everything: {reason}. {FIX}"
                )


def pytest_configure(config):
    if CI:
        config.pluginmanager.register(CISkipRule(), "attnlab-ci-skip-rule")
    # A benchmark script a test starts writes its record here, never over the measured benchmarks/results/.
    if not os.environ.get("ATTNLAB_RESULTS"):
        os.environ["ATTNLAB_RESULTS"] = config._attnlab_results = tempfile.mkdtemp(prefix="attnlab-results-")


def pytest_unconfigure(config):
    folder = getattr(config, "_attnlab_results", None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop("ATTNLAB_RESULTS", None)


# What a skip lacked, told by its reason: (words in the reason, what was missing, how to give it).
MISSING = (
    (
        "ATTNLAB_DATA",
        "the English–French corpus",
        "set ATTNLAB_DATA=PATH/fra-eng.zip (`make test` finds ../shared/data/fra-eng.zip itself; "
        "docs/data.md says where the corpus comes from)",
    ),
    ("chromium", "Chromium", "apt-get install chromium chromium-driver (.ci/run does)"),
)


def pytest_terminal_summary(terminalreporter):
    """Off CI a skip is a convenience, so the summary says how many tests did not run and what to give them."""
    reasons = [_skip_reason(r.longrepr) for r in terminalreporter.stats.get("skipped", [])]
    for words, what, fix in MISSING:
        n = sum(words.lower() in reason.lower() for reason in reasons)
        if n:
            terminalreporter.write_line(f"{n} test(s) skipped for want of {what}: {fix}.", yellow=True)


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for tiny models: they gain nothing from intra-op threads, and on a shared 2-core
    machine two OpenMP threads fighting other processes made them ~9-15x slower (measured)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def c_kernels(c_compiler):
    """attnlab's C kernels built here; skips where no C compiler is found (a failure under CI=true), and
    fails, on CI or off it, where a compiler is found but the kernel does not build: a skip would hide it."""
    from attnlab.kernels import loader as native

    if native.load("few_queries") is None:
        pytest.fail(f"a C compiler is here, yet: {native.status('few_queries')}")


@pytest.fixture
def c_compiler():
    """A C compiler that runs (the kernels are built with it); skips where there is none (a failure under CI=true)."""
    from attnlab.kernels import loader as native

    if native.cached_library("few_queries") is None:  # None only where no compiler answers
        pytest.skip(f"needs a C compiler for attnlab's C kernels: {native.status('few_queries')} (.ci/run installs it)")


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    """One headless Chromium (selenium) per test module, keeping its console for the no-errors checks.
    Skips where Debian's chromium + chromium-driver are missing (a failure under CI=true)."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip(
            "needs /usr/bin/chromium and /usr/bin/chromedriver "
            "(apt-get install chromium chromium-driver; CI's .ci/run installs them)"
        )
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
        "--hide-scrollbars",
        "--window-size=1000,800",  # the notebook views' size; the explorer's tests set their own viewport
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # console messages, for the no-errors checks
    d = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
    yield d
    d.quit()


@pytest.fixture
def until_js(driver):
    """`until_js(script, condition, *args)`: the value of `script` (JavaScript returning a value; `args` are its
    `arguments`) once `condition(value)` holds, polled for up to `timeout` seconds. A page draws after
    `driver.get` returns (on a busy machine the old page may still be the one shown), so a count read at
    once passes or fails with timing."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    def wait(script: str, condition, *args, timeout: float = 60.0):
        seen: list = []

        def ready(d):
            seen[:] = [d.execute_script(script, *args)]
            return condition(seen[0])

        try:
            WebDriverWait(driver, timeout, poll_frequency=0.1).until(ready)
        except TimeoutException:
            raise AssertionError(f"after {timeout:.0f} s the page still gave {seen[0] if seen else None!r}") from None
        return seen[0]

    return wait
