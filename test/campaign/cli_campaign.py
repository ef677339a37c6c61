#!/usr/bin/env python3
"""A seeded, bounded campaign of hostile inputs against kimi's tools.

Each case runs a built tool on a changed input, with a time limit, and is
classified: a crash (killed by a signal, or a sanitizer/abort exit), a hang
(past the limit), a wrong acceptance (exit 0 on input that must be refused)
or handled (exit 0, or a non-zero exit below 128 with a message on
stderr); a failing exit with nothing on stderr counts as a finding.

  configs   k3-tiny's config.json: bytes flipped, cut, spliced; fields set to
            values that must be refused (negative, zero, infinite, too big,
            the wrong type, a duplicated key), via `kimi-compile --report`
  ir        the dialect tests' .mlir files: bytes flipped, cut, spliced,
            brackets repeated, via `kimi-opt` (parse and verify)
  weights   a saved k3-tiny checkpoint: header bytes flipped or cut, via
            `kimi-run` (a header change must never run silently shifted)
  cli       random argument lists over every flag of kimi-compile,
            kimi-run and kimi-inspect, with odd values and paths

Usage: cli_campaign.py BIN_DIR SRC_DIR WORK_DIR [--seed S] [--cases N]
Prints one JSON line per campaign and exits 1 on any crash, hang or wrong
acceptance (each printed with the command to reproduce it).
"""
import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys

LIMIT_S = 30


def run(cmd, stdin=None):
    try:
        p = subprocess.run(cmd, stdin=stdin, capture_output=True, timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        return "hang", ""
    err = p.stderr.decode(errors="replace")
    if p.returncode < 0 or p.returncode >= 128 or "Sanitizer" in err or \
            "Stack dump" in err or "terminate called" in err or "Assertion" in err:
        return "crash", err[-2000:]
    if p.returncode == 0:
        return "ok", err
    if not err.strip():
        return "silent", ""  # a failure that says nothing
    return "refused", err


def mutate_bytes(rng, data):
    data = bytearray(data)
    kind = rng.randrange(5)
    if kind == 0 and data:  # flip 1-4 bytes
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind == 1:  # cut
        data = data[:rng.randrange(len(data) + 1)]
    elif kind == 2 and data:  # splice a piece elsewhere
        a = rng.randrange(len(data))
        b = min(len(data), a + rng.randint(1, 64))
        at = rng.randrange(len(data))
        data[at:at] = data[a:b]
    elif kind == 3 and data:  # delete a piece
        a = rng.randrange(len(data))
        del data[a:a + rng.randint(1, 32)]
    else:  # repeat one bracket many times
        at = rng.randrange(len(data) + 1)
        data[at:at] = rng.choice([b"[", b"{", b"(", b"<", b"]"]) * rng.choice([10, 1000, 100000])
    return bytes(data)


class Campaign:
    def __init__(self, name):
        self.name, self.inputs, self.counts, self.findings = name, 0, {}, []

    def record(self, outcome, cmd, detail, must_refuse=False):
        self.inputs += 1
        if must_refuse and outcome == "ok":
            outcome = "accepted"
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        if outcome in ("crash", "hang", "accepted", "silent"):
            self.findings.append({"outcome": outcome, "command": " ".join(cmd),
                                  "detail": detail[-600:]})

    def report(self, seed):
        bad = sum(self.counts.get(k, 0) for k in ("crash", "hang", "accepted", "silent"))
        print(json.dumps({"campaign": self.name, "seed": seed, "inputs": self.inputs,
                          "crashes": self.counts.get("crash", 0),
                          "hangs": self.counts.get("hang", 0),
                          "accepted": self.counts.get("accepted", 0),
                          "silent_failures": self.counts.get("silent", 0),
                          "refused": self.counts.get("refused", 0),
                          "ran": self.counts.get("ok", 0)}))
        for f in self.findings:
            print("  FINDING " + json.dumps(f), file=sys.stderr)
        return bad


# Fields of k3-tiny's config and values each must refuse.
BAD_VALUES = [-1, 0, 1e400, -1e400, 2 ** 63, 1.5, "x", None, [], {}, True]
POSITIVE_INT_FIELDS = ["hidden_size", "num_hidden_layers", "num_attention_heads",
                       "vocab_size", "intermediate_size", "moe_intermediate_size",
                       "n_routed_experts", "num_experts_per_token", "kv_lora_rank",
                       "max_position_embeddings"]
# Fields with a default, for which null is "not set" (ModelConfig.cpp's
# positiveOr).
OPTIONAL_FIELDS = {"max_position_embeddings", "num_key_value_heads"}


def configs(c, rng, tools, src, work, cases):
    base = open(os.path.join(src, "models/k3-tiny.json"), "rb").read()
    # K3 configs nest the language model's fields under text_config.
    text = lambda d: d.get("text_config", d)
    fields = [f for f in POSITIVE_INT_FIELDS if f in text(json.loads(base))]
    assert fields, "no known field in k3-tiny.json"
    path = os.path.join(work, "config.json")
    for i in range(cases):
        must_refuse = False
        if i % 2 == 0:
            data = mutate_bytes(rng, base)
        else:
            d = json.loads(base)
            field = rng.choice(fields)
            if rng.random() < 0.2:  # a duplicated key, the same value
                data = json.dumps(d).encode().replace(
                    b'"%s":' % field.encode(),
                    b'"%s": %d, "%s":' % (field.encode(), text(d)[field], field.encode()), 1)
            else:
                # null means "not set" (HF's convention): refused only for
                # a required field.
                bad = [v for v in BAD_VALUES if v is not None or field not in OPTIONAL_FIELDS]
                text(d)[field] = rng.choice(bad)
                data = json.dumps(d).encode()
            must_refuse = True
        with open(path, "wb") as f:
            f.write(data)
        cmd = [tools["kimi-compile"], path, "--report"]
        outcome, detail = run(cmd)
        if outcome in ("crash", "hang", "silent") or (must_refuse and outcome == "ok"):
            keep = os.path.join(work, "config-%d.json" % i)
            shutil.copy(path, keep)
            cmd = [tools["kimi-compile"], keep, "--report"]
        c.record(outcome, cmd, detail, must_refuse)


def ir(c, rng, tools, src, work, cases):
    files = []
    for root, _, names in os.walk(os.path.join(src, "test/Dialect")):
        files += [os.path.join(root, n) for n in names if n.endswith(".mlir")]
    files.sort()
    path = os.path.join(work, "input.mlir")
    for i in range(cases):
        data = mutate_bytes(rng, open(rng.choice(files), "rb").read())
        with open(path, "wb") as f:
            f.write(data)
        cmd = [tools["kimi-opt"], path, "-split-input-file", "-o", "/dev/null"]
        outcome, detail = run(cmd)
        if outcome != "refused" and outcome != "ok":
            keep = os.path.join(work, "input-%d.mlir" % i)
            shutil.copy(path, keep)
            cmd[1] = keep
        c.record(outcome, cmd, detail)


def weights(c, rng, tools, src, work, cases):
    model = os.path.join(work, "m.kimi")
    saved = os.path.join(work, "w.safetensors")
    subprocess.run([tools["kimi-compile"], os.path.join(src, "models/k3-tiny.json"),
                    "--target", "cpu", "-o", model], check=True)
    subprocess.run([tools["kimi-run"], model, "--random-weights", "5", "--prompt-random", "2",
                    "--max-new-tokens", "0", "--save-weights", saved], check=True,
                   capture_output=True)
    base = open(saved, "rb").read()
    header_end = 8 + int.from_bytes(base[:8], "little")
    path = os.path.join(work, "changed.safetensors")
    for i in range(cases):
        data = bytearray(base)
        kind = rng.randrange(3)
        if kind == 0:  # a header byte
            at = rng.randrange(header_end)
            old = data[at]
            while data[at] == old:
                data[at] = rng.randrange(256)
        elif kind == 1:  # cut anywhere
            data = data[:rng.randrange(len(data))]
        else:  # bytes appended
            data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
        with open(path, "wb") as f:
            f.write(data)
        cmd = [tools["kimi-run"], model, "--weights", path, "--prompt-random", "2",
               "--max-new-tokens", "1"]
        outcome, detail = run(cmd)
        # A header change may leave a valid file (a digit of the metadata, a
        # space of padding): accepted only if the tensors' table is the same.
        must_refuse = False
        if outcome == "ok":
            try:
                n = int.from_bytes(data[:8], "little")
                same = json.loads(data[8:8 + n]) == json.loads(base[8:header_end]) and \
                    len(data) - 8 - n == len(base) - header_end
                must_refuse = not same
            except Exception:
                must_refuse = True
        if outcome not in ("refused",) and (outcome != "ok" or must_refuse):
            keep = os.path.join(work, "changed-%d.safetensors" % i)
            shutil.copy(path, keep)
            cmd[3] = keep
        c.record(outcome, cmd, detail, must_refuse)


FLAGS = {
    "kimi-compile": ["--target", "--emit", "-o", "--report", "--context", "--grid",
                     "--strategy", "--batch", "--prefill-chunk", "--activations",
                     "--weights", "--mxfp4-experts", "--gpu-kda-kernels", "--help",
                     "--version", "--bogus", "--tp-group", "--node-devices",
                     "--device-memory-gb", "--prefill-tokens", "--decode-batch",
                     "--cache-lengths", "--prefill-logits", "--front-pipeline",
                     "--gpu-gemv-max-m", "--sorted-experts-min-tokens",
                     "--allow-unknown-fields"],
    "kimi-run": ["--weights", "--random-weights", "--prompt-ids", "--prompt-random",
                 "--max-new-tokens", "--save-weights", "--dump-logits", "--seed",
                 "--rank", "--store", "--device", "--allow-nonfinite", "--help", "--bogus"],
    "kimi-inspect": ["--weights-only", "--help", "--bogus"],
}
VALUES = ["", "0", "-1", "1", "7", "99999999999999999999", "1e400", "nan", "cpu",
          "sm_90a", "bf16", "f32", "tp", "/dev/null", "/dev/full", "/nonexistent-dir/x",
          "/", "1,2,3", ",,", "-5,2"]


def cli(c, rng, tools, src, work, cases):
    model = os.path.join(work, "m.kimi")
    config = os.path.join(src, "models/k3-tiny.json")
    for i in range(cases):
        tool = rng.choice(sorted(FLAGS))
        args = [rng.choice([model, config, "/dev/null", "/nonexistent-dir/x", work])]
        for _ in range(rng.randint(0, 5)):
            args.append(rng.choice(FLAGS[tool]))
            if rng.random() < 0.8:
                args.append(rng.choice(VALUES + [model, os.path.join(work, "out-%d" % i)]))
        if tool == "kimi-run" and rng.random() < 0.7 and "--max-new-tokens" not in args:
            args += ["--max-new-tokens", "1"]
        cmd = [tools[tool]] + args
        outcome, detail = run(cmd)
        c.record(outcome, cmd, detail)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir")
    ap.add_argument("src_dir")
    ap.add_argument("work_dir")
    ap.add_argument("--seed", type=int,
                    default=int(os.environ["KIMI_CAMPAIGN_SEED"])
                    if os.environ.get("KIMI_CAMPAIGN_SEED") else None)
    ap.add_argument("--cases", type=int, default=200)
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(2 ** 32)
    tools = {t: os.path.join(a.bin_dir, t) for t in
             ("kimi-compile", "kimi-opt", "kimi-run", "kimi-inspect")}
    shutil.rmtree(a.work_dir, ignore_errors=True)
    os.makedirs(a.work_dir)
    bad = 0
    for name, fn in (("configs", configs), ("ir", ir), ("weights", weights), ("cli", cli)):
        rng = random.Random("%d-%s" % (seed, name))
        c = Campaign(name)
        fn(c, rng, tools, a.src_dir, a.work_dir, a.cases)
        bad += c.report(seed)
    print("seed %d: %s" % (seed, "no findings" if not bad else "%d findings (above)" % bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
