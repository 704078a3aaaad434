#!/usr/bin/python3
"""gRPC server-streaming e2e server: Python grpcio (Debian's python3-grpcio), no generated code.

The method /tokenscope.e2e.Generator/Generate takes a request message with the fields the HTTP
servers read from JSON (../README.md), as protobuf: 1 prompt (string), 2 max_tokens, 3 token_ms,
4 prefill_ms (varints; absent: the defaults), 5 fail (string: "http" ends the call with
INVALID_ARGUMENT before any message, "stream" with INTERNAL after half the tokens). It answers
with one message per token (field 1: the token's text), the prefill delay before the first and
the token delay between the others, then status OK. gtclient --grpc speaks it.
Usage: grpc_app.py PORT [--tls-cert PEM]; PORT 0 picks a free port.
"""
import os
import sys
import time
from concurrent import futures

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

import common  # noqa: E402

METHOD = ("tokenscope.e2e.Generator", "Generate")


def varint(b, i):
    v, shift = 0, 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7f) << shift
        shift += 7
        if not c & 0x80:
            return v, i


def decode(b):
    """The fields of a flat protobuf message: {number: value} (varints and strings)."""
    out, i = {}, 0
    while i < len(b):
        key, i = varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            out[num], i = varint(b, i)
        elif wt == 2:
            n, i = varint(b, i)
            out[num] = b[i:i + n]
            i += n
        else:
            raise ValueError(f"wire type {wt}")
    return out


def token_message(i):
    text = common.token_text(i).encode()
    return bytes([0x0a, len(text)]) + text


def generate(request, context):
    f = decode(request)
    max_tokens = f.get(2) or common.DEFAULT_MAX_TOKENS
    token_s = f.get(3, common.DEFAULT_TOKEN_MS) / 1000.0
    prefill_s = f.get(4, common.DEFAULT_PREFILL_MS) / 1000.0
    fail = f.get(5, b"").decode()
    if fail == "http":
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "injected")
    time.sleep(prefill_s)
    for i in range(max_tokens):
        if fail == "stream" and i == max_tokens // 2:
            context.abort(grpc.StatusCode.INTERNAL, "injected")
        if i:
            time.sleep(token_s)
        yield token_message(i)


def main():
    args = common.parse_args(__doc__)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        METHOD[0], {METHOD[1]: grpc.unary_stream_rpc_method_handler(generate)}),))
    addr = f"127.0.0.1:{args.port}"
    if args.tls_cert:
        pem = open(args.tls_cert, "rb").read()
        creds = grpc.ssl_server_credentials([(pem, pem)])
        port = server.add_secure_port(addr, creds)
    else:
        port = server.add_insecure_port(addr)
    server.start()
    common.announce(port)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
