#!/usr/bin/python3
"""Opens a local page in headless Chromium and reports on it, through the DevTools protocol
(a WebSocket client of the standard library's own: nothing to install but the browser).

    cdp.py PAGE.html [--eval JS] [--screenshot PNG] [--width 1280] [--max-height 20000]
                     [--until SELECTOR] [--timeout 60]

Prints one JSON object: "errors" (uncaught exceptions, console.error/assert calls and error
log entries, as text), "network" (every request for something other than a file:, data: or
about: URL), "eval" (the value of the expression JS, evaluated once the page has loaded and
its script set body's data-rendered), "screenshot" ({"path", "bytes", "width", "height"}: the
whole page, width pixels wide, at most max-height tall, or down to the end of the section that
holds the element SELECTOR). Exits 0 when it could load the page
and say all that, 1 otherwise (the reason on stderr). Runs Chromium as the brief of the HTML
test asks: headless, no sandbox (root), no GPU, no first-run, background networking, component
updates or sync, a fresh profile removed at the end.
"""
import argparse
import base64
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                  "--remote-debugging-port=0", "--remote-allow-origins=*"]


class WebSocket:
    """Just enough of RFC 6455 for the DevTools protocol: text frames out (masked, as a client
    must), text frames in (fragmented or not), pings answered, close seen."""

    def __init__(self, url, timeout):
        m = re.match(r"ws://([^/:]+):(\d+)(/.*)", url)
        if not m:
            raise ValueError("not a ws:// URL: " + url)
        host, port, path = m.group(1), int(m.group(2)), m.group(3)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("closed during the WebSocket handshake")
            head += chunk
        head, self.buf = head.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError("WebSocket handshake refused: " + head.decode(errors="replace"))

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self.buf)))
            if not chunk:
                raise ConnectionError("WebSocket closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _send(self, opcode, payload):
        head = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def send(self, text):
        self._send(0x1, text.encode())

    def recv(self):
        parts = []
        while True:
            b0, b1 = self._read(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            data = self._read(n)
            if mask:
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            if opcode == 0x9:  # ping
                self._send(0xA, data)
                continue
            if opcode == 0x8:
                raise ConnectionError("WebSocket closed by the browser")
            if opcode in (0x1, 0x2, 0x0):
                parts.append(data)
                if b0 & 0x80:
                    return b"".join(parts).decode()


class Page:
    """One page target: commands by id, events kept as they come."""

    def __init__(self, ws_url, timeout):
        self.ws = WebSocket(ws_url, timeout)
        self.next_id = 0
        self.events = []

    def call(self, method, timeout=30, **params):
        self.next_id += 1
        mid = self.next_id
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)
        raise TimeoutError(f"{method}: no answer in {timeout} s")

    def wait_event(self, method, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for e in self.events:
                if e["method"] == method:
                    return e
            msg = json.loads(self.ws.recv())
            if "method" in msg:
                self.events.append(msg)
        raise TimeoutError(f"no {method} in {timeout} s")

    def evaluate(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError("evaluation failed: " + describe_exception(r["exceptionDetails"]))
        return r["result"].get("value")


def describe_exception(d):
    ex = d.get("exception") or {}
    return "%s (line %s, column %s)" % (ex.get("description") or d.get("text"),
                                        d.get("lineNumber"), d.get("columnNumber"))


def errors_of(events):
    out = []
    for e in events:
        m, p = e["method"], e.get("params", {})
        if m == "Runtime.exceptionThrown":
            out.append("exception: " + describe_exception(p["exceptionDetails"]))
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append("console.%s: %s" % (p["type"], " ".join(
                str(a.get("value", a.get("description", ""))) for a in p.get("args", []))))
        elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
            out.append("log: %s (%s)" % (p["entry"].get("text"), p["entry"].get("url", "")))
    return out


def start_browser(timeout):
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        raise FileNotFoundError("chromium is not installed")
    profile = tempfile.mkdtemp(prefix="ts-cdp-")
    proc = subprocess.Popen([exe, *CHROMIUM_FLAGS, "--user-data-dir=" + profile, "about:blank"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    end, port = time.monotonic() + timeout, None
    os.set_blocking(proc.stderr.fileno(), False)
    buf = b""
    while time.monotonic() < end and proc.poll() is None:
        chunk = proc.stderr.read() or b""
        buf += chunk
        m = re.search(rb"DevTools listening on ws://[^:]+:(\d+)/", buf)
        if m:
            port = int(m.group(1))
            break
        time.sleep(0.05)
    if not port:
        stop_browser(proc, profile)
        raise RuntimeError("chromium did not start its DevTools endpoint in %d s: %s" % (
            timeout, buf.decode(errors="replace")[-600:]))
    return proc, profile, port


def stop_browser(proc, profile):
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(5)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    shutil.rmtree(profile, ignore_errors=True)


def png_size(data):
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", data[16:24])


def run(args):
    proc, profile, port = start_browser(args.timeout)
    try:
        end = time.monotonic() + args.timeout
        targets = []
        while time.monotonic() < end:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                targets = [t for t in json.load(r) if t.get("type") == "page"]
            if targets:
                break
            time.sleep(0.1)
        if not targets:
            raise RuntimeError("no page target in the browser")
        page = Page(targets[0]["webSocketDebuggerUrl"], args.timeout)
        for domain in ("Runtime", "Log", "Page", "Network"):
            page.call(domain + ".enable")
        width = args.width
        page.call("Emulation.setDeviceMetricsOverride", width=width, height=900,
                  deviceScaleFactor=1, mobile=False)
        url = "file://" + os.path.abspath(args.page)
        nav = page.call("Page.navigate", url=url)
        if nav.get("errorText"):
            raise RuntimeError("navigation failed: " + nav["errorText"])
        page.wait_event("Page.loadEventFired", args.timeout)
        # Inline scripts have run by the load event: a page that did not mark itself drawn
        # within a few seconds of it never will.
        rendered, drawn_by = None, min(end, time.monotonic() + 5)
        while time.monotonic() < drawn_by:
            rendered = page.evaluate("document.body && document.body.dataset.rendered")
            if rendered == "1":
                break
            time.sleep(0.1)
        out = {"rendered": rendered == "1"}
        out["eval"] = page.evaluate(args.eval) if args.eval else None
        if args.screenshot:
            height = page.evaluate(
                "(() => { const e = document.querySelector(%s); const s = e && (e.closest('section') || e);"
                " return s ? Math.ceil(s.getBoundingClientRect().bottom + window.scrollY + 16)"
                " : document.documentElement.scrollHeight; })()" % json.dumps(args.until)
                if args.until else "document.documentElement.scrollHeight")
            height = max(1, min(int(height or 900), args.max_height))
            page.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                      deviceScaleFactor=1, mobile=False)
            shot = page.call("Page.captureScreenshot", timeout=60, format="png",
                             captureBeyondViewport=True,
                             clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1})
            data = base64.b64decode(shot["data"])
            with open(args.screenshot, "wb") as f:
                f.write(data)
            size = png_size(data)
            out["screenshot"] = {"path": args.screenshot, "bytes": len(data),
                                 "width": size and size[0], "height": size and size[1]}
        # Events that came with the last answers too.
        time.sleep(0.2)
        page.call("Runtime.evaluate", expression="0")
        out["errors"] = errors_of(page.events)
        out["network"] = sorted({e["params"]["request"]["url"] for e in page.events
                                 if e["method"] == "Network.requestWillBeSent" and
                                 not re.match(r"(file|data|about):", e["params"]["request"]["url"])})
        return out
    finally:
        stop_browser(proc, profile)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("page")
    ap.add_argument("--eval")
    ap.add_argument("--screenshot")
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--max-height", type=int, default=20000)
    ap.add_argument("--until", help="the screenshot ends with the section of this element")
    ap.add_argument("--timeout", type=float, default=60)
    args = ap.parse_args()
    try:
        out = run(args)
    except Exception as e:  # the test shows why, whatever it was
        print("cdp.py: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1
    json.dump(out, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
