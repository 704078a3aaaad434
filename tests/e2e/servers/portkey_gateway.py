#!/usr/bin/python3
"""Portkey's AI gateway (`@portkey-ai/gateway` from npm, Node) in front of the reference
server, for the e2e test: an OpenAI-compatible gateway that calls its upstream over a pool of
keep-alive HTTP/1.1 connections (Node's fetch, undici).

Starts the upstream (`refserver`) and the gateway (`node .../start-server.js --headless`) as its
children, prints `trace pid N` (the gateway: the upstream is not traced) and then
`listening on 127.0.0.1:PORT`, and stops both on SIGTERM or SIGINT. A client routes a request to
the upstream with the headers `--print-headers` prints (x-portkey-provider: openai,
x-portkey-custom-host: the upstream's /v1), one per line.

Usage: portkey_gateway.py PORT --modules DIR/node_modules --upstream PATH/refserver
       [--work DIR]
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402


def main():
    def extra(ap):
        ap.add_argument("--modules", required=True,
                        help="node_modules holding @portkey-ai/gateway")
        ap.add_argument("--upstream", required=True, help="the refserver binary")
        ap.add_argument("--work", help="directory for logs (default: a new one)")
    args = common.parse_args(__doc__, extra)
    work = args.work or tempfile.mkdtemp(prefix="portkey-e2e-")
    os.makedirs(work, exist_ok=True)
    up_log = os.path.join(work, "upstream.log")
    upstream = subprocess.Popen([args.upstream, "--port", "0", "--token-ms", "5",
                                 "--prefill-ms", "20"], stdout=open(up_log, "w"),
                                stderr=subprocess.STDOUT)
    up_line = common.wait_line("portkey_gateway", up_log, "listening on ", upstream)
    up_port = int(up_line.rsplit(":", 1)[1])
    port = args.port or common.free_port()
    start = os.path.join(args.modules, "@portkey-ai", "gateway", "build", "start-server.js")
    gateway = subprocess.Popen(["node", start, f"--port={port}", "--headless"],
                               cwd=os.path.dirname(args.modules),
                               stdout=open(os.path.join(work, "gateway.out"), "w"),
                               stderr=open(os.path.join(work, "gateway.err"), "w"))
    stop = []

    def on_signal(sig, _):
        stop.append(sig)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        common.wait_port("portkey_gateway", "the gateway", port, gateway, 30)
        print(f"upstream 127.0.0.1:{up_port}", flush=True)
        print(f"trace pid {gateway.pid}", flush=True)
        common.announce(port)
        while not stop and gateway.poll() is None and upstream.poll() is None:
            time.sleep(0.1)
    finally:
        for p in (gateway, upstream):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in (gateway, upstream):
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
    return 0 if stop or gateway.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
