// One llama.cpp run for the side-by-side bench (scripts/bench/side_by_side.py), through the
// prebuilt CPU library of the npm package node-llama-cpp: load MODEL, prefill the prompt token
// ids of PROMPT.json in one batch, then generate N tokens greedily, one at a time. Prints one
// JSON line: prompt and generated token counts, seconds and t/s of each phase.
//
//   node scripts/bench/llamacpp_run.mjs MODEL PROMPT.json N THREADS
import {readFileSync} from "node:fs";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const [model_path, prompt_path, n_arg, threads_arg] = process.argv.slice(2);
if (!model_path || !prompt_path || !n_arg || !threads_arg) {
    console.error("usage: llamacpp_run.mjs MODEL PROMPT.json N THREADS");
    process.exit(2);
}
const prompt = JSON.parse(readFileSync(prompt_path, "utf8"));
const n_gen = Number(n_arg);
const threads = Number(threads_arg);
if (!Array.isArray(prompt) || prompt.length === 0 || !(n_gen > 0) || !(threads > 0)) {
    console.error("llamacpp_run: PROMPT.json must be a non-empty array of ids, N and THREADS > 0");
    process.exit(2);
}

const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: model_path, gpuLayers: 0, useMmap: true});
const context = await model.createContext({
    contextSize: prompt.length + n_gen + 16,
    batchSize: prompt.length,
    threads: {ideal: threads, min: threads},
});
const seq = context.getSequence();
const t0 = performance.now();
let t_first = 0;
let generated = 0;
// The first token comes after the prompt's batch; the others are one decode step each.
for await (const token of seq.evaluate(prompt, {temperature: 0})) {
    void token;
    if (generated === 0) t_first = performance.now();
    if (++generated >= n_gen) break;
}
const t1 = performance.now();
const prefill_s = (t_first - t0) / 1e3;
const decode_s = (t1 - t_first) / 1e3;
console.log(JSON.stringify({
    engine: "llama.cpp",
    prompt_tokens: prompt.length,
    prefill_s,
    prefill_tps: prompt.length / prefill_s,
    generated,
    decode_s,
    decode_tps: (generated - 1) / decode_s,
}));
await context.dispose();
await model.dispose();
