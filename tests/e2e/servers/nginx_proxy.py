#!/usr/bin/python3
"""nginx (Debian's) terminating TLS in front of the reference server, the way a streaming
deployment sets it up (proxy_buffering off, HTTP/1.1 keep-alive upstream), for the e2e test.

Starts the upstream (`refserver`) and nginx (master and one worker, not daemonised) as its
children, prints `trace pid N` (nginx's master: tokenscope follows its worker, and the upstream
is not traced) and then `listening on 127.0.0.1:PORT`, and stops both on SIGTERM or SIGINT.

With --h2 nginx speaks HTTP/2 to its clients (ALPN h2 on the TLS port), HTTP/1.1 upstream.

Usage: nginx_proxy.py PORT --tls-cert PEM --upstream PATH/refserver [--work DIR] [--h2]
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

CONF = """daemon off;
master_process on;
worker_processes 1;
error_log {work}/error.log warn;
pid {work}/nginx.pid;
events {{ worker_connections 512; }}
http {{
    access_log off;
    client_body_temp_path {work}/body;
    proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi;
    uwsgi_temp_path {work}/uwsgi;
    scgi_temp_path {work}/scgi;
    upstream llm {{
        server 127.0.0.1:{upstream};
        keepalive 16;
    }}
    server {{
        listen 127.0.0.1:{port} ssl{http2};
        ssl_certificate {pem};
        ssl_certificate_key {pem};
        location / {{
            proxy_pass http://llm;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"""


def main():
    def extra(ap):
        ap.add_argument("--upstream", required=True, help="the refserver binary")
        ap.add_argument("--work", help="directory for nginx's files (default: a new one)")
        ap.add_argument("--h2", action="store_true", help="HTTP/2 to the clients")
    args = common.parse_args(__doc__, extra)
    if not args.tls_cert:
        sys.exit("nginx_proxy: --tls-cert is required")
    work = args.work or tempfile.mkdtemp(prefix="nginx-e2e-")
    up_log = os.path.join(work, "upstream.log")
    upstream = subprocess.Popen([args.upstream, "--port", "0", "--token-ms", "5",
                                 "--prefill-ms", "20"], stdout=open(up_log, "w"),
                                stderr=subprocess.STDOUT)
    up_line = common.wait_line("nginx_proxy", up_log, "listening on ", upstream)
    up_port = int(up_line.rsplit(":", 1)[1])
    port = args.port or common.free_port()
    conf = os.path.join(work, "nginx.conf")
    with open(conf, "w") as f:
        f.write(CONF.format(work=work, upstream=up_port, port=port,
                            pem=os.path.abspath(args.tls_cert),
                            http2=" http2" if args.h2 else ""))
    nginx = subprocess.Popen(["nginx", "-c", conf, "-p", work],
                             stderr=open(os.path.join(work, "nginx.err"), "w"))
    stop = []

    def on_signal(sig, _):
        stop.append(sig)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        common.wait_port("nginx_proxy", "nginx", port, nginx)
        print(f"trace pid {nginx.pid}", flush=True)
        common.announce(port)
        while not stop and nginx.poll() is None and upstream.poll() is None:
            time.sleep(0.1)
    finally:
        for p in (nginx, upstream):
            if p.poll() is None:
                p.send_signal(signal.SIGQUIT if p is nginx else signal.SIGTERM)
        for p in (nginx, upstream):
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
    return 0 if stop or nginx.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
