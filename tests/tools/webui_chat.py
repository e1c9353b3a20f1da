"""One chat in Open WebUI through a real browser, as a person has it: Debian's headless Chromium (driven by
Playwright) opens the sign-in page, signs in, picks a model, types a message, presses Enter and reads the answer
in the page; a screenshot is kept.

The fleet lab's browser test (molecule/fleet/tests/test_webui.py) calls chat(); run it against `make demo`'s web UI:

    .venv/bin/python tests/tools/webui_chat.py --url http://172.30.78.10:3000 --email admin@demo.example \\
        --password-file inventories/local/.secrets/webui_admin_password --model smollm2 \\
        --message "What is the capital of Japan?" --screenshot tests/output/webui/demo.png

It prints the answer and exits 1 when the page shows an error or no answer."""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from typing import Any, Dict, List

from playwright import sync_api   # requirements.txt; a missing package must fail, not skip

CHROMIUM = "/usr/lib/chromium/chromium"   # Debian's package (make molecule installs it); Playwright downloads none here


def _close_release_notes(page: Any) -> None:
    """An admin's first visit shows the release notes over the page: close them when they come."""
    try:
        page.get_by_text("Okay, Let's Go!").first.click(timeout=8_000)
    except sync_api.TimeoutError:
        pass


def chat(url: str, email: str, password: str, model: str, message: str, screenshot: pathlib.Path,
         answer_timeout_s: float = 180) -> Dict[str, Any]:
    """{text, error, frames}: the answer's text in the page, the error box's text when the page shows one instead,
    and the socket.io frames the page received (Open WebUI streams the answer over its WebSocket)."""
    if not pathlib.Path(CHROMIUM).exists():
        raise RuntimeError(f"{CHROMIUM} is missing: install Debian's chromium (tests/host-packages.sh chromium)")
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    frames: List[str] = []
    text, error = "", ""
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 860})
        page.on("websocket", lambda ws: ws.on("framereceived", lambda f: frames.append(f if isinstance(f, str) else "")))
        try:
            page.goto(url.rstrip("/") + "/auth", wait_until="networkidle")
            page.fill("input[type=email]", email)
            page.fill("input[type=password]", password)
            page.click("button[type=submit]")
            page.wait_for_url(url.rstrip("/") + "/", timeout=60_000)
            page.wait_for_selector("#chat-input", timeout=60_000)
            _close_release_notes(page)
            page.click("#model-selector-model-button")
            page.locator(f'[data-value="{model}"]').first.click()
            if model not in page.inner_text("#model-selector-model-button"):
                raise RuntimeError(f"the model selector does not show {model}")
            page.click("#chat-input")
            page.keyboard.type(message)
            page.keyboard.press("Enter")
            answer = page.locator("#response-content-container").last
            answer.wait_for(timeout=answer_timeout_s * 1000)
            deadline = time.monotonic() + answer_timeout_s
            settled = 0
            while time.monotonic() < deadline:
                # an answer is rendered as markdown (.markdown-prose); a request the server refused shows its error
                # text in a grey note in the same place, with no markdown (Open WebUI 0.12's ResponseMessage)
                prose = answer.locator(".markdown-prose")
                text = prose.first.inner_text().strip() if prose.count() else ""
                whole = answer.inner_text().strip()
                error = whole if whole and not prose.count() else ""
                # while the answer streams, the input shows a Stop button (MessageInput.svelte); with the prompt empty
                # afterwards it shows the voice button, not #send-message-button. Done: no Stop twice in a row.
                settled = settled + 1 if not page.locator("button[aria-label='Stop']").count() and (text or error) else 0
                if settled >= 2:
                    break
                page.wait_for_timeout(500)
            page.screenshot(path=str(screenshot), full_page=False)
        except Exception:
            page.screenshot(path=str(screenshot.with_name(screenshot.stem + "-failure.png")))
            screenshot.with_name(screenshot.stem + "-failure.html").write_text(page.content())
            raise
        finally:
            browser.close()
    return {"text": text, "error": error, "frames": frames}


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--url", required=True, help="the web UI's address, e.g. http://172.30.78.10:3000")
    parser.add_argument("--email", required=True)
    parser.add_argument("--password-file", required=True, type=pathlib.Path)
    parser.add_argument("--model", required=True, help="the served model name to pick")
    parser.add_argument("--message", default="What is the capital of Japan?")
    parser.add_argument("--screenshot", default=pathlib.Path("tests/output/webui/chat.png"), type=pathlib.Path)
    args = parser.parse_args(argv)
    got = chat(args.url, args.email, args.password_file.read_text().strip(), args.model, args.message, args.screenshot)
    print(json.dumps({"model": args.model, "answer": got["text"], "error": got["error"], "screenshot": str(args.screenshot)},
                     ensure_ascii=False))
    return 0 if got["text"] and not got["error"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
