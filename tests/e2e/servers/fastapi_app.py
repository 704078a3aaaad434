#!/usr/bin/python3
"""FastAPI + uvicorn e2e server (run with Debian's /usr/bin/python3).

--stack h11:        asyncio loop, h11 protocol (sends with sendto)
--stack httptools:  uvloop loop, httptools protocol, vLLM's own setup (sends with write/writev)
--stack hypercorn:  hypercorn (asyncio), HTTP/1.1 and HTTP/2: h2c with prior knowledge on
                    cleartext, ALPN h2 with --tls-cert
Usage: fastapi_app.py PORT [--stack h11|httptools|hypercorn]; PORT 0 picks a free port.
"""
import os
import socket
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import uvicorn  # noqa: E402
from fastapi import FastAPI, Request as HTTPRequest  # noqa: E402
from fastapi.responses import JSONResponse, StreamingResponse  # noqa: E402

import common  # noqa: E402

STACKS = {"h11": ("asyncio", "h11"), "httptools": ("uvloop", "httptools"),
          "hypercorn": (None, None)}

app = FastAPI()


async def serve(http, body, stream):
    """A request of either API: body(req) is the answer not streamed, stream(req) the SSE."""
    try:
        req = common.Request(await http.body())
    except common.BadRequest as e:
        return JSONResponse({"error": {"message": str(e), "type": "invalid_request_error",
                                       "code": 400}}, status_code=400)
    if req.fail == "http":
        return JSONResponse(common.ERROR_HTTP, status_code=500)
    if not req.stream:
        return JSONResponse(await body(req))
    return StreamingResponse(stream(req), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache"})


@app.post(common.CHAT_PATH)
async def chat(http: HTTPRequest):
    return await serve(http, common.Request.completion, common.Request.frames)


@app.post(common.RESPONSES_PATH)
async def responses(http: HTTPRequest):
    return await serve(http, common.Request.responses_body, common.Request.responses_events)


class Server(uvicorn.Server):
    async def startup(self, sockets=None):
        await super().startup(sockets=sockets)
        if not self.should_exit:
            common.announce(sockets[0].getsockname()[1])


def hypercorn_run(sock, tls_cert):
    import asyncio
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"fd://{sock.fileno()}"]
    config.loglevel = "WARNING"
    if tls_cert:
        config.certfile = config.keyfile = tls_cert
    common.announce(sock.getsockname()[1])
    asyncio.run(serve(app, config))


def main():
    args = common.parse_args(__doc__, lambda ap: ap.add_argument(
        "--stack", choices=sorted(STACKS), default="h11"))
    loop, http = STACKS[args.stack]
    # Bind here so that port 0 works and the printed port is the bound one. IPPROTO_TCP, not 0:
    # asyncio sets TCP_NODELAY only on sockets whose proto says TCP, as it does when uvicorn
    # binds the port itself; with proto 0, Nagle holds frames for the client's delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    if args.stack == "hypercorn":
        sock.listen(128)
        return hypercorn_run(sock, args.tls_cert)
    tls = {"ssl_certfile": args.tls_cert} if args.tls_cert else {}
    config = uvicorn.Config(app, loop=loop, http=http, lifespan="off", log_level="warning",
                            access_log=False, **tls)
    Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
