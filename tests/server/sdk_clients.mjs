// Real-client tests: the official `openai` and `@anthropic-ai/sdk` npm packages against
// `magnetar serve` on loopback with the tiny model. Each check asserts the shapes the SDK
// parses (not just status codes). Tool-call turns use the server's test hook
// (--test-hooks: the request field x_magnetar_forced_output replaces sampling).
//
// usage: node sdk_clients.mjs <path of the magnetar binary>
import { spawn } from 'node:child_process';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '..', '..', 'package.json'));
let OpenAI, Anthropic;
try {
  const o = require('openai');
  OpenAI = o.default ?? o;
  const a = require('@anthropic-ai/sdk');
  Anthropic = a.default ?? a;
} catch (e) {
  console.log(`skipped: npm packages missing (run npm install): ${e.message}`);
  process.exit(77);
}

const bin = process.argv[2];
if (!bin) {
  console.error('usage: node sdk_clients.mjs <magnetar binary>');
  process.exit(2);
}

const DSML =
  'Let me check.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n' +
  '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n' +
  '<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n' +
  '</｜DSML｜invoke>\n</｜DSML｜tool_calls>';
const EXPECTED_ARGS = { city: 'Paris', days: 3 };

function startServer() {
  return new Promise((resolve, reject) => {
    const proc = spawn(bin, ['serve', '--port', '0', '--ctx', '1024', '-n', '8', '-t', '2',
                             '--test-hooks', '--api-key', 'test-key'],
                       { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    proc.stdout.on('data', (d) => {
      out += d.toString();
      const m = out.match(/listening on port (\d+)/);
      if (m) resolve({ proc, port: Number(m[1]) });
    });
    proc.on('exit', (code) => reject(new Error(`server exited with ${code}`)));
  });
}

const checks = [];
const check = (name, fn) => checks.push({ name, fn });

const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } } },
  },
};

// ---------------------------------------------------------------------------------------------
// OpenAI
// ---------------------------------------------------------------------------------------------

check('openai models', async ({ openai }) => {
  const list = await openai.models.list();
  const ids = [];
  for await (const m of list) ids.push(m.id);
  assert.deepEqual(ids, ['deepseek-v4-flash']);
  const one = await openai.models.retrieve('deepseek-v4-flash');
  assert.equal(one.object, 'model');
});

check('openai chat plain', async ({ openai }) => {
  const r = await openai.chat.completions.create({
    model: 'deepseek-v4-flash', max_tokens: 4, seed: 3, thinking: false,
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello' }],
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
});

check('openai chat streaming with reasoning and usage', async ({ openai }) => {
  const stream = await openai.chat.completions.create({
    model: 'deepseek-v4-flash', max_tokens: 5, stream: true, stream_options: { include_usage: true },
    messages: [{ role: 'user', content: 'Think about it' }],
  });
  let role = null, reasoning = '', usage = null, finish = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.delta.role) role = c.delta.role;
    if (c.delta.reasoning_content) reasoning += c.delta.reasoning_content;
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.equal(role, 'assistant');
  assert.ok(reasoning.length > 0, 'thinking is the default: reasoning_content deltas');
  assert.ok(finish);
  assert.ok(usage && usage.completion_tokens <= 5);
});

check('openai tools, streaming tool calls and tool-result round trip', async ({ openai }) => {
  const base = {
    model: 'deepseek-v4-flash', max_tokens: 200, thinking: false, tools: [weatherTool],
    messages: [{ role: 'user', content: 'Weather in Paris?' }],
  };
  const r = await openai.chat.completions.create({ ...base, x_magnetar_forced_output: DSML });
  const msg = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(msg.content, 'Let me check.');
  assert.equal(msg.tool_calls.length, 1);
  assert.match(msg.tool_calls[0].id, /^call_[0-9a-f]{32}$/);
  assert.equal(msg.tool_calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(msg.tool_calls[0].function.arguments), EXPECTED_ARGS);

  // The SDK's stream helper assembles the tool-call deltas.
  const stream = openai.chat.completions.stream({ ...base, x_magnetar_forced_output: DSML });
  const final = await stream.finalChatCompletion();
  const call = final.choices[0].message.tool_calls[0];
  assert.equal(call.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.function.arguments), EXPECTED_ARGS);
  assert.equal(final.choices[0].finish_reason, 'tool_calls');

  // Round trip: everything before the tool result comes from the live cache.
  const r2 = await openai.chat.completions.create({
    ...base, max_tokens: 2,
    messages: [...base.messages, final.choices[0].message,
               { role: 'tool', tool_call_id: call.id, content: 'sunny, 21 C' }],
  });
  assert.equal(typeof r2.choices[0].message.content, 'string');
  const cached = r2.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached >= r.usage.prompt_tokens + r.usage.completion_tokens,
            `cached ${cached} < ${r.usage.prompt_tokens} + ${r.usage.completion_tokens}`);
});

check('openai completions', async ({ openai }) => {
  const r = await openai.completions.create({ model: 'deepseek-v4-flash', prompt: 'Once', max_tokens: 3 });
  assert.equal(r.object, 'text_completion');
  assert.equal(typeof r.choices[0].text, 'string');
  const s = await openai.completions.create({ model: 'deepseek-v4-flash', prompt: 'Once', max_tokens: 3, stream: true });
  let n = 0;
  for await (const c of s) { assert.equal(c.object, 'text_completion'); n++; }
  assert.ok(n >= 1);
});

check('openai errors', async ({ openai, port }) => {
  await assert.rejects(openai.chat.completions.create({ model: 'x', max_tokens: 'many', messages: [] }),
                       (e) => e.status === 400 && typeof e.message === 'string');
  const bad = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e.status === 401);
});

// ---------------------------------------------------------------------------------------------
// OpenAI Responses
// ---------------------------------------------------------------------------------------------

const responsesWeatherTool = {
  type: 'function', name: 'get_weather', description: 'Weather of a city', strict: false,
  parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } } },
};

check('openai responses plain', async ({ openai }) => {
  const r = await openai.responses.create({
    model: 'deepseek-v4-flash', input: 'Hello', instructions: 'Be brief.', max_output_tokens: 4,
    reasoning: { effort: 'none' },
  });
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_[0-9a-f]{24}$/);
  assert.ok(['completed', 'incomplete'].includes(r.status));
  assert.equal(typeof r.output_text, 'string');  // assembled by the SDK from output items
  assert.ok(r.usage.input_tokens > 0);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  assert.equal(typeof r.usage.input_tokens_details.cached_tokens, 'number');
  assert.equal(r.usage.output_tokens_details.reasoning_tokens, 0);
  const again = await openai.responses.retrieve(r.id);
  assert.equal(again.id, r.id);
});

check('openai responses streaming with reasoning summary', async ({ openai }) => {
  const stream = await openai.responses.create({
    model: 'deepseek-v4-flash', input: 'Hi', max_output_tokens: 40, stream: true,
    reasoning: { effort: 'high', summary: 'auto' }, x_magnetar_forced_output: 'hmm</think>Hi there.',
  });
  const types = [];
  let seq = 0, text = '', summary = '', completed = null;
  for await (const e of stream) {
    assert.equal(e.sequence_number, seq++);
    if (types.at(-1) !== e.type) types.push(e.type);
    if (e.type === 'response.output_text.delta') text += e.delta;
    if (e.type === 'response.reasoning_summary_text.delta') summary += e.delta;
    if (e.type === 'response.completed') completed = e.response;
  }
  assert.deepEqual(types, [
    'response.created', 'response.in_progress',
    'response.output_item.added', 'response.reasoning_summary_part.added',
    'response.reasoning_summary_text.delta', 'response.reasoning_summary_text.done',
    'response.reasoning_summary_part.done', 'response.output_item.done',
    'response.output_item.added', 'response.content_part.added', 'response.output_text.delta',
    'response.output_text.done', 'response.content_part.done', 'response.output_item.done',
    'response.completed']);
  assert.equal(text, 'Hi there.');
  assert.equal(summary, 'hmm');
  assert.deepEqual(completed.output.map((o) => o.type), ['reasoning', 'message']);
  assert.ok(completed.usage.output_tokens_details.reasoning_tokens > 0);

  // The SDK's stream helper accumulates the same events into the final response.
  const helper = openai.responses.stream({
    model: 'deepseek-v4-flash', input: 'Hi', max_output_tokens: 40,
    reasoning: { effort: 'high', summary: 'auto' }, x_magnetar_forced_output: 'hmm</think>Hi there.',
  });
  let deltas = '';
  helper.on('response.output_text.delta', (e) => { deltas += e.delta; });
  const final = await helper.finalResponse();
  assert.equal(deltas, 'Hi there.');
  assert.equal(final.output[1].content[0].text, 'Hi there.');
  assert.equal(final.output[0].summary[0].text, 'hmm');
});

check('openai responses function tools, streaming, output round trip, previous_response_id', async ({ openai }) => {
  const base = {
    model: 'deepseek-v4-flash', max_output_tokens: 200, reasoning: { effort: 'none' },
    tools: [responsesWeatherTool], input: [{ role: 'user', content: 'Weather in Paris?' }],
  };
  const r = await openai.responses.create({ ...base, x_magnetar_forced_output: DSML });
  assert.equal(r.status, 'completed');
  assert.equal(r.output_text, 'Let me check.');
  const fc = r.output.find((o) => o.type === 'function_call');
  assert.match(fc.id, /^fc_[0-9a-f]{24}$/);
  assert.match(fc.call_id, /^call_[0-9a-f]{32}$/);
  assert.equal(fc.name, 'get_weather');
  assert.deepEqual(JSON.parse(fc.arguments), EXPECTED_ARGS);

  // Streaming: the SDK assembles the argument deltas into the function_call item.
  const helper = openai.responses.stream({ ...base, x_magnetar_forced_output: DSML });
  let argDeltas = '';
  helper.on('response.function_call_arguments.delta', (e) => { argDeltas += e.delta; });
  const final = await helper.finalResponse();
  const sfc = final.output.find((o) => o.type === 'function_call');
  assert.deepEqual(JSON.parse(argDeltas), EXPECTED_ARGS);
  assert.deepEqual(JSON.parse(sfc.arguments), EXPECTED_ARGS);
  assert.equal(sfc.name, 'get_weather');

  // Round trip replaying the full input (as Codex does): the KV up to the output is reused.
  const r2 = await openai.responses.create({
    ...base, max_output_tokens: 2,
    input: [...base.input, ...final.output,
            { type: 'function_call_output', call_id: sfc.call_id, output: 'sunny, 21 C' }],
  });
  const cached = r2.usage.input_tokens_details.cached_tokens;
  assert.ok(cached >= final.usage.input_tokens + final.usage.output_tokens,
            `cached ${cached} < ${final.usage.input_tokens} + ${final.usage.output_tokens}`);

  // The same continuation through previous_response_id.
  const r3 = await openai.responses.create({
    ...base, max_output_tokens: 2, previous_response_id: final.id,
    input: [{ type: 'function_call_output', call_id: sfc.call_id, output: 'sunny, 21 C' }],
  });
  assert.equal(r3.previous_response_id, final.id);
  assert.equal(r3.usage.input_tokens, r2.usage.input_tokens);
  await assert.rejects(openai.responses.create({ ...base, previous_response_id: 'resp_unknown' }),
                       (e) => e.status === 400 && e.code === 'previous_response_not_found');
});

// ---------------------------------------------------------------------------------------------
// Anthropic
// ---------------------------------------------------------------------------------------------

check('anthropic messages', async ({ anthropic }) => {
  const m = await anthropic.messages.create({
    model: 'deepseek-v4-flash', max_tokens: 4, system: 'Be brief.',
    messages: [{ role: 'user', content: 'Hello' }],
  });
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.ok(Array.isArray(m.content) && m.content.length >= 1);
  assert.ok(['end_turn', 'max_tokens'].includes(m.stop_reason));
  assert.equal(typeof m.usage.cache_read_input_tokens, 'number');
});

check('anthropic streaming with thinking and tool_use, count_tokens', async ({ anthropic }) => {
  const req = {
    model: 'deepseek-v4-flash', max_tokens: 300, thinking: { type: 'enabled', budget_tokens: 1024 },
    tools: [{ name: 'get_weather', description: 'Weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }],
    messages: [{ role: 'user', content: 'Weather in Paris?' }],
  };
  const count = await anthropic.messages.countTokens(req);
  assert.ok(count.input_tokens > 0);
  const stream = anthropic.messages.stream({ ...req, x_magnetar_forced_output: 'hmm</think>' + DSML });
  const kinds = [];
  stream.on('streamEvent', (e) => kinds.push(e.type));
  const final = await stream.finalMessage();
  assert.deepEqual(final.content.map((b) => b.type), ['thinking', 'text', 'tool_use']);
  assert.equal(final.content[0].thinking, 'hmm');
  assert.equal(final.content[1].text, 'Let me check.');
  const tu = final.content[2];
  assert.match(tu.id, /^toolu_[0-9a-f]{32}$/);
  assert.equal(tu.name, 'get_weather');
  assert.deepEqual(tu.input, EXPECTED_ARGS);
  assert.equal(final.stop_reason, 'tool_use');
  assert.equal(final.usage.cache_read_input_tokens + final.usage.cache_creation_input_tokens, count.input_tokens);
  assert.equal(kinds[0], 'message_start');
  assert.equal(kinds.at(-1), 'message_stop');

  // Tool result round trip reuses the cache.
  const r2 = await anthropic.messages.create({
    ...req, max_tokens: 2,
    messages: [...req.messages, { role: 'assistant', content: final.content },
               { role: 'user', content: [{ type: 'tool_result', tool_use_id: tu.id, content: 'sunny' }] }],
  });
  assert.ok(r2.usage.cache_read_input_tokens >= count.input_tokens + final.usage.output_tokens - 1,
            `cache_read ${r2.usage.cache_read_input_tokens}`);
});

// ---------------------------------------------------------------------------------------------

const { proc, port } = await startServer();
const openai = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'test-key', maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: `http://127.0.0.1:${port}`, apiKey: 'test-key', maxRetries: 0 });
let failed = 0;
for (const c of checks) {
  try {
    await c.fn({ openai, anthropic, port });
    console.log(`ok   ${c.name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${c.name}: ${e.stack || e}`);
  }
}
proc.kill('SIGTERM');
process.exit(failed ? 1 : 0);
