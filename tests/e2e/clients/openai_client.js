// A Node.js application calling an OpenAI-compatible server through the `openai` npm package
// (v4: node-fetch over an http.Agent), the way an agent does, recording what it saw on
// CLOCK_MONOTONIC (process.hrtime) in gtclient's output format (tests/README-tools.md), so the
// e2e test can check the requests tokenscope reports for this process as a client.
//
// Each worker holds one OpenAI client whose agent keeps one socket alive for -k requests; a
// content chunk is timed when the SDK's stream yields it (after it parsed the SSE event). An
// abort calls the stream's AbortController after --abort-after content chunks, which destroys
// the socket. The request's own writes are timed on the socket (net.Socket's _writeGeneric, which
// libuv's write runs inside of; a write while the socket connects is deferred to the connect and
// timed then): send_start_ns is when the first began, send_ns when the last returned, as
// gtclient's are its write's; ttft_ms and e2e_ms count from send_ns, as gtclient's do.
//
// --api responses calls the Responses API instead (client.responses.create, POST /v1/responses):
// its stream is typed events; a delta event that is not empty (output text, reasoning with
// --reasoning N: the first N deltas) is a content chunk, response.completed's usage gives the
// tokens (always: the Responses API states it), response.failed is a stream error.
//
// --warmup N first makes N requests of the same API, unrecorded, to a stand-in server of its
// own (an http server in this process, on another port, streaming 4 tokens): the SDK's, the HTTP
// parser's and the SSE decoder's code is then compiled before the first measured request, which
// otherwise reads its first frames 1-3 ms late. Not for a traced client: the stand-in would be
// traced with it.
//
// Usage: node openai_client.js --port P [--api chat|responses] [-n N] [-c C] [-k K]
//   [--max-tokens N] [--usage] [--reasoning N] [--token-ms MS] [--prefill-ms MS]
//   [--abort-every M] [--abort-after F] [--http-error-every M] [--stream-error-every M]
//   [--no-stream-every M] [--warmup N] -o FILE
// NODE_PATH must reach the openai package.
'use strict';
const fs = require('fs');
const http = require('http');
const OpenAI = require('openai');

function parseArgs(argv) {
  const o = { n: 10, c: 1, k: 1, maxTokens: 16, usage: false, abortAfter: 1, api: 'chat' };
  const num = {
    '--port': 'port', '-n': 'n', '-c': 'c', '-k': 'k', '--max-tokens': 'maxTokens',
    '--token-ms': 'tokenMs', '--prefill-ms': 'prefillMs', '--abort-every': 'abortEvery',
    '--abort-after': 'abortAfter', '--http-error-every': 'httpErrorEvery',
    '--stream-error-every': 'streamErrorEvery', '--no-stream-every': 'noStreamEvery',
    '--reasoning': 'reasoning', '--warmup': 'warmup',
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a in num) o[num[a]] = Number(argv[++i]);
    else if (a === '--usage') o.usage = true;
    else if (a === '-o') o.out = argv[++i];
    else if (a === '--api') o.api = argv[++i];
    else if (a === '--realtime') continue; // gtclient's; nothing to do here
    else throw new Error(`unknown argument ${a}`);
  }
  if (!o.port || !o.out) throw new Error('--port and -o are required');
  if (o.api !== 'chat' && o.api !== 'responses') throw new Error(`unknown --api ${o.api}`);
  return o;
}

const monoNs = () => process.hrtime.bigint();
const every = (m, id) => m && (id + 1) % m === 0;

function hasContent(chunk) {
  return (chunk.choices || []).some((c) => {
    const d = c.delta || {};
    return !!(d.content || d.reasoning_content || (d.tool_calls && d.tool_calls.length) || c.text);
  });
}

// One socket at a time, whose local port is noted when it connects, and whose writes are timed:
// link.writeStart (reset to null before each request) when the first began, link.written when
// the latest returned.
function makeAgent(link) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const create = agent.createConnection.bind(agent);
  agent.createConnection = (opts, cb) => {
    const s = create(opts, cb);
    const orig = s._writeGeneric;
    s.on('connect', () => { link.port = s.localPort; });
    s._writeGeneric = function (...a) {
      const start = monoNs();
      const r = orig.apply(this, a);
      if (!this.connecting) {
        if (link.writeStart === null) link.writeStart = start;
        link.written = monoNs();
      }
      return r;
    };
    return s;
  };
  return agent;
}

// A Responses API event that carries output: a delta that is not empty.
function eventHasContent(ev) {
  return ev.type.endsWith('.delta') && !!ev.delta;
}

async function one(o, client, link, id, seq) {
  const rec = { id, seq, stream: !every(o.noStreamEvery, id) };
  const responses = o.api === 'responses';
  const body = responses ? {
    model: 'ref', stream: rec.stream, max_output_tokens: o.maxTokens,
    input: 'the quick brown fox '.repeat(3),
  } : {
    model: 'ref', stream: rec.stream, max_tokens: o.maxTokens,
    messages: [{ role: 'user', content: 'the quick brown fox '.repeat(3) }],
  };
  if (o.usage && rec.stream && !responses) body.stream_options = { include_usage: true };
  if (o.reasoning) body.x_reasoning = o.reasoning;
  if (o.tokenMs !== undefined) body.x_token_ms = o.tokenMs;
  if (o.prefillMs !== undefined) body.x_prefill_ms = o.prefillMs;
  if (every(o.httpErrorEvery, id)) body.x_fail = 'http';
  else if (every(o.streamErrorEvery, id)) body.x_fail = 'stream';
  const abortAfter = every(o.abortEvery, id) ? o.abortAfter : 0;
  const tokenNs = [];
  let usage = null;
  let outcome = 'ok';
  let aborted = false;
  const before = monoNs();
  link.writeStart = null;
  link.written = null;
  try {
    const res = await (responses ? client.responses.create(body)
      : client.chat.completions.create(body));
    rec.send_start_ns = link.writeStart !== null ? link.writeStart : before;
    rec.send_ns = link.written !== null ? link.written : monoNs();
    rec.status = 200;
    if (!rec.stream) {
      usage = res.usage ? (responses ? res.usage.output_tokens : res.usage.completion_tokens)
        : null;
    } else {
      for await (const chunk of res) {
        const ts = monoNs();
        if (responses) {
          if (chunk.response && chunk.response.usage) usage = chunk.response.usage.output_tokens;
          if (chunk.type === 'response.failed') outcome = 'stream_error';
        } else if (chunk.usage) {
          usage = chunk.usage.completion_tokens;
        }
        if (responses ? eventHasContent(chunk) : hasContent(chunk)) {
          tokenNs.push(ts);
          if (abortAfter && tokenNs.length >= abortAfter) {
            res.controller.abort();
            aborted = true;
            outcome = 'aborted';
            break;
          }
        }
      }
    }
  } catch (e) {
    if (!rec.send_ns) {
      rec.send_start_ns = link.writeStart !== null ? link.writeStart : before;
      rec.send_ns = link.written !== null ? link.written : monoNs();
    }
    if (e instanceof OpenAI.APIError && e.status) {
      rec.status = e.status;
      outcome = 'http_error';
    } else if (e instanceof OpenAI.APIError) {
      // an error event in the stream: the SDK throws it
      rec.status = 200;
      outcome = 'stream_error';
    } else {
      throw e;
    }
  }
  rec.end_ns = monoNs();
  rec.port = link.port;
  rec.ttft_ms = tokenNs.length ? Number(tokenNs[0] - rec.send_ns) / 1e6 : null;
  rec.e2e_ms = Number(rec.end_ns - rec.send_ns) / 1e6;
  Object.assign(rec, {
    outcome,
    frames: tokenNs.length,
    tokens: usage !== null ? usage : tokenNs.length,
    tokens_from: usage !== null ? 'usage' : 'frames',
    first_token_ns: tokenNs.length ? tokenNs[0] : null,
    token_ns: tokenNs,
  });
  return { rec, aborted };
}

async function worker(o, next, out) {
  let client = null;
  let link = null;
  let seq = 0;
  for (let id = next(); id !== null; id = next()) {
    if (!client || seq >= o.k) {
      link = { port: 0 };
      client = new OpenAI({
        apiKey: 'none', baseURL: `http://127.0.0.1:${o.port}/v1`, maxRetries: 0,
        httpAgent: makeAgent(link), timeout: 30000,
      });
      seq = 0;
    }
    const { rec, aborted } = await one(o, client, link, id, seq++);
    out.write(JSON.stringify(rec, (k, v) => (typeof v === 'bigint' ? Number(v) : v)) + '\n');
    if (aborted) client = null; // its socket is gone
  }
}

// The stand-in of --warmup: a short stream of the API asked for, at once.
function standIn() {
  const sse = (o) => `data: ${JSON.stringify(o)}\n\n`;
  const ev = (type, o) => `event: ${type}\n${sse({ type, ...o })}`;
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'Content-Type': 'text/event-stream' });
      if (req.url.endsWith('/responses')) {
        res.write(ev('response.created', { response: { model: 'w', status: 'in_progress' } }));
        for (let i = 0; i < 4; i++) res.write(ev('response.output_text.delta', { delta: 'x' }));
        res.end(ev('response.completed', {
          response: { model: 'w', status: 'completed', usage: { output_tokens: 4 } },
        }));
      } else {
        for (let i = 0; i < 4; i++) res.write(sse({ choices: [{ delta: { content: 'x' } }] }));
        res.end(sse({ choices: [], usage: { completion_tokens: 4 } }) + 'data: [DONE]\n\n');
      }
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

async function warmUp(o) {
  const server = await standIn();
  const w = { ...o, port: server.address().port, abortEvery: 0, httpErrorEvery: 0,
    streamErrorEvery: 0, noStreamEvery: 0 };
  const link = { port: 0 };
  const client = new OpenAI({
    apiKey: 'none', baseURL: `http://127.0.0.1:${w.port}/v1`, maxRetries: 0,
    httpAgent: makeAgent(link), timeout: 30000,
  });
  for (let i = 0; i < o.warmup; i++) await one(w, client, link, i, i);
  await new Promise((resolve) => server.close(resolve));
  server.closeAllConnections();
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const out = fs.createWriteStream(o.out);
  if (o.warmup) await warmUp(o);
  let nextId = 0;
  const next = () => (nextId < o.n ? nextId++ : null);
  await Promise.all(Array.from({ length: o.c }, () => worker(o, next, out)));
  await new Promise((resolve) => out.end(resolve));
}

main().catch((e) => {
  process.stderr.write(`openai_client: ${e.stack}\n`);
  process.exit(1);
});
