// gRPC server-streaming e2e server on @grpc/grpc-js (npm, pure JavaScript on Node's http2): the
// contract of grpc_app.py (request fields 1 prompt, 2 max_tokens, 3 token_ms, 4 prefill_ms,
// 5 fail; one message per token; INVALID_ARGUMENT / INTERNAL for the injected failures), with
// raw protobuf bytes and no generated code.
// Usage: node grpc_js_server.js PORT [--tls-cert PEM]  (0 picks a free port); NODE_PATH must
// reach @grpc/grpc-js.
'use strict';
const fs = require('fs');
const grpc = require('@grpc/grpc-js');
const { setTimeout: sleep } = require('timers/promises');

const DEFAULT_MAX_TOKENS = 16;
const DEFAULT_TOKEN_MS = 5;
const DEFAULT_PREFILL_MS = 20;

function varint(b, i) {
  let v = 0;
  let mul = 1;
  for (;;) {
    const c = b[i++];
    v += (c & 0x7f) * mul;
    mul *= 128;
    if (!(c & 0x80)) return [v, i];
  }
}

// The fields of a flat protobuf message: { number: value } (varints and byte strings).
function decode(b) {
  const out = {};
  let i = 0;
  while (i < b.length) {
    let key;
    [key, i] = varint(b, i);
    const num = Math.floor(key / 8);
    if ((key & 7) === 0) {
      [out[num], i] = varint(b, i);
    } else if ((key & 7) === 2) {
      let n;
      [n, i] = varint(b, i);
      out[num] = b.subarray(i, i + n);
      i += n;
    } else {
      throw new Error(`wire type ${key & 7}`);
    }
  }
  return out;
}

function tokenMessage(i) {
  const text = Buffer.from(`tok${i} `);
  return Buffer.concat([Buffer.from([0x0a, text.length]), text]);
}

async function generate(call) {
  const f = decode(call.request);
  const maxTokens = f[2] || DEFAULT_MAX_TOKENS;
  const tokenMs = f[3] ?? DEFAULT_TOKEN_MS;
  const prefillMs = f[4] ?? DEFAULT_PREFILL_MS;
  const fail = f[5] ? f[5].toString() : '';
  let gone = false;
  call.on('cancelled', () => { gone = true; });
  if (fail === 'http') {
    call.emit('error', { code: grpc.status.INVALID_ARGUMENT, details: 'injected' });
    return;
  }
  await sleep(prefillMs);
  for (let i = 0; i < maxTokens; i++) {
    if (gone) return;
    if (fail === 'stream' && i === Math.floor(maxTokens / 2)) {
      call.emit('error', { code: grpc.status.INTERNAL, details: 'injected' });
      return;
    }
    if (i) await sleep(tokenMs);
    if (gone) return;
    call.write(tokenMessage(i));
  }
  call.end();
}

function main() {
  const args = process.argv.slice(2);
  const tlsAt = args.indexOf('--tls-cert');
  const pem = tlsAt >= 0 ? fs.readFileSync(args[tlsAt + 1]) : null;
  if (tlsAt >= 0) args.splice(tlsAt, 2);
  const port = Number(args[0]);
  if (args[0] === undefined || !Number.isInteger(port) || port < 0) {
    process.stderr.write('usage: node grpc_js_server.js PORT [--tls-cert PEM]\n');
    process.exit(2);
  }
  const raw = (b) => b;
  const service = {
    Generate: {
      path: '/tokenscope.e2e.Generator/Generate',
      requestStream: false,
      responseStream: true,
      requestSerialize: raw,
      requestDeserialize: raw,
      responseSerialize: raw,
      responseDeserialize: raw,
    },
  };
  const server = new grpc.Server();
  server.addService(service, {
    Generate: (call) => generate(call).catch((e) => {
      process.stderr.write(`grpc_js_server: ${e.stack}\n`);
      call.destroy();
    }),
  });
  const creds = pem
    ? grpc.ServerCredentials.createSsl(null, [{ cert_chain: pem, private_key: pem }])
    : grpc.ServerCredentials.createInsecure();
  server.bindAsync(`127.0.0.1:${port}`, creds, (err, bound) => {
    if (err) {
      process.stderr.write(`grpc_js_server: ${err.message}\n`);
      process.exit(1);
    }
    process.stdout.write(`listening on 127.0.0.1:${bound}\n`);
  });
  for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => process.exit(0));
}

main();
