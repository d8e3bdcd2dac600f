"""Helpers for the web page's browser tests: Debian's chromium, headless, driven by Selenium
through the system chromedriver; screenshots into tests/artifacts/; axe-core injected."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "tests" / "artifacts"
AXE = Path(__file__).parent / "web" / "axe.min.js"
CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM = shutil.which("chromium")


def chromium() -> WebDriver:
    """A headless chromium (no sandbox of its own: tests may run as root in CI)."""
    options = webdriver.ChromeOptions()
    if CHROMIUM:
        options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--window-size=1280,900",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    return driver


def wait_for(driver: WebDriver, css: str, text: str = "", timeout: float = 30) -> WebElement:
    """The first element matching ``css`` (whose text contains ``text``), once there is one."""

    def found(d: WebDriver) -> WebElement | bool:
        for element in d.find_elements(By.CSS_SELECTOR, css):
            try:
                if text in element.text:
                    return element
            except Exception:
                continue
        return False

    result: WebElement = WebDriverWait(driver, timeout, poll_frequency=0.05).until(
        found, f"no {css!r} with {text!r}"
    )
    return result


def log_in(driver: WebDriver, port: int, token: str, accepted: bool = True) -> None:
    """Open the page and log in with ``token`` through its form; wait for the page (or, not
    ``accepted``, for the form's error)."""
    driver.get(f"http://127.0.0.1:{port}/")
    field = wait_for(driver, "#token")
    field.send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "#login-form button[type=submit]").click()
    wait_for(driver, "#view" if accepted else "#login-error")


def screenshot(driver: WebDriver, name: str) -> Path:
    """Save what the page shows as tests/artifacts/NAME.png."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def axe_violations(driver: WebDriver) -> list[dict[str, Any]]:
    """axe-core's violations on the page as it is (WCAG A/AA rules), injected for the test."""
    driver.execute_script(AXE.read_text("utf-8"))
    result = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa']}})"
        ".then(r => done(JSON.stringify(r.violations))).catch(e => done(JSON.stringify("
        "[{id: 'axe-error', help: String(e), nodes: []}])));"
    )
    violations: list[dict[str, Any]] = json.loads(result)
    return violations


def csp_violations(driver: WebDriver) -> list[str]:
    """Console messages of the page that report a Content-Security-Policy refusal."""
    return [
        entry["message"]
        for entry in driver.get_log("browser")
        if "Content Security Policy" in entry["message"]
    ]
