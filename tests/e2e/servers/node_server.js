#!/usr/bin/env node
// Node.js `http` e2e server: SSE written with res.write(), no npm packages.
// It implements the contract in ../README.md (the same API as common.py's servers).
//
// Usage: node node_server.js PORT   (or --port PORT; 0 picks a free port)
//        [--tls-cert PEM] [--h2] [--cork]
//
// --cork: after the prefill delay, a stream's frames are written at once with the socket
// corked and go out when it is uncorked, in one writev of 4 pieces per frame (chunk size,
// CRLF, frame, CRLF), as Node coalesces frames queued while its socket is busy; the terminator
// follows in its own write. Each such writev is logged on stdout as `writev PIECES BYTES`.
'use strict';

const fs = require('fs');
const http = require('http');
const https = require('https');
const http2 = require('http2');
const { setTimeout: sleep } = require('timers/promises');

const DEFAULT_MAX_TOKENS = 16;
const DEFAULT_TOKEN_MS = 5;
const DEFAULT_PREFILL_MS = 20;
const CHAT_PATH = '/v1/chat/completions';
const ERROR_BODY = { error: { message: 'injected', type: 'server_error', code: 500 } };
const DONE = 'data: [DONE]\n\n';

let nextId = 1;
let cork = false;

const tokenText = (i) => `tok${i} `;
const sse = (obj) => `data: ${JSON.stringify(obj)}\n\n`;
const error = (message, code) => ({ error: { message, type: 'invalid_request_error', code } });
const words = (v) => (typeof v === 'string' ? v.split(/\s+/).filter(Boolean).length : 0);

function promptTokens(body) {
  let n = words(body.prompt);
  for (const m of Array.isArray(body.messages) ? body.messages : []) n += words(m && m.content);
  return Math.max(n, 1);
}

function sendJSON(res, status, obj) {
  const data = JSON.stringify(obj);
  res.writeHead(status, {
    'Content-Type': 'application/json',
    'Content-Length': Buffer.byteLength(data),
  });
  res.end(data);
}

async function chat(req, res, raw) {
  let body;
  try {
    body = raw.length ? JSON.parse(raw) : {};
    if (body === null || typeof body !== 'object') throw new Error('body must be a JSON object');
  } catch (e) {
    sendJSON(res, 400, error(String(e.message), 400));
    return;
  }
  if (body.x_fail === 'http') {
    sendJSON(res, 500, ERROR_BODY);
    return;
  }
  const maxTokens = Number(body.max_tokens) || DEFAULT_MAX_TOKENS;
  const tokenMs = body.x_token_ms ?? DEFAULT_TOKEN_MS;
  const prefillMs = body.x_prefill_ms ?? DEFAULT_PREFILL_MS;
  const pt = promptTokens(body);
  const usage = { prompt_tokens: pt, completion_tokens: maxTokens, total_tokens: pt + maxTokens };
  const base = {
    id: `chatcmpl-${nextId++}`,
    object: 'chat.completion.chunk',
    created: Math.floor(Date.now() / 1000),
    model: String(body.model || 'e2e-model'),
  };

  // The client may go away at any time; stop generating when it does.
  let gone = false;
  res.on('close', () => { gone = true; });

  if (!body.stream) {
    await sleep(prefillMs + tokenMs * Math.max(maxTokens - 1, 0));
    if (gone) return;
    let content = '';
    for (let i = 0; i < maxTokens; i++) content += tokenText(i);
    sendJSON(res, 200, {
      ...base,
      object: 'chat.completion',
      choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'length' }],
      usage,
    });
    return;
  }

  const frame = (delta, finish = null) =>
    res.write(sse({ ...base, choices: [{ index: 0, delta, finish_reason: finish }] }));

  res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
  frame({ role: 'assistant', content: '' });
  await sleep(prefillMs);
  if (cork) {
    if (gone) return;
    corked(res, () => {
      for (let i = 0; i < maxTokens; i++) {
        if (body.x_fail === 'stream' && i === Math.floor(maxTokens / 2)) {
          res.write(sse(ERROR_BODY));
          res.write(DONE);
          return;
        }
        frame({ content: tokenText(i) });
      }
      frame({}, 'length');
      if (body.stream_options && body.stream_options.include_usage) {
        res.write(sse({ ...base, choices: [], usage }));
      }
      res.write(DONE);
    });
    res.end();
    return;
  }
  for (let i = 0; i < maxTokens; i++) {
    if (gone) return;
    if (body.x_fail === 'stream' && i === Math.floor(maxTokens / 2)) {
      res.write(sse(ERROR_BODY));
      res.end(DONE);
      return;
    }
    if (i > 0) await sleep(tokenMs);
    if (gone) return;
    frame({ content: tokenText(i) });
  }
  frame({}, 'length');
  if (body.stream_options && body.stream_options.include_usage) {
    res.write(sse({ ...base, choices: [], usage }));
  }
  res.end(DONE);
}

// Runs write() with res's socket corked, then uncorks it: what write() queued goes out in one
// writev (libuv takes up to IOV_MAX buffers in one call), logged with its pieces and bytes.
function corked(res, write) {
  const sock = res.socket;
  sock.cork();
  write();
  process.stdout.write(`writev ${sock.writableBuffer.length} ${sock.writableLength}\n`);
  sock.uncork();
}

function main() {
  const args = process.argv.slice(2);
  // --tls-cert PEM (certificate and key in one file): serve https instead.
  const tlsAt = args.indexOf('--tls-cert');
  const pem = tlsAt >= 0 ? fs.readFileSync(args[tlsAt + 1]) : null;
  if (tlsAt >= 0) args.splice(tlsAt, 2);
  // --h2: HTTP/2 (the http2 module's compatibility API, the same handler): cleartext with prior
  // knowledge, or ALPN h2 with --tls-cert.
  const h2At = args.indexOf('--h2');
  if (h2At >= 0) args.splice(h2At, 1);
  const corkAt = args.indexOf('--cork');
  if (corkAt >= 0) args.splice(corkAt, 1);
  cork = corkAt >= 0;
  const portArg = args[0] === '--port' ? args[1] : args[0];
  const port = Number(portArg);
  if (portArg === undefined || !Number.isInteger(port) || port < 0) {
    process.stderr.write('usage: node node_server.js PORT | --port PORT [--tls-cert PEM] [--h2] [--cork]  (0 picks a free port)\n');
    process.exit(2);
  }
  const handler = (req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      if (req.method !== 'POST' || req.url.split('?')[0] !== CHAT_PATH) {
        sendJSON(res, 404, error('not found', 404));
        return;
      }
      chat(req, res, Buffer.concat(chunks).toString()).catch((e) => {
        process.stderr.write(`node_server: ${e.stack}\n`);
        res.destroy();
      });
    });
  };
  let server;
  if (h2At >= 0)
    server = pem ? http2.createSecureServer({ cert: pem, key: pem }, handler) : http2.createServer(handler);
  else
    server = pem ? https.createServer({ cert: pem, key: pem }, handler) : http.createServer(handler);
  server.listen(port, '127.0.0.1', () => {
    // Pipes are written synchronously on Linux, so the line is out before we serve.
    process.stdout.write(`listening on 127.0.0.1:${server.address().port}\n`);
  });
  for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => process.exit(0));
}

main();
