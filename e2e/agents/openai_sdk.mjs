// Drives macpool's Responses API with the official openai client; run by
// TestOpenAINodeResponses with MACPOOL_URLS (two coordinators) and
// MACPOOL_MODEL. Prints one JSON line; exits non-zero on a failed check.
import OpenAI from 'openai';
import assert from 'node:assert/strict';

const [url1, url2] = process.env.MACPOOL_URLS.split(',');
const model = process.env.MACPOOL_MODEL;
const client = (url) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'sk-agents', maxRetries: 0 });
const c1 = client(url1);
const c2 = client(url2);
const tools = [{
  type: 'function', name: 'get_weather', description: 'Current weather of a city', strict: false,
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
}];
const log = (what, v) => console.log(JSON.stringify({ what, ...v }));

// Non-streamed.
const plain = await c1.responses.create({ model, input: 'hello non streamed', instructions: 'Be brief.', metadata: { t: '1' } });
assert.equal(plain.status, 'completed');
assert.equal(plain.output_text, 'hello non streamed');
assert.equal(plain.metadata.t, '1');
assert.ok(plain.usage.input_tokens > 0 && plain.usage.input_tokens_details.cached_tokens >= 0);
log('create', { id: plain.id, usage: plain.usage });

// Streamed, raw events of create({stream: true}).
const raw = await c1.responses.create({ model, input: 'hello streamed words', stream: true });
const rawTypes = [];
let text = '';
let seq = 0;
for await (const ev of raw) {
  rawTypes.push(ev.type);
  assert.equal(ev.sequence_number, seq++);
  if (ev.type === 'response.output_text.delta') text += ev.delta;
}
assert.equal(text, 'hello streamed words');
assert.deepEqual(rawTypes, [
  'response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added',
  'response.output_text.delta', 'response.output_text.delta', 'response.output_text.delta',
  'response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed',
]);
log('create stream', { events: rawTypes });

// The stream helper (strict accumulator) with reasoning and a tool call.
const helper = c1.responses.stream({ model, input: 'what is the weather in Paris', tools, reasoning: { effort: 'high' } });
const helperTypes = [];
helper.on('event', (ev) => helperTypes.push(ev.type));
const first = await helper.finalResponse();
assert.deepEqual(first.output.map((o) => o.type), ['reasoning', 'function_call']);
assert.equal(first.output[0].content[0].text, 'The user asks something; answer it.');
const call = first.output[1];
assert.equal(call.name, 'get_weather');
assert.deepEqual(JSON.parse(call.arguments), { city: 'Paris' });
assert.ok(helperTypes.includes('response.reasoning_text.delta') && helperTypes.includes('response.function_call_arguments.done'));
log('stream helper', { events: helperTypes });

// Tool round trip continued on the other coordinator.
const second = await c2.responses.create({
  model, previous_response_id: first.id, tools,
  input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temp_c":21}' }],
});
assert.equal(second.output_text, 'The tool said: {"temp_c":21}');
assert.equal(second.previous_response_id, first.id);
log('previous_response_id across coordinators', { first: first.id, second: second.id });

// Stateless round trip, as Codex runs it (store false, whole history).
const stateless = await c1.responses.create({
  model, store: false, tools,
  input: [{ role: 'user', content: 'what is the weather in Paris' }, ...first.output,
    { type: 'function_call_output', call_id: call.call_id, output: 'sunny' }],
});
assert.equal(stateless.output_text, 'The tool said: sunny');
await assert.rejects(c2.responses.retrieve(stateless.id), (e) => e.status === 404);

// Retrieve, input items, delete.
const got = await c2.responses.retrieve(second.id);
assert.equal(got.output_text, second.output_text);
const items = [];
for await (const it of c1.responses.inputItems.list(second.id, { order: 'asc' })) items.push(it.type);
assert.deepEqual(items, ['message', 'reasoning', 'function_call', 'function_call_output']);
await c1.responses.delete(first.id);
await assert.rejects(c2.responses.retrieve(first.id), (e) => e.status === 404);
log('retrieve/input_items/delete', { items });

// Structured output is passed on.
const js = await c1.responses.create({ model, input: 'json please', text: { format: { type: 'json_schema', name: 'x', schema: { type: 'object' } } } });
assert.equal(js.text.format.type, 'json_schema');

// Client mistakes are 4xx the client can read.
await assert.rejects(c1.responses.create({ model, input: 'x', tools: [{ type: 'web_search' }] }),
  (e) => e instanceof OpenAI.BadRequestError && /not supported/.test(e.message));
await assert.rejects(c1.responses.create({ model: 'gpt-9', input: 'x' }),
  (e) => e instanceof OpenAI.NotFoundError && e.message.includes(model));

console.log(JSON.stringify({ ok: true }));
