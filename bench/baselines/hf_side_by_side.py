#!/usr/bin/env python3
"""The same checkpoint through Hugging Face's Kimi Linear modeling code and
through kimi: logits side by side (docs/checkpoints.md, "Side by side").

Loads a checkpoint directory written in the released Kimi Linear layout
(`kimi-checkpoint models/kimi-linear-tiny.json -o DIR`) with
`transformers.AutoModelForCausalLM.from_pretrained(DIR)` (the library's own
`kimi_linear` model; its KDA runs through flash-linear-attention's
`chunk_kda` when `fla` is importable, else through transformers' torch
fallback, and the JSON says which), runs one forward over the prompt in bf16
and in f32, and compares each with the logits kimi wrote for the same prompt
(`kimi-run --dump-logits`, raw little-endian f32 [T, V]).

Requirements: torch, transformers (5.x, with models/kimi_linear), numpy;
flash-linear-attention on PYTHONPATH for the fla kernels. Nothing is built.

  python3 bench/baselines/hf_side_by_side.py --checkpoint DIR \
      --tokens 1,2,3 --kimi-logits kimi.bin
"""
import argparse
import json
import sys

import numpy as np
import torch


def rel(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--tokens", required=True, help="comma-separated ids")
    p.add_argument("--kimi-logits", required=True)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]

    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(args.checkpoint, trust_remote_code=False)
    result = {"transformers": transformers.__version__, "torch": torch.__version__,
              "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
              "config_class": type(config).__name__, "tokens": len(tokens)}
    try:
        import fla  # noqa: F401
        result["fla"] = getattr(fla, "__version__", "?")
    except Exception as e:  # the torch fallback runs then
        result["fla"] = f"not importable: {e}"

    logits = {}
    for dtype_name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        model, info = AutoModelForCausalLM.from_pretrained(
            args.checkpoint, dtype=dtype, output_loading_info=True,
            trust_remote_code=False)
        missing = sorted(info.get("missing_keys", []))
        unexpected = sorted(info.get("unexpected_keys", []))
        mismatched = [str(m) for m in info.get("mismatched_keys", [])]
        result[f"load_{dtype_name}"] = {"missing": missing[:20], "unexpected": unexpected[:20],
                                       "mismatched": mismatched[:20],
                                       "counts": [len(missing), len(unexpected), len(mismatched)]}
        model = model.to(args.device).eval()
        mod = sys.modules[type(model).__module__]
        kda = getattr(mod, "torch_chunk_kda", None) or getattr(mod, "chunk_kda", None)
        result["chunk_kda_impl"] = f"{getattr(kda, '__module__', '?')}.{getattr(kda, '__name__', '?')}"
        with torch.no_grad():
            ids = torch.tensor([tokens], device=args.device)
            out = model(input_ids=ids, use_cache=False).logits[0].float().cpu().numpy()
        logits[dtype_name] = out
        del model
        torch.cuda.empty_cache()

    V = logits["f32"].shape[-1]
    kimi = np.fromfile(args.kimi_logits, dtype="<f4")
    T = len(tokens)
    kimi = kimi[: T * V].reshape(T, V)
    hf32, hf16 = logits["f32"], logits["bf16"]
    result["relative_l2"] = {
        "kimi_f32_vs_hf_f32": rel(kimi, hf32),
        "kimi_f32_vs_hf_bf16": rel(kimi, hf16),
        "hf_bf16_vs_hf_f32 (bf16 rounding alone)": rel(hf16, hf32),
    }
    result["argmax_agreement"] = {
        "kimi_vs_hf_f32": float(np.mean(kimi.argmax(-1) == hf32.argmax(-1))),
        "kimi_vs_hf_bf16": float(np.mean(kimi.argmax(-1) == hf16.argmax(-1))),
    }
    result["worst_row_relative_l2_kimi_vs_hf_f32"] = max(rel(kimi[t], hf32[t]) for t in range(T))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
