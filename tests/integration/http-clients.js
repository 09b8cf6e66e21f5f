// http-clients.js: drive phased's HTTP front end with the official openai
// and ollama npm packages; prints TAP.  Arguments: NODE_PREFIX BASE_URL MODEL.
'use strict';
const req = require('module').createRequire(process.argv[2] + '/');
const OpenAI = req('openai').OpenAI;
const { Ollama } = req('ollama');
const base = process.argv[3];
const model = process.argv[4];
let n = 0, failed = 0;

function ok(cond, desc, detail) {
  n++;
  console.log((cond ? 'ok ' : 'not ok ') + n + ' - ' + desc);
  if (!cond) {
    failed++;
    if (detail !== undefined)
      for (const l of JSON.stringify(detail).slice(0, 2000).split('\n'))
        console.log('#   ' + l);
  }
}

async function main() {
  const oa = new OpenAI({ baseURL: base + '/v1', apiKey: 'unused-key',
    maxRetries: 0 });
  const ol = new Ollama({ host: base });
  const prompt = 'Once upon a time';

  const c = await oa.completions.create({ model, prompt, max_tokens: 16,
    temperature: 0 });
  const text = c.choices[0].text;
  ok(c.object === 'text_completion' && text.length > 0 &&
    c.usage.completion_tokens === 16 && c.choices[0].finish_reason === 'length',
    'openai: completions.create', c);

  const s = await oa.completions.create({ model, prompt, max_tokens: 16,
    temperature: 0, stream: true, stream_options: { include_usage: true } });
  let st = '', usage = null, finish = null;
  for await (const ch of s) {
    if (ch.choices.length > 0) {
      st += ch.choices[0].text;
      if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
    }
    if (ch.usage) usage = ch.usage;
  }
  ok(st === text && finish === 'length' && usage &&
    usage.completion_tokens === 16, 'openai: streamed completion matches',
    { st, text, finish, usage });

  const models = await oa.models.list();
  const ids = [];
  for await (const m of models) ids.push(m.id);
  ok(ids.includes(model), 'openai: models.list', ids);

  try {
    await oa.completions.create({ model: 'no-such-model', prompt,
      max_tokens: 4 });
    ok(false, 'openai: unknown model raises NotFoundError');
  } catch (e) {
    ok(e.status === 404 && /no-such-model/.test(e.message),
      'openai: unknown model raises NotFoundError', String(e));
  }
  try {
    await oa.completions.create({ model, prompt, max_tokens: 4, n: 2 });
    ok(false, 'openai: n=2 raises BadRequestError');
  } catch (e) {
    ok(e.status === 400 && /'n'/.test(e.message),
      'openai: n=2 raises BadRequestError', String(e));
  }

  const g = await ol.generate({ model, prompt, raw: true, stream: false,
    options: { num_predict: 16, temperature: 0 } });
  ok(g.done === true && g.response === text && g.eval_count === 16 &&
    g.done_reason === 'length', 'ollama: generate', g);

  const gs = await ol.generate({ model, prompt, raw: true, stream: true,
    options: { num_predict: 16, temperature: 0 } });
  let gt = '', last = null;
  for await (const p of gs) { gt += p.response; last = p; }
  ok(gt === text && last && last.done === true &&
    typeof last.eval_duration === 'number', 'ollama: streamed generate',
    { gt, last });

  const tags = await ol.list();
  ok(tags.models.some((m) => m.name === model), 'ollama: list', tags);
  const ps = await ol.ps();
  ok(ps.models.some((m) => m.name === model), 'ollama: ps', ps);
  const show = await ol.show({ model });
  ok(show.capabilities.includes('completion') &&
    show.model_info['general.architecture'] === 'llama', 'ollama: show', show);
  try {
    await ol.generate({ model: 'no-such-model', prompt, stream: false });
    ok(false, 'ollama: unknown model raises');
  } catch (e) {
    ok(e.status_code === 404 && /no-such-model/.test(e.message),
      'ollama: unknown model raises', String(e));
  }

  const msgs = [{ role: 'system', content: 'You tell stories.' },
    { role: 'user', content: 'Tell me a story.' }];
  {
    const cc = await oa.chat.completions.create({ model, messages: msgs,
      max_tokens: 12, temperature: 0 });
    ok(cc.object === 'chat.completion' &&
      cc.choices[0].message.role === 'assistant' &&
      cc.usage.completion_tokens > 0, 'openai: chat.completions.create', cc);
    const cs = await oa.chat.completions.create({ model, messages: msgs,
      max_tokens: 12, temperature: 0, stream: true });
    let ct = '', role = null;
    for await (const ch of cs) {
      if (ch.choices[0] && ch.choices[0].delta.role) role = ch.choices[0].delta.role;
      if (ch.choices[0] && ch.choices[0].delta.content) ct += ch.choices[0].delta.content;
    }
    ok(role === 'assistant' && ct === cc.choices[0].message.content,
      'openai: streamed chat matches', { ct, role });
    const oc = await ol.chat({ model, messages: msgs, stream: false,
      options: { num_predict: 12, temperature: 0 } });
    ok(oc.done === true && oc.message.role === 'assistant' &&
      oc.message.content === ct, 'ollama: chat', oc);
    const ocs = await ol.chat({ model, messages: msgs, stream: true,
      options: { num_predict: 12, temperature: 0 } });
    let oct = '';
    for await (const p of ocs) oct += p.message.content;
    ok(oct === ct, 'ollama: streamed chat', oct);
  }
  console.log('1..' + n);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.log('not ok ' + (n + 1) + ' - unexpected error: ' + String(e));
  console.log('1..' + (n + 1));
  process.exit(1);
});
