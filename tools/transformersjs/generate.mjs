// Greedy generation with transformers.js (Node, onnxruntime-node on the CPU) from a package folder that
// `ropeexport package DECODER --for transformers.js` wrote.
//
//   node generate.mjs PACKAGE_DIR --prompt-ids 1,2,3 --max-new-tokens 16 [--dtype fp32|fp16|q4]
//
// Prints one JSON object: {"tokens": [...new token ids...], "logits": [[...one row of vocab_size per step...]]}.
// The logits are the ones transformers.js's own generate() hands its logits processors at each step (the last
// position's row, as float32): it exposes no scores otherwise, so a processor that records and returns them unchanged
// is how they are read. eos does not stop the generation (eos_token_id null): the decoder's own loop, which the
// tokens are compared with, generates every requested token too.
import path from 'node:path';
import { AutoModelForCausalLM, LogitsProcessor, LogitsProcessorList, Tensor, env } from '@huggingface/transformers';

function parse(argv) {
    const args = { dtype: 'fp32', maxNewTokens: 16, promptIds: null, dir: null };
    for (let i = 0; i < argv.length; ++i) {
        const a = argv[i];
        if (a === '--prompt-ids') args.promptIds = argv[++i].split(',').map((s) => BigInt(s.trim()));
        else if (a === '--max-new-tokens') args.maxNewTokens = Number(argv[++i]);
        else if (a === '--dtype') args.dtype = argv[++i];
        else if (args.dir === null) args.dir = a;
        else throw new Error(`unexpected argument ${a}`);
    }
    if (args.dir === null || args.promptIds === null) {
        throw new Error('usage: node generate.mjs PACKAGE_DIR --prompt-ids 1,2,3 [--max-new-tokens N] [--dtype D]');
    }
    return args;
}

class Recorder extends LogitsProcessor {
    constructor() {
        super();
        this.rows = [];
    }
    _call(inputIds, logits) {
        // logits: [batch, vocab] float32 (the last position's row); recorded, returned unchanged
        this.rows.push(Array.from(logits.data));
        return logits;
    }
}

const args = parse(process.argv.slice(2));
const dir = path.resolve(args.dir);
env.allowRemoteModels = false; // a local folder only: nothing is fetched
env.localModelPath = ''; // the folder is given by its absolute path
const model = await AutoModelForCausalLM.from_pretrained(dir, {
    dtype: args.dtype,
    device: 'cpu',
    local_files_only: true,
});
const n = args.promptIds.length;
const inputIds = new Tensor('int64', BigInt64Array.from(args.promptIds), [1, n]);
const attentionMask = new Tensor('int64', new BigInt64Array(n).fill(1n), [1, n]);
const recorder = new Recorder();
const processors = new LogitsProcessorList();
processors.push(recorder);
const out = await model.generate({
    input_ids: inputIds,
    attention_mask: attentionMask,
    max_new_tokens: args.maxNewTokens,
    do_sample: false,
    eos_token_id: null,
    logits_processor: processors,
});
const all = out.tolist()[0].map(Number);
process.stdout.write(JSON.stringify({ tokens: all.slice(n), logits: recorder.rows }) + '\n');
await model.dispose();
