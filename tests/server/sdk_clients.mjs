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
