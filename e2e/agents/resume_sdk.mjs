// The retry path of docs/api.md "Resuming a stream" with the official
// openai and @anthropic-ai/sdk clients; run by TestNodeClientsResume with
// MACPOOL_URLS (two coordinators) and MACPOOL_MODEL. A stream is started on
// the first coordinator through .asResponse() (the raw SSE body, whose id
// lines the SDKs do not expose), left after a few frames, and resumed on
// the second coordinator with the SDK's own streaming and the header
// Last-Event-ID. Prints one JSON line; exits non-zero on a failed check.
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import assert from 'node:assert/strict';

const [url1, url2] = process.env.MACPOOL_URLS.split(',');
const model = process.env.MACPOOL_MODEL;
const words = Array.from({ length: 40 }, (_, i) => `w${i}`).join(' ');
const log = (what, v) => console.log(JSON.stringify({ what, ...v }));

// firstFrames reads n SSE frames of a raw response body, then drops the
// connection (a client that went away).
async function firstFrames(resp, n) {
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  const frames = [];
  while (frames.length < n) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while (frames.length < n && (i = buf.indexOf('\n\n')) >= 0) {
      const f = {};
      for (const line of buf.slice(0, i).split('\n')) {
        const j = line.indexOf(':');
        const k = line.slice(0, j);
        const v = line.slice(j + 1).replace(/^ /, '');
        f[k] = k === 'data' && f.data !== undefined ? `${f.data}\n${v}` : v;
      }
      buf = buf.slice(i + 2);
      frames.push(f);
    }
  }
  await reader.cancel();
  return frames;
}

// OpenAI chat completions.
{
  const params = { model, messages: [{ role: 'user', content: words }], stream: true };
  const first = new OpenAI({ baseURL: `${url1}/v1`, apiKey: 'sk-agents', maxRetries: 0 });
  const frames = await firstFrames(await first.chat.completions.create(params).asResponse(), 5);
  const text1 = frames.map((f) => JSON.parse(f.data).choices[0]?.delta?.content ?? '').join('');
  const last = frames.at(-1).id;
  assert.match(last, /^[0-9a-f]+\.\d+\.[0-9a-f]+:4$/);
  const second = new OpenAI({ baseURL: `${url2}/v1`, apiKey: 'sk-agents', maxRetries: 0 });
  let text2 = '';
  let finish = '';
  for await (const ch of await second.chat.completions.create(params, { headers: { 'Last-Event-ID': last } })) {
    text2 += ch.choices[0]?.delta?.content ?? '';
    finish ||= ch.choices[0]?.finish_reason ?? '';
  }
  assert.equal(text1 + text2, words);
  assert.equal(finish, 'stop');
  log('openai chat', { last, first: text1.length, rest: text2.length });
}

// Anthropic Messages.
{
  const params = { model: 'claude-sonnet-4-5', max_tokens: 100, messages: [{ role: 'user', content: words }], stream: true };
  const first = new Anthropic({ baseURL: url1, apiKey: 'sk-agents', maxRetries: 0 });
  const frames = await firstFrames(await first.messages.create(params).asResponse(), 6);
  const text1 = frames.map((f) => JSON.parse(f.data)).filter((e) => e.type === 'content_block_delta').map((e) => e.delta.text).join('');
  const last = frames.at(-1).id;
  const second = new Anthropic({ baseURL: url2, apiKey: 'sk-agents', maxRetries: 0 });
  let text2 = '';
  const types = [];
  for await (const ev of await second.messages.create(params, { headers: { 'Last-Event-ID': last } })) {
    types.push(ev.type);
    if (ev.type === 'content_block_delta') text2 += ev.delta.text;
  }
  assert.equal(text1 + text2, words);
  assert.equal(types.at(-1), 'message_stop');
  log('anthropic messages', { last, first: text1.length, rest: text2.length });
}

console.log(JSON.stringify({ ok: true }));
