// Checks kimi's tokenizer against js-tiktoken (an independent tiktoken
// implementation from the npm registry), on a corpus of English, CJK, emoji,
// code, numbers, long whitespace runs and every special token:
//  A. OpenAI's cl100k_base vocabulary as js-tiktoken ships it, with its own
//     expression (JavaScript's, case variants spelt out) against kimi with
//     the original expression (`(?i:...)`); every special token allowed.
//  B. Kimi's expression on a vocabulary kimi-tokenize trains here (2,048
//     tokens and 256 special tokens, from this corpus and EXTRA files): the text is
//     split by the released expression with its class intersections
//     (JavaScript's v flag) and \p{Han} as Script=Han, each piece byte-pair
//     encoded by js-tiktoken.
// Both require identical ids and an exact round trip through kimi's decoder.
//
// usage: node tiktoken-crosscheck.mjs KIMI_TOKENIZE WORK_DIR [EXTRA...]
import { Tiktoken } from "js-tiktoken/lite";
import cl100k from "js-tiktoken/ranks/cl100k_base";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

const [kimiTokenize, work, ...extra] = process.argv.slice(2);
if (!work) {
  console.error("usage: node tiktoken-crosscheck.mjs KIMI_TOKENIZE WORK_DIR [EXTRA...]");
  process.exit(2);
}
fs.mkdirSync(work, { recursive: true });

const corpus = [
  ["english", "The quick brown fox jumps over the lazy dog. It's 5 o'clock; they'll say \"we've won\" and I'd agree, but you're wrong: he'd LEFT, she'S GONE."],
  ["contractions", "don't DON'T Don'T we're WE'RE it'll IT'LL you've YOU'VE I'm I'M she'd SHE'D 's 't"],
  ["chinese", "我们在北京大学学习自然语言处理。今天天气很好，我们去公园散步吧！「你好」、《红楼梦》"],
  ["japanese", "東京は日本の首都です。ひらがなとカタカナ、漢字を混ぜて書きます。ｶﾀｶﾅ"],
  ["korean", "안녕하세요, 세계! 한국어 텍스트를 토큰화합니다."],
  ["mixed-scripts", "Kimi模型supports多语言input: Ελληνικά, русский текст, العربية, עברית, हिन्दी, ไทย."],
  ["emoji", "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇩🇪🇯🇵 ❤️‍🔥 ✨🚀 and text🙂mixed"],
  ["code", "#include <stdio.h>\nint main(int argc, char **argv) {\n\tfor (int i = 0; i < argc; ++i)\n\t\tprintf(\"%s\\n\", argv[i]);\n\treturn 0;\n}\n\ndef f(x):\n    return {'a': [1, 2, 3], \"b\": x ** 2}  # comment\n"],
  ["numbers", "0 1 12 123 1234 12345 123456 3.14159 -42 1e-9 0x1F 1,000,000 ٣٤٥ ১২৩ 五百 ½ Ⅻ"],
  ["whitespace", "a  b   c    d\n\n\n\ne\t\t\tf \n \n  \r\n\r\n" + " ".repeat(200) + "x" + "\n".repeat(50) + "y" + " \t".repeat(40) + "\u3000\u00a0\u2003z   "],
  ["long-whitespace", " ".repeat(5000) + "end" + "\t".repeat(3000)],
  ["punctuation", "!!! ??? ... --- *** ((())) [[[]]] {{{}}} <<<>>> @#$%^&*_+=|\\/~` 「」『』…—–‘’“”"],
  ["accents", "naïve café résumé Ångström façade Zürich ñandú Łódź ÉTÉ ÀÉÎÕÜ e\u0301 a\u0308 A\u030a"],
  ["urls", "https://example.com/path?query=1&b=two#frag mailto:someone@example.org C:\\Users\\x\\file.txt"],
  ["repeats", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa abababababababababab " + "xyz".repeat(300)],
  ["json", "{\"role\": \"user\", \"content\": \"Hello\\u0041\", \"n\": [1.5e10, null, true]}"],
  ["single", "x"],
  ["newline-only", "\n"],
];

function run(args, input) {
  return execFileSync(kimiTokenize, args, { input, maxBuffer: 1 << 28 });
}

function kimiEncode(dir, extra, text) {
  const file = path.join(work, "input.txt");
  fs.writeFileSync(file, text);
  const out = run(["encode", "--tokenizer", dir, ...extra, file]).toString().trim();
  return out === "" ? [] : out.split(" ").map(Number);
}

function kimiDecode(dir, extra, ids) {
  return run(["decode", "--tokenizer", dir, ...extra], ids.join(" "));
}

let failures = 0, checked = 0, tokens = 0;
function compare(label, text, expected, dir, extra) {
  const got = kimiEncode(dir, extra, text);
  checked++;
  tokens += expected.length;
  const same = got.length === expected.length && got.every((v, i) => v === expected[i]);
  if (!same) {
    failures++;
    let i = 0;
    while (i < got.length && got[i] === expected[i]) i++;
    console.log(`FAIL ${label}: ids differ at ${i}: kimi [${got.slice(i, i + 8)}] ` +
                `js-tiktoken [${expected.slice(i, i + 8)}] (${got.length} vs ${expected.length} ids)`);
  }
  const back = kimiDecode(dir, extra, got);
  if (!back.equals(Buffer.from(text, "utf8"))) {
    failures++;
    console.log(`FAIL ${label}: kimi's decode of its ids is not the text`);
  }
}

// --- A: cl100k_base ------------------------------------------------------
const cl = new Tiktoken(cl100k);
const clDir = path.join(work, "cl100k_base");
fs.mkdirSync(clDir, { recursive: true });
{
  const lines = [];
  for (const [key, rank] of cl.rankMap)
    lines[rank] = Buffer.from(key.split(",").map(Number)).toString("base64") + " " + rank;
  fs.writeFileSync(path.join(clDir, "tiktoken.model"), lines.filter(Boolean).join("\n") + "\n");
  const added = {};
  for (const [text, id] of Object.entries(cl100k.special_tokens))
    added[id] = { content: text, special: true };
  fs.writeFileSync(path.join(clDir, "tokenizer_config.json"),
                   JSON.stringify({ added_tokens_decoder: added }));
}
// tiktoken's original cl100k_base expression.
const clPattern = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const clExtra = ["--pattern", clPattern, "--reserved-special", "0"];
const clSpecials = Object.keys(cl100k.special_tokens);
for (const [label, text] of corpus)
  compare(`cl100k/${label}`, text, cl.encode(text, "all"), clDir, clExtra);
const withSpecials = "Start" + clSpecials.join(" middle ") + "end" + clSpecials.join("");
compare("cl100k/specials", withSpecials, cl.encode(withSpecials, "all"), clDir, clExtra);
{
  // --special text: special-token text is ordinary text.
  const got = kimiEncode(clDir, [...clExtra, "--special", "text"], withSpecials);
  const expected = cl.encode(withSpecials, [], []);
  checked++;
  if (got.join(" ") !== expected.join(" ")) {
    failures++;
    console.log("FAIL cl100k/specials-as-text: ids differ");
  }
}

// --- B: Kimi's expression on a trained vocabulary -------------------------
const kimiVocabDir = path.join(work, "kimi-trained");
fs.writeFileSync(path.join(work, "train.txt"), corpus.map((c) => c[1]).join("\n"));
run(["train", "--corpus", path.join(work, "train.txt"),
     ...extra.flatMap((f) => ["--corpus", f]),
     "--vocab-size", "2048", "--kimi-specials", "256", "-o", kimiVocabDir]);
const kimiLines = fs.readFileSync(path.join(kimiVocabDir, "tiktoken.model"), "utf8")
  .split("\n").filter(Boolean);
const ranks = kimiLines.map((l) => { const [b64, r] = l.split(" "); return [b64, Number(r)]; });
ranks.sort((a, b) => a[1] - b[1]);
for (let i = 0; i < ranks.length; i++)
  if (ranks[i][1] !== i) throw new Error("the trained vocabulary has a gap at rank " + i);
const bpe = new Tiktoken({
  pat_str: "[\\s\\S]+", special_tokens: {},
  bpe_ranks: "x 0 " + ranks.map((r) => r[0]).join(" "),
});
const kimiConfig = JSON.parse(fs.readFileSync(path.join(kimiVocabDir, "tokenizer_config.json"), "utf8"));
const kimiSpecials = new Map();
for (const [id, entry] of Object.entries(kimiConfig.added_tokens_decoder))
  kimiSpecials.set(entry.content, Number(id));
// The released expression, in JavaScript: \p{Han} is \p{Script=Han}; the
// intersections are v-flag class expressions; \s is Unicode's White_Space
// (JavaScript's own \s adds U+FEFF and lacks U+0085); (?i:...) is spelt out
// as case variants (JavaScript has no inline flags), plus U+017F (long s),
// which case-insensitive matching of 's' also takes.
const ws = "\\t\\n\\v\\f\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
const contraction = "(?:'[sS\\u017f]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?";
const upperish = "[[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]--[\\p{Script=Han}]]";
const lowerish = "[[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]&&[^\\p{Script=Han}]]";
const kimiJs = new RegExp([
  "[\\p{Script=Han}]+",
  `[^\\r\\n\\p{L}\\p{N}]?${upperish}*${lowerish}+${contraction}`,
  `[^\\r\\n\\p{L}\\p{N}]?${upperish}+${lowerish}*${contraction}`,
  "\\p{N}{1,3}",
  ` ?[^${ws}\\p{L}\\p{N}]+[\\r\\n]*`,
  `[${ws}]*[\\r\\n]+`,
  `[${ws}]+(?![^${ws}])`,
  `[${ws}]+`,
].join("|"), "gv");
const specialRe = new RegExp([...kimiSpecials.keys()].sort((a, b) => b.length - a.length)
  .map((s) => s.replace(/[\\^$*+?.()|[\]{}]/g, "\\$&")).join("|"), "gu");
function kimiJsEncode(text) {
  const ids = [];
  const ordinary = (s) => {
    let covered = 0;
    for (const m of s.matchAll(kimiJs)) {
      if (m.index !== covered) throw new Error("the expression left a gap");
      ids.push(...bpe.encode(m[0], [], []));
      covered = m.index + m[0].length;
    }
    if (covered !== s.length) throw new Error("the expression left a tail");
  };
  let start = 0;
  for (const m of text.matchAll(specialRe)) {
    ordinary(text.slice(start, m.index));
    ids.push(kimiSpecials.get(m[0]));
    start = m.index + m[0].length;
  }
  ordinary(text.slice(start));
  return ids;
}
const kimiCorpus = [...corpus,
  ["white-space-chars", "a\u0085b c\u2028d\u2029e\u00a0 f\u3000g \u205fh"],
  ["long-s", "it'\u017f IT'\u017f"],
  ["cjk-punctuation", "你好。世界、再见！（括号）「引号」々〇"],
  ["specials", [...kimiSpecials.keys()].join(" x ") + "<|im_end|><|im_end|>"],
  ["chat", "<|im_system|>system<|im_middle|>You are Kimi.<|im_end|><|im_user|>user<|im_middle|>你好, Kimi!<|im_end|><|im_assistant|>assistant<|im_middle|>"],
];
for (const [label, text] of kimiCorpus)
  compare(`kimi/${label}`, text, kimiJsEncode(text), kimiVocabDir, []);

console.log(JSON.stringify({ texts: checked, tokens, failures }));
process.exit(failures ? 1 : 0);
