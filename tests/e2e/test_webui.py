"""The web chat page, end to end: the real `splash serve` on the real model, driven in headless
Chromium (Debian's chromium + chromium-driver) through Selenium.

Environment: SPLASH_BIN (default <repo>/build/splash) and SPLASH_TEST_MODEL (the GGUF; every
test here is skipped when it is unset), used by conftest.py's server fixtures; SPLASH_CHROMIUM
and SPLASH_CHROMEDRIVER override the browser and driver (default /usr/bin/chromium and
/usr/bin/chromedriver, from Debian's chromium and chromium-driver packages).
Artifacts: tests/e2e/artifacts/webui.png (light) and webui-dark.png, screenshots of a
finished conversation.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("SPLASH_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("SPLASH_CHROMEDRIVER", "/usr/bin/chromedriver")
ARTIFACTS = REPO / "tests" / "e2e" / "artifacts"
ANSWER_TIMEOUT_S = 180
MAX_TOKENS = 256  # what the page is set to send as max_tokens
LONG_MAX_TOKENS = 1024  # the same for the answer that is stopped


def http_get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as res:
            return res.status, res.headers.get("Content-Type", ""), res.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read()


@pytest.fixture(scope="module")
def server(splash_server_module):
    return splash_server_module()


@pytest.fixture(scope="module")
def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("selenium is not installed: scripts/setup.sh --python installs requirements-test.txt")

    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            pytest.fail(f"{path} not found: install Debian's chromium and chromium-driver (scripts/setup.sh)")
    profile = tempfile.TemporaryDirectory(prefix="splash-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,900", "--no-first-run", "--disable-extensions",
                f"--user-data-dir={profile.name}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        profile.cleanup()


@pytest.fixture
def page(server, browser):
    """The chat page with an empty conversation, greedy sampling and max_tokens MAX_TOKENS."""
    browser.get(server + "/")
    browser.execute_script(
        "localStorage.clear();"
        "localStorage.setItem('splash.settings.v1', JSON.stringify(arguments[0]));",
        {"system": "", "maxTokens": MAX_TOKENS, "temperature": "0"})
    browser.refresh()
    wait(browser, 30, lambda d: d.execute_script("return !!window.splash"), "the page's script to load")
    wait(browser, 30, lambda d: text(d, "#model-name") not in ("", "…"), "the model name")
    return browser


def wait(driver, timeout: float, condition, what: str):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait
    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.05).until(condition)
    except TimeoutException:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "webui-failure.png"))
        pytest.fail(f"timed out after {timeout} s waiting for {what}; page text:\n"
                    f"{driver.find_element('tag name', 'body').text[-2000:]}")


def text(driver, selector: str) -> str:
    found = driver.find_elements("css selector", selector)
    return found[-1].text.strip() if found else ""


def visible(driver, selector: str) -> bool:
    found = driver.find_elements("css selector", selector)
    return bool(found) and found[0].is_displayed()


def send_message(driver, message: str) -> None:
    box = driver.find_element("id", "input")
    box.clear()
    box.send_keys(message)
    driver.find_element("id", "send").click()
    wait(driver, 10, lambda d: len(d.find_elements("css selector", ".msg.assistant")) >= 1,
         "the reply to appear")


def wait_for_answer(driver) -> None:
    wait(driver, ANSWER_TIMEOUT_S,
         lambda d: visible(d, "#send") and "tok/s" in text(d, ".msg.assistant .stats"),
         "the streamed answer to finish with a tokens/s label")


def conversation(driver) -> list[tuple[str, str]]:
    return [(el.get_attribute("class"), el.find_element("css selector", ".body").text)
            for el in driver.find_elements("css selector", "#messages .msg")]


def severe_console_errors(driver) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


# --- serving the page -------------------------------------------------------------------

def test_page_and_vendored_libraries_are_served(server):
    status, ctype, body = http_get(server + "/")
    assert status == 200 and ctype.startswith("text/html"), (status, ctype)
    assert b"<title>splash</title>" in body
    for path, kind in (("/app.js", "javascript"), ("/style.css", "text/css"),
                       ("/vendor/marked.min.js", "javascript"), ("/vendor/highlight.min.js", "javascript"),
                       ("/vendor/purify.min.js", "javascript"), ("/vendor/hljs-dark.css", "text/css")):
        status, ctype, body = http_get(server + path)
        assert status == 200 and kind in ctype and body, (path, status, ctype)
    assert http_get(server + "/no-such-file.js")[0] == 404


def test_no_webui_turns_the_page_off(splash_server):
    url = splash_server("--no-webui")
    assert http_get(url + "/")[0] == 404
    assert http_get(url + "/app.js")[0] == 404
    status, _, body = http_get(url + "/v1/models")  # the API itself stays on
    assert status == 200 and json.loads(body)["data"], body


# --- the page in a browser --------------------------------------------------------------

def test_model_output_is_sanitized(page):
    """Raw HTML in model output is shown as text, never interpreted; only http(s) links survive."""
    result = page.execute_script("""
        const html = window.splash.renderMarkdown(arguments[0]);
        const t = document.createElement("template");
        t.innerHTML = html;
        const all = [...t.content.querySelectorAll("*")];
        return {
          html,
          text: t.content.textContent,
          tags: [...new Set(all.map((e) => e.tagName.toLowerCase()))],
          handlers: all.flatMap((e) => [...e.attributes].map((a) => a.name)).filter((n) => n.startsWith("on")),
          hrefs: [...t.content.querySelectorAll("[href],[src]")].map((e) => e.getAttribute("href") || e.getAttribute("src")),
          rels: [...t.content.querySelectorAll("a")].map((e) => e.rel),
        };""",
        "# Title\n\n<script>alert(1)</script> <img src=x onerror=alert(1)> <b>raw</b>\n\n"
        "<div onclick=alert(1)>block html</div>\n\n"
        "[bad](javascript:alert(1)) [good](https://example.com/a?b=1&c=2) ![pic](https://example.com/p.png)\n\n"
        "```python\ndef f():\n    return '<tag>'\n```\n")
    assert "script" not in result["tags"] and "img" not in result["tags"] and "b" not in result["tags"], result
    assert not result["handlers"], result
    assert result["hrefs"] == ["https://example.com/a?b=1&c=2", "https://example.com/p.png"], result
    assert all(rel == "noopener noreferrer nofollow" for rel in result["rels"]), result
    for shown in ("<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "<b>raw</b>",
                  "<div onclick=alert(1)>block html</div>", "return '<tag>'"):
        assert shown in result["text"], (shown, result["text"])
    assert "h1" in result["tags"] and "hljs-keyword" in result["html"], result


def test_chat_streams_renders_persists_and_screenshots(page):
    send_message(page, "Write a Python function that reverses a string, in a code block.")
    wait_for_answer(page)
    reply = page.find_element("css selector", ".msg.assistant .body").text
    stats = text(page, ".msg.assistant .stats")
    assert reply.strip(), "empty assistant message"
    assert not text(page, ".msg.assistant .error"), text(page, ".msg.assistant .error")
    assert "tok/s" in stats and "token" in stats, stats
    assert not severe_console_errors(page)

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.save_screenshot(str(ARTIFACTS / "webui.png"))
    page.execute_cdp_cmd("Emulation.setEmulatedMedia",
                         {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    page.save_screenshot(str(ARTIFACTS / "webui-dark.png"))
    page.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})

    before = conversation(page)
    assert [cls for cls, _ in before] == ["msg user", "msg assistant"], before
    page.refresh()
    wait(page, 30, lambda d: len(d.find_elements("css selector", "#messages .msg")) == 2,
         "the conversation to be restored after reload")
    assert conversation(page) == before
    assert text(page, ".msg.assistant .stats") == stats

    page.find_element("id", "new-chat").click()
    assert conversation(page) == []
    page.refresh()
    wait(page, 30, lambda d: d.execute_script("return !!window.splash"), "the page to reload")
    assert conversation(page) == [], "new chat did not clear the stored conversation"


def test_stop_button_ends_a_long_answer(page, server):
    # Room for a long answer, so that it is still streaming when Stop is clicked even on a fast
    # machine; set through the settings panel, which also checks that panel.
    page.find_element("id", "settings-toggle").click()
    max_tokens = page.find_element("id", "max-tokens")
    max_tokens.clear()
    max_tokens.send_keys(str(LONG_MAX_TOKENS))
    page.find_element("id", "settings-toggle").click()
    assert page.execute_script("return JSON.parse(localStorage.getItem('splash.settings.v1')).maxTokens") \
        == LONG_MAX_TOKENS
    generated_before = json.loads(http_get(server + "/status")[2])["tokens_processed"]["generated"]
    send_message(page, "Write a long, detailed essay about the history of computing, "
                       "from the abacus to modern GPUs, with many sections.")
    wait(page, ANSWER_TIMEOUT_S, lambda d: visible(d, "#stop") and text(d, ".msg.assistant .body"),
         "the first streamed tokens")
    page.find_element("id", "stop").click()
    wait(page, 10, lambda d: visible(d, "#send") and not visible(d, "#stop"), "the page to leave streaming")
    stats = text(page, ".msg.assistant .stats")
    assert "stopped" in stats, stats
    tokens = int(stats.split(" token")[0])
    assert 0 < tokens < LONG_MAX_TOKENS, stats
    reply = text(page, ".msg.assistant .body")
    time.sleep(1.0)
    assert text(page, ".msg.assistant .body") == reply, "the reply kept growing after stop"
    assert not text(page, ".msg.assistant .error")
    # Closing the stream cancelled the generation on the server, well before max_tokens.
    deadline = time.monotonic() + 10
    while (status := json.loads(http_get(server + "/status")[2]))["requests_running"]:
        assert time.monotonic() < deadline, f"the stopped request is still running: {status}"
        time.sleep(0.1)
    assert status["tokens_processed"]["generated"] - generated_before < LONG_MAX_TOKENS, status
    # The server answers the next request.
    send_message(page, "Say hi.")
    wait(page, ANSWER_TIMEOUT_S,
         lambda d: len(d.find_elements("css selector", ".msg.assistant")) == 2 and visible(d, "#send")
         and "tok/s" in text(d, ".msg.assistant .stats"),
         "an answer after the stopped one")
