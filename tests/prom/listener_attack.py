#!/usr/bin/env python3
"""Hostile clients against tokenscope's /metrics listener, with a normal scrape every second.

listener_attack.py PORT TRACER_PID SECONDS [flood|deadline]

deadline: only 3 slowloris connections from 127.0.0.2, well under every limit, so that only
the server's deadline for a request head can end them; and the scrapes.
flood (the default), for SECONDS, at once:
- slowloris: 8 source addresses (127.0.0.2-9) x 8 connections, each trickling the head of a
  GET /metrics one byte a second and reconnecting when the server drops it;
- garbage: from 127.0.0.10-12, random bytes, a 64 KiB header line, 2,000 header fields,
  NULs in the request line, a 100 MB Content-Length body, an HTTP/2 preface, a TLS hello,
  a connection that sends nothing; each read until the server closes or 2 s pass;
- slow readers: from 127.0.0.13, complete requests whose responses are never read;
- a scrape from 127.0.0.1 every second on a fresh connection, 2 s timeout.
Every connection goes to 127.0.0.1:PORT. Prints one JSON object: the scrapes (status, seconds),
the tracer's VmRSS and open descriptors sampled every second, and how long the server let the
slowest slowloris connection live.
"""
import json
import os
import selectors
import socket
import sys
import threading
import time

PORT, PID, SECONDS = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
FLOOD = (sys.argv[4] if len(sys.argv) > 4 else "flood") == "flood"
DST = ("127.0.0.1", PORT)
HEAD = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow\r\nX-Slow: " + b"a" * 4096
end = time.monotonic() + SECONDS
lock = threading.Lock()
out = {"scrapes": [], "rss_kb": [], "fds": [], "slow_lived_max_s": 0.0,
       "slow_lived_min_s": None, "slow_dropped": 0,
       "slow_connects": 0, "garbage_sent": 0, "errors": []}


def connect(src, blocking=True):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((src, 0))
    s.settimeout(2)
    s.connect(DST)
    s.setblocking(blocking)
    return s


def slowloris():
    sel = selectors.DefaultSelector()
    conns = {}  # socket -> [source, bytes sent, opened at]

    def open_one(src):
        try:
            s = connect(src, blocking=False)
        except OSError:
            return
        conns[s] = [src, 0, time.monotonic()]
        sel.register(s, selectors.EVENT_READ)
        with lock:
            out["slow_connects"] += 1

    def drop(s, by_server):
        src, _, opened = conns.pop(s)
        sel.unregister(s)
        s.close()
        if by_server:
            with lock:
                out["slow_dropped"] += 1
                lived = time.monotonic() - opened
                out["slow_lived_max_s"] = max(out["slow_lived_max_s"], lived)
                if out["slow_lived_min_s"] is None or lived < out["slow_lived_min_s"]:
                    out["slow_lived_min_s"] = lived
        return src

    # The deadline alone: one connection per source address, so that a reconnect never meets
    # the per-address limit (4) while the server still counts the connection it just dropped
    # (three from one address, dropped together, came back before the count fell, and the
    # refused one looked like a connection dropped early).
    for ip in range(2, 10) if FLOOD else (2, 3, 4):
        for _ in range(8 if FLOOD else 1):
            open_one(f"127.0.0.{ip}")
    next_byte = time.monotonic()
    while time.monotonic() < end:
        for key, _ in sel.select(timeout=0.1):
            s = key.fileobj
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if not data:  # the server closed it (or refused it over a limit): come back
                open_one(drop(s, True))
        if time.monotonic() >= next_byte:
            next_byte += 1.0
            for s, st in list(conns.items()):
                try:
                    s.send(HEAD[st[1]:st[1] + 1])
                    st[1] += 1
                except OSError:
                    open_one(drop(s, True))
    now = time.monotonic()
    with lock:  # still open at the end: they lived this long too
        for s, (_, _, opened) in conns.items():
            out["slow_lived_max_s"] = max(out["slow_lived_max_s"], now - opened)
            s.close()


GARBAGE = [
    os.urandom(8192),
    b"GET /metrics HTTP/1.1\r\nX-Long: " + b"A" * 65536 + b"\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(2000)) + b"\r\n",
    b"G\x00T /met\x00rics HTTP/1.1\r\n\r\n",
    b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n" + b"x" * 65536,
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + os.urandom(512),
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(1024),
    b"GET /" + b"%" * 30000 + b" HTTP/1.1\r\n\r\n",
    b"\r\n" * 5000,
    b"",  # connects and sends nothing
]


def garbage(ip):
    i = 0
    while time.monotonic() < end:
        payload = GARBAGE[i % len(GARBAGE)]
        i += 1
        try:
            s = connect(f"127.0.0.{ip}")
            s.settimeout(0.5)
            try:
                s.sendall(payload)
            except OSError:
                pass
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:
                try:
                    if not s.recv(65536):
                        break
                except socket.timeout:
                    if not payload:
                        break
                except OSError:
                    break
            s.close()
            with lock:
                out["garbage_sent"] += 1
        except OSError:
            time.sleep(0.05)


def slow_readers():
    held = []
    for _ in range(4):
        try:
            s = connect("127.0.0.13")
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 50)
            held.append(s)
        except OSError:
            pass
    while time.monotonic() < end:
        time.sleep(0.2)
    for s in held:
        s.close()


def scrape():
    t0 = time.monotonic()
    try:
        s = connect("127.0.0.1")
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        body = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            body += d
        s.close()
        status = int(body.split(b" ", 2)[1]) if body.startswith(b"HTTP/1.") else 0
        ok = status == 200 and b"tokenscope_requests_total" in body
        return {"status": status, "ok": ok, "s": round(time.monotonic() - t0, 3)}
    except (OSError, ValueError, IndexError) as e:
        return {"status": 0, "ok": False, "s": round(time.monotonic() - t0, 3), "error": str(e)}


def sample():
    rss = 0
    try:
        for line in open(f"/proc/{PID}/status"):
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
        fds = len(os.listdir(f"/proc/{PID}/fd"))
    except OSError:
        fds = -1
    out["rss_kb"].append(rss)
    out["fds"].append(fds)


threads = [threading.Thread(target=slowloris)]
if FLOOD:
    threads.append(threading.Thread(target=slow_readers))
    threads += [threading.Thread(target=garbage, args=(ip,)) for ip in (10, 11, 12)]
for t in threads:
    t.daemon = True
    t.start()
time.sleep(0.5)  # the attack is in place before the first scrape
while time.monotonic() < end:
    t0 = time.monotonic()
    r = scrape()
    with lock:
        out["scrapes"].append(r)
        sample()
    time.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))
for t in threads:
    t.join(timeout=5)
print(json.dumps(out))
