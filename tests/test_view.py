"""``persetrain view`` in a real browser: Debian's chromium, headless, driven by selenium through chromedriver.

One real meta-eval run of the embedded model (mcq-letter beside the odd-one-out baseline, four PrefEval
questions, the flip and blind probes) and one baseline run over the whole dev slice: the page is served by the
real command in its own process, opened, filtered, paged and searched, and what it shows is checked against the
run's own judgment records. The same page exported as one file is opened from disk and filtered the same way.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from persetrain.evaluation import EvaluationConfig, evaluate
from persetrain.evaluators.registry import SystemSpec
from persetrain.meta_eval import MetaEvalConfig, meta_evaluate
from persetrain.models import DEFAULT_MODEL

#: The embedded model, a server process and a browser: every test here is of the slow tier (docs/testing.md).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT / "data" / "prefeval" / "dev"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1600",
)


@pytest.fixture(scope="module")
def embedded_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("view") / "letter"
    config = MetaEvalConfig(
        data=str(DEV),
        out=str(out),
        systems=[SystemSpec("letter", "mcq-letter", DEFAULT_MODEL), SystemSpec("odd-one-out", "odd-one-out")],
        max_examples=4,
        probes=["flip", "blind"],
    )
    meta_evaluate(config)
    return out


@pytest.fixture(scope="module")
def baseline_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("view") / "baseline"
    evaluate(EvaluationConfig(data=str(DEV), out=str(out), systems=[SystemSpec("odd-one-out", "odd-one-out")]))
    return out


@pytest.fixture
def browser(tmp_path):
    options = Options()
    options.binary_location = shutil.which("chromium")
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    yield driver
    driver.quit()


@pytest.fixture
def served(embedded_run, baseline_run):
    """``persetrain view`` on both runs in its own process; the URL it prints."""
    process = subprocess.Popen(
        [sys.executable, "-m", "persetrain.cli", "view", str(embedded_run), str(baseline_run), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    for line in process.stdout:
        lines.append(line)
        found = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
        if found:
            break
    else:
        process.wait()
        pytest.fail("persetrain view printed no URL:\n" + "".join(lines))
    yield found.group(1)
    process.terminate()
    process.wait(timeout=30)


def records(run: Path, system: str) -> list[dict]:
    [path] = [p for p in (run / "judgments").glob("*.jsonl") if json.loads(p.open().readline())["system"] == system]
    return [json.loads(line) for line in path.read_text().splitlines()]


def until(driver, condition) -> None:
    """Wait for what the page shows to satisfy ``condition`` (the page re-renders as a filter applies)."""
    WebDriverWait(driver, 120, ignored_exceptions=(StaleElementReferenceException,)).until(lambda d: condition())


def shown_ids(driver) -> list[str]:
    return [a.get_attribute("data-id") for a in driver.find_elements(By.CSS_SELECTOR, "article.example")]


def count(driver) -> str:
    return driver.find_element(By.ID, "count").text


def test_records_hold_gold_correct_labels_and_probes(embedded_run):
    letter = records(embedded_run, "letter")
    assert (embedded_run / "judgments" / "letter.jsonl").is_file()
    metrics = json.loads((embedded_run / "metrics.json").read_text())["systems"]["letter"]["metrics"]
    assert sum(r["correct"] for r in letter) / len(letter) == pytest.approx(metrics["accuracy"])
    for r in letter:
        assert r["system"] == "letter" and r["evaluator"] == "mcq-letter" and r["spec"]["model"] == DEFAULT_MODEL
        assert r["gold_label"] == "ABCD"[r["gold"]]
        assert r["choice"] is None or r["choice_label"] == "ABCD"[r["choice"]]
        assert set(r["probes"]) == {"flip", "blind"}
        flip = r["probes"]["flip"]
        assert flip["changed"] == (flip["choice"] != r["choice"])
    report = (embedded_run / "report.md").read_text()
    assert "[view.html](view.html)" in report and (embedded_run / "view.html").is_file()
    if any(not r["correct"] for r in letter):
        assert "## Wrong examples" in report and "**letter**" in report


def test_view_page_filters_pages_and_searches(served, embedded_run, baseline_run, browser, tmp_path):
    letter = records(embedded_run, "letter")
    baseline = records(baseline_run, "odd-one-out")
    browser.get(served)
    until(browser, lambda: count(browser) == f"examples 1–20 of {len(baseline)}")  # both runs' examples, paged
    assert "letter" in browser.find_element(By.ID, "summary").text  # the metrics table of each run

    # Side by side: an example both runs judged shows each run's verdicts.
    first = letter[0]["example_id"]
    browser.find_element(By.ID, "f-q").send_keys(first)
    until(browser, lambda: shown_ids(browser) == [first])
    article = browser.find_element(By.CSS_SELECTOR, "article.example")
    assert len(article.find_elements(By.CSS_SELECTOR, ".run-verdicts")) == 2
    example = next(json.loads(x) for x in (embedded_run / "examples.jsonl").open() if json.loads(x)["id"] == first)
    assert example["preference"] in article.find_element(By.CSS_SELECTOR, ".person").text
    gold = article.find_elements(By.CSS_SELECTOR, "ol.candidates li.gold")
    assert len(gold) == 1 and example["options"][example["gold"]] in gold[0].text
    verdict = article.find_element(By.CSS_SELECTOR, "tr.verdict[data-system='letter']").text
    assert (letter[0]["choice_label"] or "—") in verdict and "flip:" in verdict and "blind:" in verdict
    browser.find_element(By.ID, "f-q").clear()
    browser.find_element(By.ID, "f-q").send_keys(" ")
    until(browser, lambda: count(browser) == f"examples 1–20 of {len(baseline)}")

    # Filter: one system, then wrong only for it.
    Select(browser.find_element(By.ID, "f-system")).select_by_value("letter/letter")
    until(browser, lambda: sorted(shown_ids(browser)) == sorted(r["example_id"] for r in letter))
    browser.find_element(By.ID, "f-wrong").click()
    wrong = sorted(r["example_id"] for r in letter if r["correct"] is False)
    until(browser, lambda: sorted(shown_ids(browser)) == wrong and count(browser).endswith(f"of {len(wrong)}"))
    browser.save_screenshot(str(tmp_path / "view.png"))
    assert (tmp_path / "view.png").stat().st_size > 0

    # Paging over the baseline's whole slice.
    Select(browser.find_element(By.ID, "f-system")).select_by_value("")
    browser.find_element(By.ID, "f-wrong").click()
    until(browser, lambda: count(browser) == f"examples 1–20 of {len(baseline)}")
    browser.find_element(By.ID, "next").click()
    until(browser, lambda: count(browser) == f"examples 21–40 of {len(baseline)}")
    judged = [r["example_id"] for r in letter]  # the first run's examples first, then the others' new ones
    order = judged + [r["example_id"] for r in baseline if r["example_id"] not in judged]
    assert shown_ids(browser) == order[20:40]


def test_exported_page_filters_offline(embedded_run, browser, tmp_path):
    out = tmp_path / "shared.html"
    result = subprocess.run(
        [sys.executable, "-m", "persetrain.cli", "view", str(embedded_run), "--export", str(out)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    page = out.read_text()
    assert "/static/" not in page and "http" not in page.split("<script", 1)[0]  # nothing fetched from elsewhere
    browser.get(out.as_uri())
    until(browser, lambda: count(browser) == "examples 1–4 of 4")
    browser.find_element(By.ID, "f-flipped").click()
    flipped = {
        r["example_id"]
        for system in ("letter", "odd-one-out")
        for r in records(embedded_run, system)
        if any(p["changed"] for p in r["probes"].values())
    }
    expected = f"examples 1–{len(flipped)} of {len(flipped)}" if flipped else "0 examples"
    until(browser, lambda: count(browser) == expected and set(shown_ids(browser)) == flipped)

    # The run's own view.html, as report.md links an example: opened on that example.
    first = records(embedded_run, "letter")[0]["example_id"]
    browser.get(f"{(embedded_run / 'view.html').as_uri()}#{first}")
    until(browser, lambda: shown_ids(browser) == [first])


def test_view_refuses_a_folder_that_is_no_run(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "persetrain.cli", "view", str(tmp_path)], capture_output=True, text=True
    )
    assert result.returncode == 2
    output = result.stdout + result.stderr
    assert f"{tmp_path}: is not a run directory" in output and "Traceback" not in output
