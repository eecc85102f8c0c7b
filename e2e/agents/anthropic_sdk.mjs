// Drives macpool's Messages API with the official @anthropic-ai/sdk; run by
// TestAnthropicNodeMessages with MACPOOL_URLS and MACPOOL_MODEL (served
// under the alias claude-sonnet-4-5 too). Prints one JSON line; exits
// non-zero on a failed check.
import Anthropic from '@anthropic-ai/sdk';
import assert from 'node:assert/strict';

const [url1, url2] = process.env.MACPOOL_URLS.split(',');
const model = 'claude-sonnet-4-5';
const client = new Anthropic({ baseURL: url1, apiKey: 'sk-agents', maxRetries: 0 });
const client2 = new Anthropic({ baseURL: url2, authToken: 'sk-agents', apiKey: null, maxRetries: 0 });
const tools = [{
  name: 'get_weather', description: 'Current weather of a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
}];
const log = (what, v) => console.log(JSON.stringify({ what, ...v }));

// Create (x-api-key) and create over Bearer auth on the other coordinator.
const m = await client.messages.create({ model, max_tokens: 50, system: 'Be brief.', messages: [{ role: 'user', content: 'hello from the sdk' }] });
assert.equal(m.type, 'message');
assert.equal(m.content[0].text, 'hello from the sdk');
assert.equal(m.stop_reason, 'end_turn');
assert.ok(m.usage.input_tokens > 0 && m.usage.cache_read_input_tokens >= 0);
const m2 = await client2.messages.create({ model, max_tokens: 2, messages: [{ role: 'user', content: 'one two three four' }] });
assert.equal(m2.stop_reason, 'max_tokens');
log('create', { id: m.id, usage: m.usage });

// Stream with thinking and a tool call.
const stream = client.messages.stream({
  model, max_tokens: 300, tools, thinking: { type: 'enabled', budget_tokens: 100 },
  messages: [{ role: 'user', content: 'what is the weather in Paris' }],
});
const events = [];
stream.on('streamEvent', (ev) => events.push(ev.type + (ev.delta?.type ? `/${ev.delta.type}` : '') + (ev.content_block ? `/${ev.content_block.type}` : '')));
const fm = await stream.finalMessage();
assert.deepEqual(fm.content.map((b) => b.type), ['thinking', 'tool_use']);
assert.equal(fm.content[0].thinking, 'The user asks something; answer it.');
assert.ok(fm.content[0].signature.length > 0);
const use = fm.content[1];
assert.equal(use.name, 'get_weather');
assert.deepEqual(use.input, { city: 'Paris' });
assert.equal(fm.stop_reason, 'tool_use');
assert.deepEqual(events, [
  'message_start', 'content_block_start/thinking', 'content_block_delta/thinking_delta', 'content_block_delta/thinking_delta',
  'content_block_delta/signature_delta', 'content_block_stop', 'content_block_start/tool_use',
  'content_block_delta/input_json_delta', 'content_block_delta/input_json_delta', 'content_block_stop',
  'message_delta', 'message_stop',
]);
log('stream', { events });

// Tool round trip, thinking blocks sent back as Claude Code does.
const history = [{ role: 'user', content: 'what is the weather in Paris' }, { role: 'assistant', content: fm.content }];
const r = await client.messages.create({
  model, max_tokens: 50, tools,
  messages: [...history, { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '21 C' }] }],
});
assert.equal(r.content[0].text, 'The tool said: 21 C');
const bad = await client.messages.create({
  model, max_tokens: 50, tools,
  messages: [...history, { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: [{ type: 'text', text: 'no network' }], is_error: true }] }],
});
assert.equal(bad.content[0].text, 'The tool said: Error: no network');
log('tool round trip', { text: r.content[0].text });

// Streaming text through the SDK's text helper.
let streamed = '';
const ts = client.messages.stream({ model, max_tokens: 50, messages: [{ role: 'user', content: 'streamed text here' }] });
ts.on('text', (d) => { streamed += d; });
await ts.done();
assert.equal(streamed, 'streamed text here');

// count_tokens.
const ct = await client.messages.countTokens({ model, system: 'Be brief.', tools, messages: [{ role: 'user', content: 'count these words' }] });
assert.ok(Number.isInteger(ct.input_tokens) && ct.input_tokens > 0);
log('count_tokens', ct);

// Errors in Anthropic's shape, as the SDK's classes.
await assert.rejects(client.messages.create({ model: 'claude-opus-9', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }),
  (e) => e instanceof Anthropic.NotFoundError && e.error?.error?.type === 'not_found_error' && e.message.includes(process.env.MACPOOL_MODEL));
await assert.rejects(client.messages.create({ model, max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AA==' } }] }] }),
  (e) => e instanceof Anthropic.BadRequestError && e.error?.error?.type === 'invalid_request_error');
await assert.rejects(new Anthropic({ baseURL: url1, apiKey: 'sk-wrong', maxRetries: 0 }).messages.create({ model, max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }),
  (e) => e instanceof Anthropic.AuthenticationError);

console.log(JSON.stringify({ ok: true }));
