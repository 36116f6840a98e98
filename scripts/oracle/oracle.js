// The HuggingFace tokenizers reference (the Rust crate through @anush008/tokenizers), driven over a
// pipe by the tokenize/ tests and table generator. One JSON request per input line, one JSON answer
// per output line, in order:
//   {"encode": ["text", ...], "add_special": false}  -> {"ids": [[1, 2], ...]}   (needs argv[2])
//   {"nfc": ["text", ...]}                           -> {"nfc": ["text", ...]}
//   {"split": "regex", "texts": ["text", ...]}       -> {"pieces": [[[start, end], ...], ...]}
//      (Split pre-tokenizer, behavior "removed": the spans NOT matched, in code points)
// Usage: node oracle.js [tokenizer.json] < requests > answers
"use strict";
const path = require("path");
const readline = require("readline");
const tk = require(path.join(__dirname, "node_modules", "@anush008", "tokenizers"));

const tokenizer = process.argv[2] ? tk.Tokenizer.fromFile(process.argv[2]) : null;
const nfc = tk.nfcNormalizer();
const splitters = new Map();

function splitter(regex) {
  let s = splitters.get(regex);
  if (!s) {
    const spec = {
      version: "1.0", truncation: null, padding: null, added_tokens: [], normalizer: null,
      pre_tokenizer: { type: "Split", pattern: { Regex: regex }, behavior: "Removed", invert: false },
      post_processor: null, decoder: null,
      model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null,
        end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, vocab: {}, merges: [] },
    };
    s = tk.Tokenizer.fromString(JSON.stringify(spec)).getPreTokenizer();
    splitters.set(regex, s);
  }
  return s;
}

async function answer(req) {
  if (req.encode) {
    if (!tokenizer) throw new Error("encode needs a tokenizer.json argument");
    const encs = await tokenizer.encodeBatch(req.encode, { addSpecialTokens: !!req.add_special });
    return { ids: encs.map((e) => e.getIds()) };
  }
  if (req.nfc) return { nfc: req.nfc.map((t) => nfc.normalizeString(t)) };
  if (req.split) {
    const s = splitter(req.split);
    return { pieces: req.texts.map((t) => s.preTokenizeString(t).map((p) => p[1])) };
  }
  throw new Error("unknown request: " + Object.keys(req).join(","));
}

const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
let chain = Promise.resolve();
rl.on("line", (line) => {
  chain = chain.then(async () => {
    let out;
    try {
      out = await answer(JSON.parse(line));
    } catch (e) {
      out = { error: String(e && e.message ? e.message : e) };
    }
    process.stdout.write(JSON.stringify(out) + "\n");
  });
});
