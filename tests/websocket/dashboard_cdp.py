"""The dashboard page in headless Chromium, driven through the DevTools protocol.

Run by `tests/websocket/dashboard.rs` with the daemon serving the page at DASHBOARD_URL
and the model scripted for one turn with one approval. Every wait is bounded and waits
on an event: Chromium's announcement, the page's load, the DOM changing (a
MutationObserver), never on time. Env: DASHBOARD_URL, CHROMIUM,
PROFILE (a fresh user data dir), WORKDIR (the folder the session is opened in; not the
daemon's $HOME), SCREENSHOT (optional: where to save one).
"""

import asyncio
import base64
import json
import os
import sys

from websockets.asyncio.client import connect

WAIT = 30


async def start_chromium():
    """Starts headless Chromium; returns it and its browser's DevTools address, which
    it announces on stderr once it listens."""
    args = [
        os.environ["CHROMIUM"], "--headless", "--no-sandbox", "--disable-gpu",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--no-first-run", "--no-default-browser-check", f"--user-data-dir={os.environ['PROFILE']}",
        "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1", "about:blank",
    ]
    proc = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    said = []

    async def announced():
        while True:
            line = await proc.stderr.readline()
            if not line:
                raise RuntimeError("chromium exited before listening:\n" + "".join(said))
            text = line.decode(errors="replace")
            said.append(text)
            if text.startswith("DevTools listening on "):
                return text.split(" on ", 1)[1].strip()

    browser = await asyncio.wait_for(announced(), WAIT)

    async def drain():
        # Chromium must never block on a full stderr pipe.
        while await proc.stderr.readline():
            pass

    return proc, browser, asyncio.ensure_future(drain())


class Page:
    """One DevTools session: commands with ids, events kept until waited for."""

    def __init__(self, ws):
        self.ws = ws
        self.next = 1
        self.events = []
        self.session = None

    async def receive(self):
        message = json.loads(await asyncio.wait_for(self.ws.recv(), WAIT))
        if "id" not in message:
            self.events.append(message)
        return message

    async def send(self, method, params=None, session=None):
        mid = self.next
        self.next += 1
        command = {"id": mid, "method": method, "params": params or {}}
        if session:
            command["sessionId"] = session
        await self.ws.send(json.dumps(command))
        while True:
            message = await self.receive()
            if message.get("id") == mid:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    async def event(self, method):
        while True:
            for i, message in enumerate(self.events):
                if message.get("method") == method:
                    return self.events.pop(i)
            await self.receive()

    async def eval(self, expression):
        result = await self.send("Runtime.evaluate", {"expression": expression, "awaitPromise": True, "returnByValue": True}, self.session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait(self, condition, what):
        """Resolves once `condition` (a JS expression) holds, watching the DOM change."""
        js = f"""new Promise((resolve) => {{
            const ok = () => {{ try {{ return !!({condition}); }} catch (e) {{ return false; }} }};
            if (ok()) return resolve(true);
            const o = new MutationObserver(() => {{ if (ok()) {{ o.disconnect(); resolve(true); }} }});
            o.observe(document, {{subtree: true, childList: true, attributes: true, characterData: true}});
        }})"""
        try:
            await asyncio.wait_for(self.eval(js), WAIT)
        except asyncio.TimeoutError:
            html = await self.eval("document.body.outerHTML")
            raise AssertionError(f"timed out waiting for {what}; page:\n{html}")


async def main():
    proc, browser, drain = await start_chromium()
    try:
        async with connect(browser, max_size=None) as ws:
            page = Page(ws)
            target = await page.send("Target.createTarget", {"url": "about:blank"})
            attached = await page.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})
            page.session = attached["sessionId"]
            await page.send("Page.enable", None, page.session)
            await page.send("Runtime.enable", None, page.session)
            # Navigate, then wait for the load: evaluating while the page is replaced
            # would run in a context about to be destroyed.
            await page.send("Page.navigate", {"url": os.environ["DASHBOARD_URL"]}, page.session)
            await page.event("Page.loadEventFired")
            await page.wait("document.body && document.body.dataset.connection && document.body.dataset.connection.startsWith('jucode')", "the page to connect")
            workdir = os.environ["WORKDIR"]
            # "New" asks for a folder: a relative one is refused on the page.
            await page.eval("document.getElementById('new-session').click()")
            await page.wait("document.getElementById('new-dialog').open", "the folder dialog")
            await page.eval("document.getElementById('new-cwd').value = 'proj'; document.getElementById('new-form').requestSubmit()")
            await page.wait("document.getElementById('new-error').textContent.includes('absolute')", "the relative folder refused")
            await page.eval(f"document.getElementById('new-cwd').value = {json.dumps(workdir)}; document.getElementById('new-form').requestSubmit()")
            await page.wait("document.getElementById('title').dataset.session", "a session")
            sid = await page.eval("document.getElementById('title').dataset.session")
            title = await page.eval("document.getElementById('title').textContent")
            assert title == "(new session)", f"the pane title is not the raw id: {title!r}"
            row = f"document.querySelector('#sessions li[data-session=\"{sid}\"]')"
            await page.wait(row, "the session in the list")
            assert await page.eval(f"{row}.querySelector('.cwd').textContent") == workdir
            await page.eval("document.getElementById('prompt').value = 'make a file'; document.getElementById('composer').requestSubmit()")
            await page.wait("document.querySelector('.msg.user')", "the user message")
            await page.wait("document.querySelector('.approval button[data-option=\"allow_once\"]')", "the approval")
            await page.eval("document.querySelector('.approval button[data-option=\"allow_once\"]').click()")
            await page.wait("document.querySelector('.tool[data-status=\"completed\"]')", "the tool card completed")
            kind = await page.eval("document.querySelector('.tool .title').textContent")
            assert kind.startswith("command · "), f"the closing update kept the kind: {kind!r}"
            await page.wait("[...document.querySelectorAll('.msg.agent')].some(m => m.textContent.includes('Finished'))", "the reply")
            await page.wait("document.getElementById('state').dataset.state === 'idle'", "idle")
            assert await page.eval("document.querySelectorAll('.approval').length") == 0
            # The row and the pane show the title; the row its state once.
            await page.wait(f"{row}.querySelector('strong').textContent === 'make a file'", "the title in the list")
            await page.wait("document.getElementById('title').textContent === 'make a file'", "the title on the pane")
            meta = await page.eval(f"{row}.querySelector('.meta').textContent")
            assert meta.count("ready") == 1 and "saved" not in meta, f"the state once: {meta!r}"
            await page.wait("document.getElementById('usage').textContent.startsWith('context')", "the usage")

            # A second "New" offers the folder just used.
            await page.eval("document.getElementById('new-session').click()")
            recent = f"document.querySelector('#recent-dirs button[data-cwd={json.dumps(json.dumps(workdir))[1:-1]}]')"
            await page.wait(recent, "the recent folder offered")
            await page.eval(f"{recent}.click()")
            await page.wait(f"document.getElementById('title').dataset.session && document.getElementById('title').dataset.session !== '{sid}'", "a second session")
            second = await page.eval("document.getElementById('title').dataset.session")
            await page.wait(f"document.querySelector('#sessions li[data-session=\"{second}\"] .cwd')", "the second session in the list")
            assert await page.eval(f"document.querySelector('#sessions li[data-session=\"{second}\"] .cwd').textContent") == workdir

            # Back to the first one: its view is as it was.
            await page.eval(f"{row}.click()")
            await page.wait(f"document.getElementById('title').dataset.session === '{sid}'", "the first session again")
            await page.wait("document.querySelector('.session-view:not([hidden]) .msg.user')", "its stream")
            await page.wait("document.getElementById('usage').textContent.startsWith('context')", "its usage")

            # A fresh page (a new connection) opening it from the list: its history,
            # title, state and usage.
            await page.send("Page.navigate", {"url": os.environ["DASHBOARD_URL"]}, page.session)
            await page.event("Page.loadEventFired")
            await page.wait("document.body && document.body.dataset.connection && document.body.dataset.connection.startsWith('jucode')", "the page to connect again")
            await page.wait(row, "the session in the fresh list")
            await page.eval(f"{row}.click()")
            await page.wait(f"document.getElementById('title').dataset.session === '{sid}'", "the session opened from the list")
            await page.wait("document.getElementById('title').textContent === 'make a file'", "its title")
            await page.wait("document.querySelector('.session-view:not([hidden]) .msg.user')", "its history")
            await page.wait("document.querySelector('.session-view:not([hidden]) .tool[data-status=\"completed\"]')", "its tool card")
            replayed = await page.eval("document.querySelector('.session-view:not([hidden]) .tool .title').textContent")
            assert replayed == "command · echo dash > dash.txt", f"a replayed card is titled as the live one: {replayed!r}"
            await page.wait("document.getElementById('state').dataset.state === 'idle'", "its state")
            await page.wait("document.getElementById('usage').textContent.startsWith('context')", "its usage")
            if os.environ.get("SCREENSHOT"):
                shot = await page.send("Page.captureScreenshot", {"format": "png"}, page.session)
                with open(os.environ["SCREENSHOT"], "wb") as f:
                    f.write(base64.b64decode(shot["data"]))
    finally:
        proc.kill()
        await proc.wait()
        drain.cancel()
    print("PASS dashboard")


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
