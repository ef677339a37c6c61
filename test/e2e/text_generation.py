#!/usr/bin/env python3
"""kimi-run and the C API generate text from k3-tiny with the demo tokenizer.

Checks, on random weights (greedy unless said):
  - the streamed text is the tokenizer's decoding of the generated ids (bad
    UTF-8 replaced like Python's errors="replace");
  - a stop string made of the end of one token and the start of the next
    ends the text right before it;
  - the model's eos_token_id (a config compiled with one) ends generation at
    its first occurrence; --ignore-eos runs on;
  - the same seed samples the same tokens, another seed others;
  - the C example (kimi_chat_encode + kimi_generate) answers a chat with the
    text kimi-run --chat prints;
  - bad text input is refused with a message naming it.

usage: text_generation.py KIMI_COMPILE KIMI_RUN KIMI_TOKENIZE KIMI_CHAT_EMBED
                          MODEL.kimi CONFIG.json TOKENIZER_DIR WORKDIR
"""
import json
import os
import subprocess
import sys

(compile_, run, tokenize, chat_embed, model, config, tok_dir, work) = sys.argv[1:9]
os.makedirs(work, exist_ok=True)
weights = os.path.join(work, "k3-tiny-seed7.safetensors")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def kimi_run(*args, model_path=model, expect_ok=True):
    p = subprocess.run([run, model_path, *args], capture_output=True, timeout=300)
    if expect_ok and p.returncode != 0:
        sys.exit("kimi-run failed: %s\n%s" % (" ".join(args), p.stderr.decode(errors="replace")))
    return p


def parse(out):
    """(text bytes or None, ids, stop line) of kimi-run's stdout."""
    text = None
    if b"\ntext: " in b"\n" + out:
        start = (b"\n" + out).index(b"\ntext: ") + len(b"\ntext: ") - 1
        end = out.index(b"\ngenerated:", start)
        text = out[start:end]
    ids_line = [l for l in out.split(b"\n") if l.startswith(b"generated:")][0]
    ids = [int(x) for x in ids_line[len(b"generated:"):].split()]
    stop = [l for l in out.split(b"\n") if l.startswith(b"stop:")]
    return text, ids, (stop[0].decode() if stop else "")


SPECIAL = 384  # the demo tokenizer's special tokens start here


def token_bytes(ids):
    """The text kimi-run shows for `ids`: special tokens leave none."""
    ids = [t for t in ids if t < SPECIAL]
    p = subprocess.run([tokenize, "decode", "--tokenizer", tok_dir, *map(str, ids)],
                       capture_output=True, check=True)
    return p.stdout


base = ["--random-weights", "7", "--tokenizer", tok_dir]
first = kimi_run(*base, "--save-weights", weights, "--prompt",
                 "The model answers questions, and", "--max-new-tokens", "40")
text, ids, stop = parse(first.stdout)
check(len(ids) == 40 and stop == "stop: length", "40 tokens, stopped by the limit (%s)" % stop)
decoded = token_bytes(ids).decode("utf-8", errors="replace").encode()
check(text == decoded, "the streamed text is the decoding of the ids (special tokens left out)")
shown_special = parse(kimi_run("--weights", weights, "--tokenizer", tok_dir, "--prompt",
                               "The model answers questions, and", "--max-new-tokens", "40",
                               "--show-special").stdout)[0]
everything = subprocess.run([tokenize, "decode", "--tokenizer", tok_dir, *map(str, ids)],
                            capture_output=True, check=True).stdout
check(shown_special == everything.decode("utf-8", errors="replace").encode(),
      "--show-special shows the special tokens' text too")

# A stop string across a token boundary: the last byte of token i and the
# first of token i+1, both printable ASCII, first found at that boundary.
w = ["--weights", weights, "--tokenizer", tok_dir, "--prompt",
     "The model answers questions, and", "--max-new-tokens", "40"]
pieces = [token_bytes([t]) for t in ids]
offsets = [0]
for p_ in pieces:
    offsets.append(offsets[-1] + len(p_))
full = b"".join(pieces)
chosen = None
for i in range(len(ids) - 1):
    a, b = pieces[i], pieces[i + 1]
    if not a or not b or ids[i] >= 384 or ids[i + 1] >= 384:
        continue
    s = a[-1:] + b[:1]
    if all(32 < c < 127 for c in s) and full.find(s) == offsets[i + 1] - 1:
        chosen = (i, s)
        break
check(chosen is not None, "a stop string spanning two tokens exists in the text")
if chosen:
    i, s = chosen
    text2, ids2, stop2 = parse(kimi_run(*w, "--stop", s.decode()).stdout)
    shown = full[:offsets[i + 1] - 1].decode("utf-8", errors="replace").encode()
    check(text2 == shown,
          "--stop %r (tokens %d and %d) ends the text right before it" % (s.decode(), i, i + 1))
    check(stop2.startswith("stop: stop_string"), "reported as a stop string (%s)" % stop2)
    check(ids2 == ids[:i + 2], "generation stopped at the token that completed it")

# The model's eos_token_id: a config compiled with one.
eos = ids[5]
cfg = json.load(open(config))
cfg["eos_token_id"] = eos
cfg_path = os.path.join(work, "k3-tiny-eos.json")
json.dump(cfg, open(cfg_path, "w"))
eos_model = os.path.join(work, "k3-tiny-eos.kimi")
subprocess.run([compile_, cfg_path, "--target", "cpu", "-o", eos_model], check=True,
               capture_output=True, timeout=600)
_, ids3, stop3 = parse(kimi_run(*w, model_path=eos_model).stdout)
k = ids.index(eos)
check(ids3 == ids[:k + 1], "eos_token_id %d ends generation at its first occurrence (%d tokens)"
      % (eos, k + 1))
check(stop3 == "stop: stop_token (token %d)" % eos, "reported as the stop token (%s)" % stop3)
_, ids4, _ = parse(kimi_run(*w, "--ignore-eos", model_path=eos_model).stdout)
check(ids4 == ids, "--ignore-eos generates on")

# Seeds.
sample = ["--temperature", "1.0", "--top-p", "0.95"]
_, s5a, _ = parse(kimi_run(*w, *sample, "--seed", "5").stdout)
_, s5b, _ = parse(kimi_run(*w, *sample, "--seed", "5").stdout)
_, s6, _ = parse(kimi_run(*w, *sample, "--seed", "6").stdout)
check(s5a == s5b, "the same seed samples the same tokens")
check(s5a != s6, "another seed samples other tokens")
check(s5a != ids, "sampling at temperature 1 differs from greedy")

# The C API example against kimi-run --chat.
message = "Hello! Who are you? 你好"
chat_text, chat_ids, _ = parse(kimi_run("--weights", weights, "--tokenizer", tok_dir,
                                        "--chat", message, "--max-new-tokens", "16").stdout)
e = subprocess.run([chat_embed, "-t", tok_dir, "-n", "16", model, weights, message],
                   capture_output=True, timeout=300)
check(e.returncode == 0, "kimi-chat-embed runs (%s)" % e.stderr.decode(errors="replace").strip())
answer = e.stdout.split(b"assistant: ", 1)[-1]
check(answer == chat_text + b"\n", "the C API's chat answer is kimi-run --chat's text")

# Bad input.
p = subprocess.run([run, model, "--weights", weights, "--tokenizer", tok_dir,
                    "--prompt", b"ok \xff!"], capture_output=True)
check(p.returncode != 0 and b"not valid UTF-8: byte 0xff at offset 3" in p.stderr,
      "a prompt with invalid UTF-8 is refused naming the byte and offset")
p = subprocess.run([run, model, "--weights", weights, "--prompt-ids", "1", "--stop", "x"],
                   capture_output=True)
check(p.returncode != 0 and b"--stop needs --tokenizer" in p.stderr, "--stop without a tokenizer")
broken = os.path.join(work, "broken-tokenizer")
os.makedirs(broken, exist_ok=True)
with open(os.path.join(broken, "tiktoken.model"), "w") as f:
    f.write("".join("%s %d\n" % (__import__("base64").b64encode(bytes([b])).decode(), b)
                    for b in range(256)) + "YWI= 256\nYWI= 257\n")
p = subprocess.run([run, model, "--weights", weights, "--tokenizer", broken, "--prompt", "x"],
                   capture_output=True)
check(p.returncode != 0 and b"token 'ab' has two ranks" in p.stderr,
      "a tokenizer with a duplicated token is refused (%s)" % p.stderr.decode().strip())

print("%d failures" % len(failures))
sys.exit(1 if failures else 0)
