// A Node.js application calling an OpenAI-compatible server through the `openai` npm package
// (v4: node-fetch over an http.Agent), the way an agent does, recording what it saw on
// CLOCK_MONOTONIC (process.hrtime) in gtclient's output format (tests/README-tools.md), so the
// e2e test can check the requests tokenscope reports for this process as a client.
//
// Each worker holds one OpenAI client whose agent keeps one socket alive for -k requests; a
// content chunk is timed when the SDK's stream yields it (after it parsed the SSE event). An
// abort calls the stream's AbortController after --abort-after content chunks, which destroys
// the socket. The request is on the wire once create() resolved (the response head came):
// send_ns is that, an upper bound of the write.
//
// Usage: node openai_client.js --port P [-n N] [-c C] [-k K] [--max-tokens N] [--usage]
//   [--token-ms MS] [--prefill-ms MS] [--abort-every M] [--abort-after F]
//   [--http-error-every M] [--stream-error-every M] [--no-stream-every M] -o FILE
// NODE_PATH must reach the openai package.
'use strict';
const fs = require('fs');
const http = require('http');
const OpenAI = require('openai');

function parseArgs(argv) {
  const o = { n: 10, c: 1, k: 1, maxTokens: 16, usage: false, abortAfter: 1 };
  const num = {
    '--port': 'port', '-n': 'n', '-c': 'c', '-k': 'k', '--max-tokens': 'maxTokens',
    '--token-ms': 'tokenMs', '--prefill-ms': 'prefillMs', '--abort-every': 'abortEvery',
    '--abort-after': 'abortAfter', '--http-error-every': 'httpErrorEvery',
    '--stream-error-every': 'streamErrorEvery', '--no-stream-every': 'noStreamEvery',
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a in num) o[num[a]] = Number(argv[++i]);
    else if (a === '--usage') o.usage = true;
    else if (a === '-o') o.out = argv[++i];
    else if (a === '--realtime') continue; // gtclient's; nothing to do here
    else throw new Error(`unknown argument ${a}`);
  }
  if (!o.port || !o.out) throw new Error('--port and -o are required');
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

// One socket at a time, whose local port is noted when it connects.
function makeAgent(link) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const create = agent.createConnection.bind(agent);
  agent.createConnection = (opts, cb) => {
    const s = create(opts, cb);
    s.on('connect', () => { link.port = s.localPort; });
    return s;
  };
  return agent;
}

async function one(o, client, link, id, seq) {
  const rec = { id, seq, stream: !every(o.noStreamEvery, id) };
  const body = {
    model: 'ref', stream: rec.stream, max_tokens: o.maxTokens,
    messages: [{ role: 'user', content: 'the quick brown fox '.repeat(3) }],
  };
  if (o.usage && rec.stream) body.stream_options = { include_usage: true };
  if (o.tokenMs !== undefined) body.x_token_ms = o.tokenMs;
  if (o.prefillMs !== undefined) body.x_prefill_ms = o.prefillMs;
  if (every(o.httpErrorEvery, id)) body.x_fail = 'http';
  else if (every(o.streamErrorEvery, id)) body.x_fail = 'stream';
  const abortAfter = every(o.abortEvery, id) ? o.abortAfter : 0;
  const tokenNs = [];
  let usage = null;
  let outcome = 'ok';
  let aborted = false;
  rec.send_start_ns = monoNs();
  try {
    const res = await client.chat.completions.create(body);
    rec.send_ns = monoNs();
    rec.status = 200;
    if (!rec.stream) {
      usage = res.usage ? res.usage.completion_tokens : null;
    } else {
      for await (const chunk of res) {
        const ts = monoNs();
        if (chunk.usage) usage = chunk.usage.completion_tokens;
        if (hasContent(chunk)) {
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
    if (!rec.send_ns) rec.send_ns = monoNs();
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

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const out = fs.createWriteStream(o.out);
  let nextId = 0;
  const next = () => (nextId < o.n ? nextId++ : null);
  await Promise.all(Array.from({ length: o.c }, () => worker(o, next, out)));
  await new Promise((resolve) => out.end(resolve));
}

main().catch((e) => {
  process.stderr.write(`openai_client: ${e.stack}\n`);
  process.exit(1);
});
