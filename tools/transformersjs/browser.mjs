// Greedy generation with transformers.js in a browser, onnxruntime-web's WASM backend on the CPU: the page
// browser.html?model=/pkg&ids=1,2,3&n=16&dtype=fp32 served by tools/transformersjs/browser.py, which POSTs nothing and
// reads what this script POSTs to /result: {"tokens": [...], "logits": [[...]]} or {"error": "..."}. The logits are
// the rows transformers.js's generate() hands its logits processors (generate.mjs does the same in Node).
import {
    AutoModelForCausalLM,
    LogitsProcessor,
    LogitsProcessorList,
    Tensor,
    env,
} from './node_modules/@huggingface/transformers/dist/transformers.js';

class Recorder extends LogitsProcessor {
    constructor() {
        super();
        this.rows = [];
    }
    _call(inputIds, logits) {
        this.rows.push(Array.from(logits.data)); // [batch, vocab] float32, returned unchanged
        return logits;
    }
}

async function post(result) {
    document.getElementById('out').textContent = JSON.stringify(result).slice(0, 200);
    await fetch('/result', { method: 'POST', body: JSON.stringify(result) });
}

try {
    const query = new URLSearchParams(location.search);
    const ids = query.get('ids').split(',').map((s) => BigInt(s));
    env.allowRemoteModels = false; // the served folder only
    env.allowLocalModels = true;
    env.localModelPath = '/';
    env.useBrowserCache = false;
    // onnxruntime-web's WASM files from the pinned npm package, one thread (no cross-origin isolation needed)
    env.backends.onnx.wasm.wasmPaths = new URL('./node_modules/onnxruntime-web/dist/', location.href).href;
    env.backends.onnx.wasm.numThreads = 1;
    const model = await AutoModelForCausalLM.from_pretrained(query.get('model'), {
        dtype: query.get('dtype') ?? 'fp32',
        device: 'wasm',
    });
    const n = ids.length;
    const recorder = new Recorder();
    const processors = new LogitsProcessorList();
    processors.push(recorder);
    const out = await model.generate({
        input_ids: new Tensor('int64', BigInt64Array.from(ids), [1, n]),
        attention_mask: new Tensor('int64', new BigInt64Array(n).fill(1n), [1, n]),
        max_new_tokens: Number(query.get('n')),
        do_sample: false,
        eos_token_id: null,
        logits_processor: processors,
    });
    await post({ tokens: out.tolist()[0].slice(n).map(Number), logits: recorder.rows, agent: navigator.userAgent });
} catch (error) {
    await post({ error: String(error?.stack ?? error) });
}
