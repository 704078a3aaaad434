#!/usr/bin/python3
"""aiohttp web.StreamResponse e2e server (run with Debian's /usr/bin/python3).

Usage: aiohttp_app.py PORT; PORT 0 picks a free port.
"""
import asyncio
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from aiohttp import web  # noqa: E402

import common  # noqa: E402


async def chat(http):
    try:
        req = common.Request(await http.read())
    except common.BadRequest as e:
        return web.json_response({"error": {"message": str(e), "type": "invalid_request_error",
                                            "code": 400}}, status=400)
    if req.fail == "http":
        return web.json_response(common.ERROR_HTTP, status=500)
    if not req.stream:
        return web.json_response(await req.completion())
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                       "Cache-Control": "no-cache"})
    await resp.prepare(http)
    try:
        async for frame in req.frames():
            await resp.write(frame)
        await resp.write_eof()
    except ConnectionResetError:
        pass  # the client closed early (an abort); aiohttp drops the connection
    return resp


async def serve(port):
    app = web.Application()
    app.router.add_post(common.CHAT_PATH, chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    common.announce(site._server.sockets[0].getsockname()[1])
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main():
    args = common.parse_args(__doc__)
    try:
        asyncio.run(serve(args.port))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
