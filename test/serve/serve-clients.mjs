// kimi-serve against clients no one here wrote: the official `openai`
// client (npm) and curl. Every greedy completion must equal the same prompt
// run alone through kimi-run, token for token. Also: streaming, 32
// concurrent requests, a client that disconnects mid-stream, a flood past
// the queue bound, malformed requests. Every wait is bounded.
//
// usage: node serve-clients.mjs KIMI_SERVE KIMI_RUN MODEL.kimi WEIGHTS TOKENIZER WORK
import OpenAI from "openai";
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

const [serveBin, runBin, model, weights, tokenizer, work] = process.argv.slice(2);
fs.mkdirSync(work, { recursive: true });
const failures = [];
function check(cond, what) {
  console.log((cond ? "ok   " : "FAIL ") + what);
  if (!cond) failures.push(what);
}
const deadline = Date.now() + 480_000; // the whole test
const servers = [];

async function startServer(extra) {
  const p = spawn(serveBin, [model, "--weights", weights, "--tokenizer", tokenizer,
                             "--host", "127.0.0.1", "--port", "0", ...extra],
                  { stdio: ["ignore", "pipe", "inherit"] });
  servers.push(p);
  const url = await new Promise((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error("kimi-serve did not start in 120 s")), 120_000);
    p.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    p.on("exit", (code) => { clearTimeout(timer); reject(new Error("kimi-serve exited " + code)); });
  });
  return { url, process: p };
}

// kimi-run's greedy ids for a prompt (text) or a chat message.
function kimiRun(kind, text, maxTokens) {
  const out = execFileSync(runBin, [model, "--weights", weights, "--tokenizer", tokenizer,
                                    kind === "chat" ? "--chat" : "--prompt", text,
                                    "--max-new-tokens", String(maxTokens)],
                           { maxBuffer: 1 << 26, timeout: 120_000 }).toString();
  const line = out.split("\n").find((l) => l.startsWith("generated:"));
  return line.slice("generated:".length).trim().split(/\s+/).filter(Boolean).map(Number);
}

const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

async function main() {
  const { url } = await startServer(["--slots", "4", "--served-model-name", "k3-tiny"]);
  const client = new OpenAI({ baseURL: url + "/v1", apiKey: "unused", maxRetries: 0,
                              timeout: 120_000 });

  // Models, health, metrics.
  const models = await client.models.list();
  check(models.data.length === 1 && models.data[0].id === "k3-tiny", "GET /v1/models lists k3-tiny");
  check((await fetch(url + "/health")).status === 200, "GET /health is 200");

  // One chat, whole and streamed, against kimi-run --chat.
  const message = "Hello! Who are you? 你好";
  const expected = kimiRun("chat", message, 12);
  const whole = await client.chat.completions.create({
    model: "k3-tiny", messages: [{ role: "user", content: message }],
    temperature: 0, max_tokens: 12 });
  check(same(whole.choices[0].token_ids, expected),
        "chat completion = kimi-run --chat, token for token");
  check(whole.usage.completion_tokens === expected.length, "usage counts the tokens");
  const stream = await client.chat.completions.create({
    model: "k3-tiny", messages: [{ role: "user", content: message }],
    temperature: 0, max_tokens: 12, stream: true, stream_options: { include_usage: true } });
  let streamed = "", finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.choices.length) {
      streamed += chunk.choices[0].delta?.content ?? "";
      finish = chunk.choices[0].finish_reason ?? finish;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  check(streamed === whole.choices[0].message.content && chunks > 1,
        `streamed chat text = the whole answer (${chunks} chunks)`);
  check(finish === whole.choices[0].finish_reason && usage?.completion_tokens === expected.length,
        "the stream ends with the finish reason and usage");

  // 32 concurrent requests: completions and chats, streamed or not, of
  // different prompts and lengths; each equals kimi-run alone.
  const jobs = [];
  for (let i = 0; i < 32; i++) {
    const kind = i % 2 ? "chat" : "prompt";
    const text = `Request ${i}: ` + "the model answers questions ".repeat(1 + (i % 5));
    const maxTokens = 4 + (i * 7) % 20;
    const streamIt = i % 3 === 0;
    jobs.push((async () => {
      let ids;
      if (kind === "chat") {
        if (streamIt) {
          // Streamed: compare the text instead (chunks carry no ids).
          const s = await client.chat.completions.create({ model: "k3-tiny",
            messages: [{ role: "user", content: text }], temperature: 0,
            max_tokens: maxTokens, stream: true });
          let t = "";
          for await (const c of s) t += c.choices[0]?.delta?.content ?? "";
          const w = await client.chat.completions.create({ model: "k3-tiny",
            messages: [{ role: "user", content: text }], temperature: 0, max_tokens: maxTokens });
          return { i, kind, text, maxTokens, ids: w.choices[0].token_ids,
                   streamOk: t === w.choices[0].message.content };
        }
        const r = await client.chat.completions.create({ model: "k3-tiny",
          messages: [{ role: "user", content: text }], temperature: 0, max_tokens: maxTokens });
        ids = r.choices[0].token_ids;
      } else {
        if (streamIt) {
          const s = await client.completions.create({ model: "k3-tiny", prompt: text,
            temperature: 0, max_tokens: maxTokens, stream: true });
          let t = "";
          for await (const c of s) t += c.choices[0]?.text ?? "";
          const w = await client.completions.create({ model: "k3-tiny", prompt: text,
            temperature: 0, max_tokens: maxTokens });
          return { i, kind, text, maxTokens, ids: w.choices[0].token_ids,
                   streamOk: t === w.choices[0].text };
        }
        const r = await client.completions.create({ model: "k3-tiny", prompt: text,
          temperature: 0, max_tokens: maxTokens });
        ids = r.choices[0].token_ids;
      }
      return { i, kind, text, maxTokens, ids, streamOk: true };
    })());
  }
  const results = await Promise.all(jobs);
  let equal = 0, streamsOk = 0;
  for (const r of results) {
    if (same(r.ids, kimiRun(r.kind, r.text, r.maxTokens))) equal++;
    else console.log(`  request ${r.i} differs from kimi-run`);
    if (r.streamOk) streamsOk++;
  }
  check(equal === 32, `32 concurrent requests each equal kimi-run alone (${equal}/32)`);
  check(streamsOk === 32, `their streamed texts equal the whole texts (${streamsOk}/32)`);

  // curl, whole and streamed.
  const body = JSON.stringify({ model: "k3-tiny", prompt: "Hello", max_tokens: 5, temperature: 0 });
  const curlWhole = JSON.parse(execFileSync("curl", ["-sS", "--max-time", "60", "-H",
    "Content-Type: application/json", "-d", body, url + "/v1/completions"]).toString());
  check(same(curlWhole.choices[0].token_ids, kimiRun("prompt", "Hello", 5)),
        "curl: a completion = kimi-run --prompt");
  const curlStream = execFileSync("curl", ["-sSN", "--max-time", "60", "-H",
    "Content-Type: application/json", "-d",
    JSON.stringify({ model: "k3-tiny", prompt: "Hello", max_tokens: 5, temperature: 0, stream: true }),
    url + "/v1/completions"]).toString();
  const events = curlStream.split("\n\n").filter((e) => e.startsWith("data: "));
  const text = events.filter((e) => e !== "data: [DONE]")
    .map((e) => JSON.parse(e.slice(6)).choices[0].text).join("");
  check(events[events.length - 1] === "data: [DONE]" && text === curlWhole.choices[0].text,
        "curl: server-sent events end with [DONE] and carry the same text");

  // Malformed requests: 4xx with an OpenAI error body naming the field.
  async function post(pathname, payload, raw) {
    const r = await fetch(url + pathname, { method: "POST",
      headers: { "Content-Type": "application/json" },
      body: raw ?? JSON.stringify(payload), signal: AbortSignal.timeout(30_000) });
    let json = null;
    try { json = await r.json(); } catch {}
    return { status: r.status, json };
  }
  const bad = [
    ["not JSON", "/v1/completions", null, "{\"prompt\": ", 400, null],
    ["a number for max_tokens", "/v1/completions", { prompt: "x", max_tokens: "ten" }, null, 400, "max_tokens"],
    ["an unknown model", "/v1/completions", { model: "gpt-9", prompt: "x" }, null, 404, "model"],
    ["prompt + max_tokens over the context", "/v1/completions", { prompt: "x", max_tokens: 5000 }, null, 400, "max_tokens"],
    ["an unknown field", "/v1/completions", { prompt: "x", frobnicate: 1 }, null, 400, "frobnicate"],
    ["a message without content", "/v1/chat/completions", { messages: [{ role: "user" }] }, null, 400, "messages[0].content"],
    ["an unknown role", "/v1/chat/completions", { messages: [{ role: "robot", content: "x" }] }, null, 400, "messages"],
    ["n = 2", "/v1/completions", { prompt: "x", n: 2 }, null, 400, "n"],
    ["a token id past the vocabulary", "/v1/completions", { prompt: [1, 99999] }, null, 400, "prompt"],
    ["a temperature of -1", "/v1/completions", { prompt: "x", temperature: -1 }, null, 400, null],
  ];
  for (const [what, p, payload, raw, status, param] of bad) {
    const r = await post(p, payload, raw);
    check(r.status === status && r.json?.error?.message && (param === null || r.json.error.param === param),
          `${what}: ${status} (got ${r.status} ${r.json?.error?.message ?? ""})`);
  }
  const missing = await fetch(url + "/v1/nothing");
  check(missing.status === 404 && (await missing.json()).error, "an unknown path: 404 with an error body");
  const big = await post("/v1/completions", null, JSON.stringify({ prompt: "x".repeat(9 << 20) }));
  check(big.status === 413, `a 9 MiB body: 413 (got ${big.status})`);
  const metrics = await (await fetch(url + "/metrics")).text();
  check(/kimi_requests_total\{outcome="finished"\} \d+/.test(metrics) &&
        /kimi_time_to_first_token_seconds_count \d+/.test(metrics),
        "GET /metrics: Prometheus text with requests and time to first token");

  // One slot, a queue of 2: a client that disconnects mid-stream frees the
  // slot; a flood past the queue gets 429s and the server keeps serving.
  const one = await startServer(["--slots", "1", "--max-queue", "2", "--served-model-name", "k3-tiny"]);
  const c1 = new OpenAI({ baseURL: one.url + "/v1", apiKey: "unused", maxRetries: 0, timeout: 120_000 });
  const abort = new AbortController();
  const long = await c1.completions.create({ model: "k3-tiny", prompt: "Tell a long story",
    max_tokens: 3000, temperature: 0.8, stream: true, ignore_eos: true }, { signal: abort.signal });
  let got = 0;
  try {
    for await (const c of long) { if (++got >= 3) { abort.abort(); break; } }
  } catch {}
  const t0 = Date.now();
  const after = await c1.completions.create({ model: "k3-tiny", prompt: "Hello", max_tokens: 4,
                                              temperature: 0 });
  check(after.choices[0].token_ids.length === 4 && Date.now() - t0 < 60_000,
        `after a client left mid-stream, the next request is served (${Date.now() - t0} ms)`);
  const m1 = await (await fetch(one.url + "/metrics")).text();
  check(/kimi_requests_total\{outcome="cancelled"\} 1/.test(m1), "the disconnected request counts as cancelled");
  const flood = await Promise.all(Array.from({ length: 12 }, (_, i) =>
    fetch(one.url + "/v1/completions", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ prompt: "flood " + i, max_tokens: 40, temperature: 0 }),
      signal: AbortSignal.timeout(240_000) }).then(async (r) => ({ status: r.status, json: await r.json() }))));
  const ok = flood.filter((r) => r.status === 200).length;
  const limited = flood.filter((r) => r.status === 429 && r.json.error.type === "rate_limit_error").length;
  check(ok >= 1 && limited >= 1 && ok + limited === 12,
        `a flood of 12 on 1 slot and a queue of 2: ${ok} served, ${limited} got 429`);
  const later = await c1.completions.create({ model: "k3-tiny", prompt: "Hello", max_tokens: 2, temperature: 0 });
  check(later.choices[0].token_ids.length === 2, "after the flood the server serves again");
  check(Date.now() < deadline, "finished within the test's time");
}

main().catch((e) => { failures.push(String(e)); console.log("FAIL " + e.stack); })
  .finally(() => {
    for (const s of servers) s.kill("SIGTERM");
    console.log(JSON.stringify({ failures: failures.length }));
    process.exit(failures.length ? 1 : 0);
  });
