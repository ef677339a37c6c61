#!/usr/bin/env python3
"""Straightforward PyTorch eager implementation of the kimi K3 model family.

The speed baseline for the compiled GPU model: prefill tokens/s (one sequence,
--prefill-tokens tokens) and decode tokens/s (batches of sequences, one token
per sequence and step) of the same model and the same weights, on the same GPU.
It also dumps logits in the format of `kimi-run --dump-logits` so that the two
can be compared, and checks itself with --selftest.

The model is the one of shared/reference/kimi-k3.md and of our float64 C++
reference (test/reference/ReferenceModel.cpp): KDA with the lower-bounded K3
gate (section 2), gated MLA without positional encoding (section 3), block
Attention Residuals (section 4), Stable LatentMoE with SiTU experts and a
sigmoid router (section 5), MXFP4 routed experts (section 6, dequantised to
the compute dtype once at load). "Straightforward eager": torch ops only, no
custom kernels, no torch.compile, no CUDA graphs; see bench/baselines/README.md.

Usage:
  k3_eager.py --config models/k3-mini.json --weights w.safetensors
  k3_eager.py --config models/k3-mini.json --random-weights 7      (the weights
      of `kimi-run ... --random-weights 7`, generated here bit for bit)
  k3_eager.py --config C --weights W --dump-logits FILE --tokens 1,2,3
      [--decode-check N]
  k3_eager.py --selftest
"""

import argparse
import json
import math
import os
import statistics
import struct
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------------------
# Config (models/import/ModelConfig.cpp: HF config.json, fields under
# text_config for K3)
# ---------------------------------------------------------------------------


class Config:
    def __init__(self, root, name="model"):
        t = root.get("text_config", root)
        self.name = name
        self.model_type = t.get("model_type") or root.get("model_type") or ""
        self.hidden = int(t["hidden_size"])
        self.num_layers = int(t["num_hidden_layers"])
        self.vocab = int(t["vocab_size"])
        self.dense_intermediate = int(t["intermediate_size"])
        self.eps = float(t["rms_norm_eps"])
        self.tie = bool(t.get("tie_word_embeddings") or False)
        self.attn_res_block = int(t.get("attn_res_block_size") or 0)
        self.act = t.get("hidden_act") or "silu"
        if self.act not in ("silu", "situ"):
            raise ValueError("hidden_act must be silu or situ, got %r" % self.act)
        if self.act == "situ":
            self.situ_beta = float(t["activation_situ_beta"])
            self.situ_linear_beta = float(t["activation_situ_linear_beta"])
        # MLA (one latent shared by all heads; NoPE only).
        self.mla_heads = int(t["num_attention_heads"])
        self.q_lora = int(t.get("q_lora_rank") or 0)
        self.kv_lora = int(t["kv_lora_rank"])
        self.nope = int(t["qk_nope_head_dim"])
        self.rope = int(t["qk_rope_head_dim"])
        self.v_dim = int(t["v_head_dim"])
        self.mla_gate = bool(t.get("mla_use_output_gate") or False)
        if not t.get("mla_use_nope", False):
            raise ValueError("mla_use_nope must be true (kimi compiles NoPE MLA only)")
        # KDA.
        la = t["linear_attn_config"]
        self.kda_heads = int(la["num_heads"])
        self.kda_dim = int(la["head_dim"])
        self.conv_k = int(la["short_conv_kernel_size"])
        self.full_rank_gate = bool(la.get("use_full_rank_gate") or False)
        lb = la.get("gate_lower_bound")
        self.gate_lb = None if lb is None else float(lb)
        kinds = [None] * self.num_layers
        for l in la["kda_layers"]:
            kinds[l - 1] = "kda"  # 1-based in the config
        for l in la["full_attn_layers"]:
            kinds[l - 1] = "mla"
        if None in kinds:
            raise ValueError("layer %d is in neither kda_layers nor full_attn_layers"
                             % (kinds.index(None) + 1))
        self.layers = kinds
        # MoE.
        self.num_experts = int(t["num_experts"])
        self.top_k = int(t["num_experts_per_token"])
        self.num_shared = int(t.get("num_shared_experts") or 0)
        self.moe_inter = int(t["moe_intermediate_size"])
        self.latent = int(t.get("routed_expert_hidden_size") or 0)
        self.latent_norm = bool(t.get("latent_moe_use_norm") or False)
        rn = t.get("moe_renormalize")
        self.renormalize = True if rn is None else bool(rn)
        sc = t.get("routed_scaling_factor")
        self.scaling = 1.0 if sc is None else float(sc)
        self.first_dense = int(t.get("first_k_dense_replace") or 0)
        router = t.get("moe_router_activation_func") or "sigmoid"
        if router != "sigmoid":
            raise ValueError("moe_router_activation_func must be sigmoid")

    @staticmethod
    def from_file(path):
        with open(path) as f:
            root = json.load(f)
        return Config(root, os.path.splitext(os.path.basename(path))[0])

    def is_moe(self, l):
        return l >= self.first_dense

    def expert_width(self):
        return self.latent if self.latent else self.hidden


# ---------------------------------------------------------------------------
# Weight names (models/import/WeightNames.cpp) and the parameters the model
# reads (test/reference/ReferenceModel.cpp weightSpecs)
# ---------------------------------------------------------------------------

_BSM = "model.layers.{l}.block_sparse_moe."
NAMES = {
    "Embed": ("model.embed_tokens.weight", []),
    "FinalNorm": ("model.norm.weight", []),
    "LmHead": ("lm_head.weight", []),
    "OutputResNorm": ("model.output_attn_res_norm.weight", []),
    "OutputResProj": ("model.output_attn_res_proj.weight", []),
    "InputNorm": ("model.layers.{l}.input_layernorm.weight", []),
    "PostAttnNorm": ("model.layers.{l}.post_attention_layernorm.weight", []),
    "AttnResNorm": ("model.layers.{l}.self_attention_res_norm.weight", []),
    "AttnResProj": ("model.layers.{l}.self_attention_res_proj.weight", []),
    "MlpResNorm": ("model.layers.{l}.mlp_res_norm.weight", []),
    "MlpResProj": ("model.layers.{l}.mlp_res_proj.weight", []),
    "KdaQ": ("model.layers.{l}.self_attn.q_proj.weight", []),
    "KdaK": ("model.layers.{l}.self_attn.k_proj.weight", []),
    "KdaV": ("model.layers.{l}.self_attn.v_proj.weight", []),
    "KdaQConv": ("model.layers.{l}.self_attn.q_conv1d.weight", []),
    "KdaKConv": ("model.layers.{l}.self_attn.k_conv1d.weight", []),
    "KdaVConv": ("model.layers.{l}.self_attn.v_conv1d.weight", []),
    "KdaFA": ("model.layers.{l}.self_attn.f_a_proj.weight", []),
    "KdaFB": ("model.layers.{l}.self_attn.f_b_proj.weight", []),
    "KdaALog": ("model.layers.{l}.self_attn.A_log", []),
    "KdaDtBias": ("model.layers.{l}.self_attn.dt_bias", []),
    "KdaB": ("model.layers.{l}.self_attn.b_proj.weight", []),
    "KdaG": ("model.layers.{l}.self_attn.g_proj.weight", []),
    "KdaGA": ("model.layers.{l}.self_attn.g_a_proj.weight", []),
    "KdaGB": ("model.layers.{l}.self_attn.g_b_proj.weight", []),
    "KdaONorm": ("model.layers.{l}.self_attn.o_norm.weight", []),
    "KdaO": ("model.layers.{l}.self_attn.o_proj.weight", []),
    "MlaQ": ("model.layers.{l}.self_attn.q_proj.weight", []),
    "MlaQA": ("model.layers.{l}.self_attn.q_a_proj.weight", []),
    "MlaQANorm": ("model.layers.{l}.self_attn.q_a_layernorm.weight", []),
    "MlaQB": ("model.layers.{l}.self_attn.q_b_proj.weight", []),
    "MlaKvA": ("model.layers.{l}.self_attn.kv_a_proj_with_mqa.weight", []),
    "MlaKvANorm": ("model.layers.{l}.self_attn.kv_a_layernorm.weight", []),
    "MlaKvB": ("model.layers.{l}.self_attn.kv_b_proj.weight", []),
    "MlaG": ("model.layers.{l}.self_attn.g_proj.weight", []),
    "MlaO": ("model.layers.{l}.self_attn.o_proj.weight", []),
    "MlpGate": ("model.layers.{l}.mlp.gate_proj.weight", []),
    "MlpUp": ("model.layers.{l}.mlp.up_proj.weight", []),
    "MlpDown": ("model.layers.{l}.mlp.down_proj.weight", []),
    "Router": ("model.layers.{l}.mlp.gate.weight", [_BSM + "gate.weight"]),
    "RouterBias": ("model.layers.{l}.mlp.gate.e_score_correction_bias",
                   [_BSM + "gate.e_score_correction_bias"]),
    "ExpertGate": ("model.layers.{l}.mlp.experts.{e}.gate_proj.weight",
                   [_BSM + "experts.{e}.w1.weight"]),
    "ExpertUp": ("model.layers.{l}.mlp.experts.{e}.up_proj.weight",
                 [_BSM + "experts.{e}.w3.weight"]),
    "ExpertDown": ("model.layers.{l}.mlp.experts.{e}.down_proj.weight",
                   [_BSM + "experts.{e}.w2.weight"]),
    "LatentDown": ("model.layers.{l}.mlp.routed_expert_down_proj.weight", []),
    "LatentNorm": ("model.layers.{l}.mlp.routed_expert_norm.weight", []),
    "LatentUp": ("model.layers.{l}.mlp.routed_expert_up_proj.weight", []),
    "SharedGate": ("model.layers.{l}.mlp.shared_experts.gate_proj.weight",
                   [_BSM + "shared_experts.gate_proj.weight"]),
    "SharedUp": ("model.layers.{l}.mlp.shared_experts.up_proj.weight",
                 [_BSM + "shared_experts.up_proj.weight"]),
    "SharedDown": ("model.layers.{l}.mlp.shared_experts.down_proj.weight",
                   [_BSM + "shared_experts.down_proj.weight"]),
}

# Parameters kept in float32 whatever the compute dtype: norms, AttnRes
# pseudo-queries, KDA gate parameters and conv taps, the router.
F32_ROLES = {
    "FinalNorm", "OutputResNorm", "OutputResProj", "InputNorm", "PostAttnNorm",
    "AttnResNorm", "AttnResProj", "MlpResNorm", "MlpResProj", "KdaQConv",
    "KdaKConv", "KdaVConv", "KdaALog", "KdaDtBias", "KdaONorm", "MlaQANorm",
    "MlaKvANorm", "Router", "RouterBias", "LatentNorm",
}
STACKED_ROLES = {"ExpertGate", "ExpertUp", "ExpertDown"}


def weight_name(role, layer=-1):
    n = NAMES[role][0]
    return n.replace("{l}", str(layer)) if layer >= 0 else n


def spellings(role, layer, expert=-1):
    """Names tried for a weight, in the order of WeightLoader::spellings."""
    out = []
    for pattern in [NAMES[role][0]] + NAMES[role][1]:
        n = pattern.replace("{l}", str(layer)) if layer >= 0 else pattern
        if expert >= 0:
            n = n.replace("{e}", str(expert))
        for cand in (n, "language_model." + n):
            if cand not in out:
                out.append(cand)
    return out


def weight_specs(c):
    """(role, layer, shape) of every parameter the model reads."""
    specs = []

    def add(role, layer, shape):
        specs.append((role, layer, list(shape)))

    D = c.hidden
    add("Embed", -1, [c.vocab, D])
    for l in range(c.num_layers):
        add("InputNorm", l, [D])
        add("PostAttnNorm", l, [D])
        if c.attn_res_block > 0:
            if l > 0:  # layer 0's attention input is the embedding itself
                add("AttnResNorm", l, [D])
                add("AttnResProj", l, [1, D])
            add("MlpResNorm", l, [D])
            add("MlpResProj", l, [1, D])
        if c.layers[l] == "kda":
            H, dk, K = c.kda_heads, c.kda_dim, c.conv_k
            C = H * dk
            add("KdaQ", l, [C, D])
            add("KdaK", l, [C, D])
            add("KdaV", l, [C, D])
            add("KdaQConv", l, [C, 1, K])
            add("KdaKConv", l, [C, 1, K])
            add("KdaVConv", l, [C, 1, K])
            add("KdaFA", l, [dk, D])
            add("KdaFB", l, [C, dk])
            add("KdaALog", l, [H])
            add("KdaDtBias", l, [C])
            add("KdaB", l, [H, D])
            if c.full_rank_gate:
                add("KdaG", l, [C, D])
            else:
                add("KdaGA", l, [dk, D])
                add("KdaGB", l, [C, dk])
            add("KdaONorm", l, [dk])
            add("KdaO", l, [D, C])
        else:
            H = c.mla_heads
            q_width = H * (c.nope + c.rope)
            if c.q_lora:
                add("MlaQA", l, [c.q_lora, D])
                add("MlaQANorm", l, [c.q_lora])
                add("MlaQB", l, [q_width, c.q_lora])
            else:
                add("MlaQ", l, [q_width, D])
            add("MlaKvA", l, [c.kv_lora + c.rope, D])
            add("MlaKvANorm", l, [c.kv_lora])
            add("MlaKvB", l, [H * (c.nope + c.v_dim), c.kv_lora])
            if c.mla_gate:
                add("MlaG", l, [H * c.v_dim, D])
            add("MlaO", l, [D, H * c.v_dim])
        if not c.is_moe(l):
            add("MlpGate", l, [c.dense_intermediate, D])
            add("MlpUp", l, [c.dense_intermediate, D])
            add("MlpDown", l, [D, c.dense_intermediate])
            continue
        E, I, W = c.num_experts, c.moe_inter, c.expert_width()
        add("Router", l, [E, D])
        add("RouterBias", l, [E])
        add("ExpertGate", l, [E, I, W])
        add("ExpertUp", l, [E, I, W])
        add("ExpertDown", l, [E, W, I])
        if c.latent:
            add("LatentDown", l, [W, D])
            if c.latent_norm:
                add("LatentNorm", l, [W])
            add("LatentUp", l, [D, W])
        if c.num_shared:
            S = c.num_shared * c.moe_inter
            add("SharedGate", l, [S, D])
            add("SharedUp", l, [S, D])
            add("SharedDown", l, [D, S])
    if c.attn_res_block > 0:
        add("OutputResNorm", -1, [D])
        add("OutputResProj", -1, [1, D])
    add("FinalNorm", -1, [D])
    if not c.tie:
        add("LmHead", -1, [c.vocab, D])
    return specs


# ---------------------------------------------------------------------------
# MXFP4 (runtime/weights/mxfp4.cpp): values U8 [..., W/2], two E2M1 codes per
# byte, low nibble first; scales U8 or F8_E8M0 [..., W/32], 2^(s-127), 255=NaN
# ---------------------------------------------------------------------------

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
        -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def dequant_mxfp4(packed, scales, width):
    """float32 [..., width] from uint8 packed [..., width/2] and scales."""
    assert width % 32 == 0
    lut = torch.tensor(E2M1, dtype=torch.float32, device=packed.device)
    lo = lut[(packed & 0xF).long()]
    hi = lut[(packed >> 4).long()]
    vals = torch.stack([lo, hi], -1).reshape(*packed.shape[:-1], width // 32, 32)
    s = scales.to(torch.int32)
    scale = torch.pow(2.0, (s - 127).to(torch.float64)).to(torch.float32)
    scale = torch.where(s == 255, torch.full_like(scale, float("nan")), scale)
    return (vals * scale.unsqueeze(-1)).reshape(*packed.shape[:-1], width)


# ---------------------------------------------------------------------------
# Weight sources
# ---------------------------------------------------------------------------

_ST_NUMPY = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<i2",
             "U8": "u1", "F8_E8M0": "u1", "I8": "i1", "I16": "<i2",
             "I32": "<i4", "I64": "<i8"}
_ST_SIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "U8": 1, "F8_E8M0": 1,
            "I8": 1, "I16": 2, "I32": 4, "I64": 8}
DENSE_DTYPES = ("F32", "BF16", "F16", "F64")
SCALE_DTYPES = ("U8", "F8_E8M0")


class SafetensorsWeights:
    """Tensors of one or more safetensors files, found by name the way
    runtime/weights/weight_loader.cpp finds them."""

    def __init__(self, paths, device):
        files = []
        for p in paths:
            if os.path.isdir(p):
                found = sorted(os.path.join(p, f) for f in os.listdir(p)
                               if f.endswith(".safetensors"))
                if not found:
                    raise ValueError("weights directory %r holds no .safetensors file" % p)
                files += found
            else:
                files.append(p)
        self.device = device
        self.index = {}  # name -> (path, meta, data start)
        self.handles = {}
        for p in files:
            with open(p, "rb") as fh:
                n = struct.unpack("<Q", fh.read(8))[0]
                header = json.loads(fh.read(n))
            for name, meta in header.items():
                if name == "__metadata__":
                    continue
                if name in self.index:
                    raise ValueError("tensor %r is in both %r and %r"
                                     % (name, self.index[name][0], p))
                self.index[name] = (p, meta, 8 + n)
        self.describe = ",".join(files)

    def info(self, name):
        e = self.index.get(name)
        return None if e is None else (e[1]["dtype"], list(e[1]["shape"]))

    def raw(self, name):
        """The tensor as stored (U8 / F8_E8M0 as torch.uint8), on the CPU."""
        path, meta, base = self.index[name]
        dt = meta["dtype"]
        try:
            from safetensors import safe_open
            if path not in self.handles:
                self.handles[path] = safe_open(path, framework="pt", device="cpu")
            t = self.handles[path].get_tensor(name)
            if dt in SCALE_DTYPES and t.dtype != torch.uint8:
                t = t.view(torch.uint8)
            return t
        except Exception:  # dtype unknown to this safetensors/torch: read the bytes
            import numpy as np
            if dt not in _ST_NUMPY:
                raise ValueError("tensor %r has unsupported dtype %s" % (name, dt))
            b, e = meta["data_offsets"]
            count = (e - b) // _ST_SIZE[dt]
            arr = np.fromfile(path, dtype=_ST_NUMPY[dt], count=count, offset=base + b)
            t = torch.from_numpy(arr.copy()).reshape(meta["shape"])
            if dt == "BF16":
                t = t.view(torch.bfloat16)
            return t

    def _piece(self, role, names, shape):
        """loadPiece: the first of `names` present, as a float tensor of
        `shape` on the device; None when no name is present."""
        width = shape[-1]
        mx_capable = width % 32 == 0
        packed_shape = shape[:-1] + [width // 2]
        scale_shape = shape[:-1] + [width // 32]
        for name in names:
            value_name = name
            inf = self.info(name)
            if inf is None and mx_capable:  # compressed-tensors spelling
                value_name = name + "_packed"
                inf = self.info(value_name)
            if inf is None:
                continue
            dt, sh = inf
            where = "weight %r: tensor %r" % (weight_name(role), value_name)
            if dt in DENSE_DTYPES:
                if sh != shape:
                    raise ValueError("%s has shape %s, expected %s" % (where, sh, shape))
                return self.raw(value_name).to(self.device)
            if dt == "U8":
                if not mx_capable:
                    raise ValueError("%s is U8 but MXFP4 needs a last dim that is a "
                                     "multiple of 32 (expected %s)" % (where, shape))
                if sh != packed_shape:
                    raise ValueError("%s is U8 (MXFP4 values) with shape %s, expected %s"
                                     % (where, sh, packed_shape))
                scale_name = name + "_scale"
                sinf = self.info(scale_name)
                if sinf is None:
                    raise ValueError("%s is U8 (MXFP4 values) but its scale tensor %r "
                                     "is missing" % (where, scale_name))
                if sinf[0] not in SCALE_DTYPES:
                    raise ValueError("scale tensor %r has dtype %s (expected U8 or "
                                     "F8_E8M0)" % (scale_name, sinf[0]))
                if sinf[1] != scale_shape:
                    raise ValueError("scale tensor %r has shape %s, expected %s"
                                     % (scale_name, sinf[1], scale_shape))
                packed = self.raw(value_name).to(self.device)
                scales = self.raw(scale_name).to(self.device)
                return dequant_mxfp4(packed, scales, width)
            raise ValueError("%s has unsupported dtype %s (supported: F32, BF16, F16, "
                             "and MXFP4 as U8 values with U8/F8_E8M0 scales)" % (where, dt))
        return None

    def load(self, role, layer, shape):
        t = self._piece(role, spellings(role, layer), shape)
        if t is not None:
            return t
        if role not in STACKED_ROLES:
            raise ValueError("weight %r not found; tried %s"
                             % (weight_name(role, layer), spellings(role, layer)))
        pieces = []  # one tensor per expert
        for e in range(shape[0]):
            p = self._piece(role, spellings(role, layer, e), shape[1:])
            if p is None:
                raise ValueError("weight %r: expert %d not found; tried %s"
                                 % (weight_name(role, layer), e, spellings(role, layer, e)))
            pieces.append(p)
        return torch.stack(pieces, 0)


# runtime/weights/random_weights.cpp: splitmix64 per tensor, seeded by
# seed ^ fnv1a64(canonical name), value = offset + spread * U(-1, 1) in f64,
# rounded to f32.
_MASK64 = (1 << 64) - 1
_GOLDEN, _M1, _M2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _fnv1a64(text):
    h = 0xCBF29CE484222325
    for ch in text.encode():
        h = ((h ^ ch) * 0x100000001B3) & _MASK64
    return h


def _i64(x):
    x &= _MASK64
    return x - (1 << 64) if x >> 63 else x


def _lsr(z, s):  # logical right shift of an int64 tensor
    return (z >> s) & ((1 << (64 - s)) - 1)


def _recipe(name, shape):
    if name.endswith("embed_tokens.weight"):
        return 0.0, math.sqrt(3.0)
    if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
        return 1.0, 0.1
    if name.endswith("A_log"):
        return 0.0, 1.0
    if name.endswith("dt_bias"):
        return -2.0, 4.0
    if name.endswith("e_score_correction_bias"):
        return 0.0, 0.05
    return 0.0, math.sqrt(3.0 / float(shape[-1] if shape else 1))


def random_weight(name, shape, seed, device):
    offset, spread = _recipe(name, shape)
    n = 1
    for d in shape:
        n *= d
    state = (seed ^ _fnv1a64(name)) & _MASK64
    out = torch.empty(n, dtype=torch.float32, device=device)
    step = 1 << 24
    for s0 in range(0, n, step):
        m = min(step, n - s0)
        i = torch.arange(s0 + 1, s0 + m + 1, dtype=torch.int64, device=device)
        z = i * _i64(_GOLDEN) + _i64(state)  # int64 arithmetic wraps mod 2^64
        z = (z ^ _lsr(z, 30)) * _i64(_M1)
        z = (z ^ _lsr(z, 27)) * _i64(_M2)
        z = z ^ _lsr(z, 31)
        u = _lsr(z, 11).to(torch.float64) * (2.0 ** -53)
        out[s0:s0 + m] = (offset + spread * (2.0 * u - 1.0)).to(torch.float32)
    return out.view(shape)


def random_weight_scalar(name, shape, seed, count):
    """The same values with Python integers (selftest oracle)."""
    offset, spread = _recipe(name, shape)
    state = (seed ^ _fnv1a64(name)) & _MASK64
    vals = []
    for _ in range(count):
        state = (state + _GOLDEN) & _MASK64
        z = state
        z = ((z ^ (z >> 30)) * _M1) & _MASK64
        z = ((z ^ (z >> 27)) * _M2) & _MASK64
        z ^= z >> 31
        u = (z >> 11) * 2.0 ** -53
        vals.append(struct.unpack("<f", struct.pack("<f", offset + spread * (2.0 * u - 1.0)))[0])
    return vals


class RandomWeights:
    def __init__(self, seed, device):
        self.seed, self.device = seed, device
        self.describe = "random:%d" % seed

    def load(self, role, layer, shape):
        return random_weight(weight_name(role, layer), shape, self.seed, self.device)


class DictWeights:
    def __init__(self, tensors, device):
        self.tensors, self.device = tensors, device
        self.describe = "memory"

    def load(self, role, layer, shape):
        t = self.tensors[(role, layer)]
        assert list(t.shape) == list(shape), (role, layer, t.shape, shape)
        return t.to(self.device)


# ---------------------------------------------------------------------------
# KDA core (shared/reference/kimi-k3.md section 2), float32.
# q, k, g: [B, H, T, dk]; v: [B, H, T, dv]; beta: [B, H, T]; S: [B, H, dk, dv]
# ---------------------------------------------------------------------------


def kda_recurrent(q, k, v, g, beta, S, scale):
    outs = []
    for t in range(q.shape[2]):
        S = S * torch.exp(g[:, :, t]).unsqueeze(-1)  # S' = Diag(exp g_t) S
        kt = k[:, :, t]
        u = beta[:, :, t].unsqueeze(-1) * (v[:, :, t] - (kt.unsqueeze(-2) @ S).squeeze(-2))
        S = S + kt.unsqueeze(-1) * u.unsqueeze(-2)  # S = S' + k u^T
        outs.append(scale * (q[:, :, t].unsqueeze(-2) @ S).squeeze(-2))  # read after update
    return torch.stack(outs, 2), S


def kda_sub_block(chunk, lower_bound):
    """Sub-block of the factorised intra-chunk products: the largest power of
    two c <= chunk with (c-1)|L| <= 80 nats, so exp(G_anchor - G_j) stays far
    below the f32 maximum (e^88.7); 1 (exact pairwise log-space) without a bound."""
    if lower_bound is None:
        return 1
    c = chunk
    while c > 1 and (c - 1) * abs(lower_bound) > 80.0:
        c //= 2
    return c


def kda_chunked(q, k, v, g, beta, S, scale, chunk, sub):
    """The chunked (WY / UT transform) form; returns (o [B,H,T,dv], S)."""
    B, H, T, dk = q.shape
    dv = v.shape[-1]
    C = chunk
    N = (T + C - 1) // C
    pad = N * C - T
    if pad:  # zero k, v, beta and g: padded tokens leave the state unchanged
        q, k, v, g = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v, g))
        beta = F.pad(beta, (0, pad))
    q, k, g = (x.reshape(B, H, N, C, dk) for x in (q, k, g))
    v = v.reshape(B, H, N, C, dv)
    beta = beta.reshape(B, H, N, C)
    dev = q.device
    G = g.cumsum(-2)  # inclusive cumsum inside the chunk, in [C*L, 0]
    ns = C // sub
    # Pairwise factor exp(G_i - G_j) (j <= i) for every chunk at once: column
    # sub-block r is anchored at its first token r0 (causal anchor):
    #   exp(G_i - G_j) = exp(G_i - G_r0) * exp(G_r0 - G_j),
    # the first <= 1 for rows i >= r0 (rows before r0 are masked to 0), the
    # second <= exp((sub-1)|L|).
    pos = torch.arange(C, device=dev)
    rows_ok = pos[None, :] >= (torch.arange(ns, device=dev) * sub)[:, None]  # [ns, C]
    Ga = G[:, :, :, ::sub, :]  # [B,H,N,ns,dk]
    diff = G.unsqueeze(3) - Ga.unsqueeze(4)  # [B,H,N,ns,C,dk]
    El = torch.exp(diff.masked_fill(~rows_ok[:, :, None], float("-inf")))
    del diff
    Er = torch.exp(Ga.unsqueeze(4) - G.reshape(B, H, N, ns, sub, dk))  # [B,H,N,ns,sub,dk]
    kr = (k.reshape(B, H, N, ns, sub, dk) * Er).transpose(-1, -2)  # [B,H,N,ns,dk,sub]
    del Er
    Aqk = ((q.unsqueeze(3) * El) @ kr).permute(0, 1, 2, 4, 3, 5).reshape(B, H, N, C, C)
    Akk = ((k.unsqueeze(3) * El) @ kr).permute(0, 1, 2, 4, 3, 5).reshape(B, H, N, C, C)
    del El, kr
    incl = torch.ones(C, C, dtype=torch.bool, device=dev).tril()
    strict = torch.ones(C, C, dtype=torch.bool, device=dev).tril(-1)
    Aqk = Aqk.masked_fill(~incl, 0.0) * scale
    Akk = Akk.masked_fill(~strict, 0.0) * beta.unsqueeze(-1)  # row i times beta_i
    eG = torch.exp(G)
    bcol = beta.unsqueeze(-1)
    # [W | U] = (I + Akk)^-1 Diag(beta) [exp(G) * K | V]
    rhs = torch.cat([bcol * eG * k, bcol * v], -1)
    eye = torch.eye(C, device=dev, dtype=q.dtype)
    WU = torch.linalg.solve_triangular(eye + Akk, rhs, upper=False, unitriangular=True)
    Wm, U = WU[..., :dk], WU[..., dk:]
    Qg = q * eG * scale
    Glast = G[..., -1:, :]  # [B,H,N,1,dk]
    Kd = (torch.exp(Glast - G) * k).transpose(-1, -2)  # [B,H,N,dk,C]
    decay = torch.exp(Glast).transpose(-1, -2)  # [B,H,N,dk,1]
    O = torch.empty(B, H, N, C, dv, dtype=q.dtype, device=dev)
    for n in range(N):  # the inter-chunk recurrence
        vnew = U[:, :, n] - Wm[:, :, n] @ S
        O[:, :, n] = Qg[:, :, n] @ S + Aqk[:, :, n] @ vnew
        S = S * decay[:, :, n] + Kd[:, :, n] @ vnew
    return O.reshape(B, H, N * C, dv)[:, :, :T], S


# ---------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------


def rms_norm(x, w, eps):
    """x * rsqrt(mean(x^2) + eps) * w, in float32."""
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def linear(x, w):
    return F.linear(x.to(w.dtype), w)


class KdaState:
    def __init__(self, S, conv):
        self.S, self.conv = S, conv


class State:
    """Per sequence batch: KDA recurrent state + short-conv inputs, MLA latent
    cache rows [RMSNorm(ckv) | k_pe]."""

    def __init__(self, model, batch):
        c, dev = model.cfg, model.device
        self.kda, self.mla = {}, {}
        for l, kind in enumerate(c.layers):
            if kind == "kda":
                H, dk, Cw = c.kda_heads, c.kda_dim, c.kda_heads * c.kda_dim
                S = torch.zeros(batch, H, dk, dk, dtype=torch.float32, device=dev)
                conv = [torch.zeros(batch, c.conv_k - 1, Cw, dtype=torch.float32, device=dev)
                        for _ in range(3)]
                self.kda[l] = KdaState(S, conv)
            else:
                self.mla[l] = None
        self.position = 0


class K3Eager:
    def __init__(self, cfg, source, dtype, device, kda_chunk=None, kda_mode="chunk"):
        self.cfg, self.dtype, self.device = cfg, dtype, device
        self.kda_mode = kda_mode
        self.kda_chunk = kda_chunk or (64 if cfg.gate_lb is not None else 16)
        self.kda_sub = kda_sub_block(self.kda_chunk, cfg.gate_lb)
        if self.kda_chunk % self.kda_sub:
            raise ValueError("kda chunk %d is not a multiple of %d" % (self.kda_chunk, self.kda_sub))
        self.P = {}
        for role, layer, shape in weight_specs(cfg):
            t = source.load(role, layer, shape)
            want = torch.float32 if role in F32_ROLES else dtype
            self.P[(role, layer)] = t.to(device=device, dtype=want).contiguous()
            del t

    def w(self, role, layer=-1):
        return self.P[(role, layer)]

    def act(self, g, u):
        g, u = g.float(), u.float()
        if self.cfg.act == "situ":  # [b tanh(g/b) sigmoid(g)] * [lb tanh(u/lb)]
            b, lb = self.cfg.situ_beta, self.cfg.situ_linear_beta
            return (b * torch.tanh(g / b) * torch.sigmoid(g)) * (lb * torch.tanh(u / lb))
        return F.silu(g) * u

    def gated_mlp(self, x, gate, up, down, l):
        a = self.act(linear(x, self.w(gate, l)), linear(x, self.w(up, l)))
        return linear(a.to(self.dtype), self.w(down, l))

    # -- section 2: KDA ----------------------------------------------------
    def kda(self, x, l, st):
        c = self.cfg
        B, T, _ = x.shape
        H, dk, K = c.kda_heads, c.kda_dim, c.conv_k
        Cw = H * dk
        qkv = []
        for i, (proj, conv) in enumerate((("KdaQ", "KdaQConv"), ("KdaK", "KdaKConv"),
                                          ("KdaV", "KdaVConv"))):
            p = linear(x, self.w(proj, l)).float()  # [B,T,C]
            ext = torch.cat([st.conv[i], p], 1)  # previous K-1 inputs ++ new
            st.conv[i] = ext[:, -(K - 1):].contiguous()
            y = F.conv1d(ext.transpose(1, 2), self.w(conv, l), groups=Cw)  # tap K-1 = current
            qkv.append(F.silu(y.transpose(1, 2)).reshape(B, T, H, dk))
        q, k, v = qkv
        q = q * torch.rsqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6)
        k = k * torch.rsqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)
        z = linear(linear(x, self.w("KdaFA", l)), self.w("KdaFB", l)).float().reshape(B, T, H, dk)
        A = torch.exp(self.w("KdaALog", l)).reshape(1, 1, H, 1)
        dt = self.w("KdaDtBias", l).reshape(1, 1, H, dk)
        if c.gate_lb is not None:  # K3: L * sigmoid(exp(A_log) (z + dt_bias))
            g = c.gate_lb * torch.sigmoid(A * (z + dt))
        else:  # Kimi Linear: -exp(A_log) softplus(z + dt_bias)
            g = -A * F.softplus(z + dt)
        beta = torch.sigmoid(linear(x, self.w("KdaB", l)).float())  # [B,T,H]
        if c.full_rank_gate:
            gate = linear(x, self.w("KdaG", l))
        else:
            gate = linear(linear(x, self.w("KdaGA", l)), self.w("KdaGB", l))
        q, k, v, g = (t.transpose(1, 2) for t in (q, k, v, g))  # [B,H,T,d]
        beta = beta.transpose(1, 2)
        scale = dk ** -0.5
        if T == 1 or self.kda_mode == "recurrent":
            o, st.S = kda_recurrent(q, k, v, g, beta, st.S, scale)
        else:
            o, st.S = kda_chunked(q, k, v, g, beta, st.S, scale, self.kda_chunk, self.kda_sub)
        o = rms_norm(o.transpose(1, 2), self.w("KdaONorm", l), c.eps)  # per head
        o = o * torch.sigmoid(gate.float().reshape(B, T, H, dk))
        return linear(o.reshape(B, T, Cw).to(self.dtype), self.w("KdaO", l))

    # -- section 3: gated MLA, NoPE, K/V materialised from the latent cache --
    def mla(self, x, l, state):
        c = self.cfg
        B, T, _ = x.shape
        H, dn, dr, dv, R = c.mla_heads, c.nope, c.rope, c.v_dim, c.kv_lora
        if c.q_lora:
            qa = rms_norm(linear(x, self.w("MlaQA", l)), self.w("MlaQANorm", l), 1e-6)
            q = linear(qa.to(self.dtype), self.w("MlaQB", l))
        else:
            q = linear(x, self.w("MlaQ", l))
        q = q.reshape(B, T, H, dn + dr)
        kva = linear(x, self.w("MlaKvA", l))  # [B,T,R+dr]
        ckv = rms_norm(kva[..., :R], self.w("MlaKvANorm", l), 1e-6)
        rows = torch.cat([ckv, kva[..., R:].float()], -1).to(self.dtype)
        cache = rows if state.mla[l] is None else torch.cat([state.mla[l], rows], 1)
        state.mla[l] = cache
        S = cache.shape[1]
        kv = linear(cache[..., :R], self.w("MlaKvB", l)).reshape(B, S, H, dn + dv)
        kpe = cache[..., R:].unsqueeze(2).expand(B, S, H, dr)
        k = torch.cat([kv[..., :dn], kpe], -1)
        v = kv[..., dn:]
        qh, kh, vh = (t.transpose(1, 2).contiguous() for t in (q, k, v))
        scale = (dn + dr) ** -0.5
        if T == 1:
            o = F.scaled_dot_product_attention(qh, kh, vh, scale=scale)
        elif T == S:
            o = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, scale=scale)
        else:  # queries at positions S-T .. S-1
            t_pos = torch.arange(T, device=x.device) + (S - T)
            mask = torch.arange(S, device=x.device)[None, :] <= t_pos[:, None]
            o = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, scale=scale)
        o = o.transpose(1, 2)  # [B,T,H,dv]
        if c.mla_gate:
            o = o * torch.sigmoid(linear(x, self.w("MlaG", l))).reshape(B, T, H, dv)
        return linear(o.reshape(B, T, H * dv), self.w("MlaO", l))

    # -- section 5: Stable LatentMoE ----------------------------------------
    def moe(self, x, l):
        c = self.cfg
        B, T, D = x.shape
        N, E, k, W = B * T, c.num_experts, c.top_k, c.expert_width()
        xf = x.reshape(N, D)
        s = torch.sigmoid(F.linear(xf.float(), self.w("Router", l)))  # [N,E] f32
        _, idx = torch.topk(s + self.w("RouterBias", l), k, dim=-1)  # bias: selection only
        wts = s.gather(1, idx)
        if c.renormalize:
            wts = wts / (wts.sum(-1, keepdim=True) + 1e-20)
        wts = wts * c.scaling
        z = linear(xf, self.w("LatentDown", l)) if c.latent else xf.to(self.dtype)
        Wg, Wu, Wd = self.w("ExpertGate", l), self.w("ExpertUp", l), self.w("ExpertDown", l)
        routed = torch.zeros(N, W, dtype=torch.float32, device=x.device)
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=E).tolist()  # one host sync per layer
        tok_sorted = order // k
        w_sorted = wts.reshape(-1)[order]
        start = 0
        for e, cnt in enumerate(counts):  # experts that have tokens
            if cnt == 0:
                continue
            tok = tok_sorted[start:start + cnt]
            we = w_sorted[start:start + cnt]
            start += cnt
            h = z.index_select(0, tok)
            a = self.act(F.linear(h, Wg[e]), F.linear(h, Wu[e])).to(self.dtype)
            y = F.linear(a, Wd[e])
            routed.index_add_(0, tok, y.float() * we.unsqueeze(-1))
        y = routed
        if c.latent:
            if c.latent_norm:
                y = rms_norm(y, self.w("LatentNorm", l), c.eps)
            y = linear(y.to(self.dtype), self.w("LatentUp", l))
        if c.num_shared:
            y = y + self.gated_mlp(xf, "SharedGate", "SharedUp", "SharedDown", l)
        return y.reshape(B, T, D)

    def mlp(self, x, l):
        if self.cfg.is_moe(l):
            return self.moe(x, l)
        return self.gated_mlp(x, "MlpGate", "MlpUp", "MlpDown", l)

    def attention(self, x, l, state):
        if self.cfg.layers[l] == "kda":
            return self.kda(x, l, state.kda[l])
        return self.mla(x, l, state)

    # -- section 4: Attention Residuals ---------------------------------------
    def mix(self, sources, norm_role, proj_role, l=-1):
        V = torch.stack(sources, 0)  # [n,B,T,D] f32
        q = self.w(norm_role, l) * self.w(proj_role, l).reshape(-1)  # gamma * w
        score = (V * torch.rsqrt(V.pow(2).mean(-1, keepdim=True) + self.cfg.eps) * q).sum(-1)
        p = torch.softmax(score, 0)  # over sources; values are not normalised
        return (p.unsqueeze(-1) * V).sum(0)

    def norm_in(self, x, role, l):
        return rms_norm(x, self.w(role, l), self.cfg.eps).to(self.dtype)

    def forward(self, tokens, state, last_only=False):
        """tokens [B, T] (int64, on the device) from `state`; logits [B, T, V]
        (or [B, 1, V] with last_only)."""
        c = self.cfg
        T = tokens.shape[1]
        h = F.embedding(tokens, self.w("Embed")).float()
        block = c.attn_res_block
        blocks = []
        for l in range(c.num_layers):
            if block == 0:  # ordinary pre-norm residual stream
                a = self.attention(self.norm_in(h, "InputNorm", l), l, state)
                mlp_in = h + a.float()
                out = self.mlp(self.norm_in(mlp_in, "PostAttnNorm", l), l)
                h = mlp_in + out.float()
                continue
            prefix = h
            attn_in = h if not blocks else self.mix(blocks + [prefix], "AttnResNorm",
                                                    "AttnResProj", l)
            if l % block == 0:  # seal (layer 0 seals the embedding)
                blocks.append(prefix)
                prefix = None
            a = self.attention(self.norm_in(attn_in, "InputNorm", l), l, state).float()
            prefix = a if prefix is None else prefix + a
            mlp_in = self.mix(blocks + [prefix], "MlpResNorm", "MlpResProj", l)
            out = self.mlp(self.norm_in(mlp_in, "PostAttnNorm", l), l)
            h = prefix + out.float()
        if last_only:
            h = h[:, -1:]
            blocks = [b[:, -1:] for b in blocks]
        if block > 0:
            h = self.mix(blocks + [h], "OutputResNorm", "OutputResProj")
        state.position += T
        head = self.w("Embed") if c.tie else self.w("LmHead")
        return linear(self.norm_in(h, "FinalNorm", -1), head)


# ---------------------------------------------------------------------------
# Modes
# ---------------------------------------------------------------------------


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def log(msg):
    print("[k3_eager] " + msg, file=sys.stderr, flush=True)


def pick_device(name):
    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def device_name(device):
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def set_precision():
    # f32 means f32: no TF32 in matmuls or cuDNN convolutions.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def build_model(args, cfg, dtype, device):
    if (args.weights is None) == (args.random_weights is None):
        raise SystemExit("give exactly one of --weights and --random-weights")
    source = (RandomWeights(args.random_weights, device) if args.random_weights is not None
              else SafetensorsWeights(args.weights, device))
    t0 = time.perf_counter()
    model = K3Eager(cfg, source, dtype, device, args.kda_chunk, args.kda_mode)
    sync(device)
    return model, source.describe, time.perf_counter() - t0


def run_bench(args, cfg, device):
    dtype = torch.bfloat16 if (args.dtype or "bf16") == "bf16" else torch.float32
    model, wdesc, load_s = build_model(args, cfg, dtype, device)
    log("weights %s loaded in %.1f s" % (wdesc, load_s))
    gen = torch.Generator().manual_seed(args.seed)
    V = cfg.vocab

    def tokens(b, t):  # fresh random ids each run, from --seed
        return torch.randint(0, V, (b, t), generator=gen).to(device)

    last_only = args.prefill_logits == "last"
    times = []
    for i in range(args.warmup + args.repeats):
        toks = tokens(1, args.prefill_tokens)
        state = State(model, 1)
        sync(device)
        t0 = time.perf_counter()
        logits = model.forward(toks, state, last_only)
        sync(device)
        dt = time.perf_counter() - t0
        del logits, state
        if i >= args.warmup:
            times.append(dt)
        log("prefill %d tokens: %.2f ms%s" % (args.prefill_tokens, dt * 1e3,
                                              " (warmup)" if i < args.warmup else ""))
    med = statistics.median(times)
    prefill = {"tokens": args.prefill_tokens, "logits": args.prefill_logits,
               "ms_median": round(med * 1e3, 3), "ms_min": round(min(times) * 1e3, 3),
               "tokens_per_s": round(args.prefill_tokens / med, 1), "repeats": len(times)}

    decode = []
    for b in args.decode_batches:
        steps = []
        for i in range(args.warmup + args.repeats):
            state = State(model, b)
            logits = model.forward(tokens(b, args.decode_prompt), state, last_only=True)
            tok = logits[:, -1].argmax(-1, keepdim=True)
            sync(device)
            t0 = time.perf_counter()
            for _ in range(args.decode_steps):  # greedy, one token per sequence
                logits = model.forward(tok, state)
                tok = logits[:, -1].argmax(-1, keepdim=True)
            sync(device)
            dt = (time.perf_counter() - t0) / args.decode_steps
            del state, logits
            if i >= args.warmup:
                steps.append(dt)
            log("decode batch %d: %.3f ms/step%s" % (b, dt * 1e3,
                                                     " (warmup)" if i < args.warmup else ""))
        med = statistics.median(steps)
        decode.append({"batch": b, "prompt_tokens": args.decode_prompt,
                       "steps": args.decode_steps,
                       "ms_per_step_median": round(med * 1e3, 4),
                       "ms_per_step_min": round(min(steps) * 1e3, 4),
                       "tokens_per_s": round(b / med, 1), "repeats": len(steps)})
    out = {"model": cfg.name, "model_type": cfg.model_type,
           "dtype": "bf16" if dtype == torch.bfloat16 else "f32",
           "device": device_name(device), "torch": torch.__version__,
           "weights": wdesc, "weights_load_s": round(load_s, 2),
           "kda_chunk": model.kda_chunk, "kda_sub_block": model.kda_sub,
           "kda_prefill": model.kda_mode, "prefill": prefill, "decode": decode}
    if device.type == "cuda":
        out["peak_mem_gib"] = round(torch.cuda.max_memory_allocated(device) / 2 ** 30, 2)
    print(json.dumps(out))


def run_check(args, cfg, device):
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    if not args.tokens:
        raise SystemExit("--dump-logits needs --tokens")
    ids = [int(s) for s in args.tokens.split(",") if s.strip()]
    for t in ids:
        if not 0 <= t < cfg.vocab:
            raise SystemExit("token id %d out of range [0, %d)" % (t, cfg.vocab))
    n_dec = args.decode_check
    if not 0 <= n_dec < len(ids):
        raise SystemExit("--decode-check must be in [0, %d)" % len(ids))
    model, wdesc, _ = build_model(args, cfg, dtype, device)
    toks = torch.tensor([ids], dtype=torch.int64, device=device)
    state = State(model, 1)
    T = len(ids)
    rows = [model.forward(toks[:, :T - n_dec], state)[0]]
    for t in range(T - n_dec, T):
        rows.append(model.forward(toks[:, t:t + 1], state)[0])
    logits = torch.cat(rows, 0).float().cpu().contiguous()  # [T, V]
    with open(args.dump_logits, "wb") as f:  # raw little-endian f32, no header
        f.write(logits.numpy().astype("<f4").tobytes())
    print(json.dumps({"mode": "check", "model": cfg.name, "weights": wdesc,
                      "dtype": "bf16" if dtype == torch.bfloat16 else "f32",
                      "device": device_name(device), "rows": T, "vocab": cfg.vocab,
                      "decode_check": n_dec, "file": args.dump_logits,
                      "argmax": logits.argmax(-1).tolist()}))


# ---------------------------------------------------------------------------
# Selftest
# ---------------------------------------------------------------------------


def _tiny_root(variant):
    t = {
        "model_type": "kimi_k3_text", "vocab_size": 97, "hidden_size": 64,
        "intermediate_size": 96, "num_hidden_layers": 5, "num_attention_heads": 2,
        "num_key_value_heads": 2, "q_lora_rank": 32, "kv_lora_rank": 32,
        "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
        "mla_use_nope": True, "mla_use_output_gate": True,
        "linear_attn_config": {"kda_layers": [1, 2, 4], "full_attn_layers": [3, 5],
                               "num_heads": 2, "head_dim": 32, "short_conv_kernel_size": 4,
                               "use_full_rank_gate": True, "gate_lower_bound": -5.0},
        "num_experts": 8, "num_experts_per_token": 2, "num_shared_experts": 1,
        "moe_intermediate_size": 32, "routed_expert_hidden_size": 32,
        "latent_moe_use_norm": True, "moe_renormalize": True,
        "moe_router_activation_func": "sigmoid", "routed_scaling_factor": 1.0,
        "first_k_dense_replace": 1, "hidden_act": "situ", "activation_situ_beta": 4.0,
        "activation_situ_linear_beta": 25.0, "attn_res_block_size": 2,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
    }
    if variant == "linear":  # Kimi Linear shape: no AttnRes/latent/bound, SiLU
        t.update({"q_lora_rank": None, "routed_expert_hidden_size": 0,
                  "latent_moe_use_norm": False, "hidden_act": "silu",
                  "attn_res_block_size": 0, "routed_scaling_factor": 2.5,
                  "num_experts_per_token": 3})
        la = dict(t["linear_attn_config"])
        la.update({"use_full_rank_gate": False, "gate_lower_bound": None})
        t["linear_attn_config"] = la
    return {"model_type": "kimi_k3", "text_config": t}


def _rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def _selftest_mxfp4(device):
    packed = torch.tensor([[0x71, 0xF8] + [0x00] * 14, [0x22] * 16], dtype=torch.uint8)
    scales = torch.tensor([[128], [0]], dtype=torch.uint8)
    out = dequant_mxfp4(packed.to(device), scales.to(device), 32).cpu()
    exp0 = [1.0, 12.0, -0.0, -12.0] + [0.0] * 28
    ok = out[0].tolist() == exp0 and out[1].tolist() == [2.0 ** -127] * 32
    nan = dequant_mxfp4(packed[:1].to(device), torch.tensor([[255]], dtype=torch.uint8,
                                                              device=device), 32)
    return ok and bool(torch.isnan(nan).all())


def _selftest_kda(device, errs):
    gen = torch.Generator().manual_seed(1)

    def rnd(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).float().to(device)

    cases = [  # (T, chunk, lower bound)
        (1, 64, -5.0), (5, 64, -5.0), (64, 64, -5.0), (100, 64, -5.0), (200, 64, -5.0),
        (100, 16, -5.0), (77, 32, -0.5), (90, 16, None), (40, 64, -1.0)]
    B, H, dk, dv = 2, 3, 32, 16
    for T, chunk, lb in cases:
        q = F.normalize(rnd(B, H, T, dk), dim=-1)
        k = F.normalize(rnd(B, H, T, dk), dim=-1)
        v = rnd(B, H, T, dv)
        z = rnd(B, H, T, dk) * 2
        A = torch.exp(rnd(1, H, 1, 1))
        if lb is not None:
            g = lb * torch.sigmoid(A * (z - 1.0))
        else:
            g = -A * F.softplus(z - 1.0)
        beta = torch.sigmoid(rnd(B, H, T))
        S0 = rnd(B, H, dk, dv) * 0.3
        sub = kda_sub_block(chunk, lb)
        o1, S1 = kda_recurrent(q, k, v, g, beta, S0, dk ** -0.5)
        o2, S2 = kda_chunked(q, k, v, g, beta, S0, dk ** -0.5, chunk, sub)
        key = "kda_chunk_vs_recurrent T=%d C=%d sub=%d L=%s" % (T, chunk, sub, lb)
        errs[key + " o"] = _rel(o2, o1)
        errs[key + " S"] = _rel(S2, S1)


def _random_tensors(cfg, seed, device):
    src = RandomWeights(seed, device)
    out = {}
    for role, layer, shape in weight_specs(cfg):
        out[(role, layer)] = src.load(role, layer, shape)
    return out


def _selftest_model(variant, device, errs):
    cfg = Config(_tiny_root(variant), "tiny-" + variant)
    tensors = _random_tensors(cfg, 3, device)
    model = K3Eager(cfg, DictWeights(tensors, device), torch.float32, device)
    V = cfg.vocab
    gen = torch.Generator().manual_seed(5)
    Np, M = 70, 6
    toks = torch.randint(0, V, (3, Np + M), generator=gen).to(device)
    full = model.forward(toks[:1], State(model, 1))[0]
    # prefill(N) + decode(M)
    st = State(model, 1)
    rows = [model.forward(toks[:1, :Np], st)[0]]
    for t in range(Np, Np + M):
        rows.append(model.forward(toks[:1, t:t + 1], st)[0])
    errs[variant + " prefill+decode vs prefill"] = _rel(torch.cat(rows), full)
    # prefill(N) + prefill(M): a second chunk with a past
    st = State(model, 1)
    rows = [model.forward(toks[:1, :Np], st)[0], model.forward(toks[:1, Np:], st)[0]]
    errs[variant + " prefill+prefill vs prefill"] = _rel(torch.cat(rows), full)
    # recurrent KDA for the whole prefill
    model.kda_mode = "recurrent"
    rec = model.forward(toks[:1], State(model, 1))[0]
    model.kda_mode = "chunk"
    errs[variant + " recurrent-kda prefill vs chunked"] = _rel(full, rec)
    # last-only logits
    last = model.forward(toks[:1], State(model, 1), last_only=True)[0, -1]
    errs[variant + " last-only logits"] = _rel(last, full[-1])
    # batched prefill + batched decode vs one sequence at a time
    st = State(model, 3)
    rows = [model.forward(toks[:, :Np], st)]
    for t in range(Np, Np + M):
        rows.append(model.forward(toks[:, t:t + 1], st))
    batched = torch.cat(rows, 1)
    singles = torch.stack([model.forward(toks[b:b + 1], State(model, 1))[0] for b in range(3)])
    errs[variant + " batch-3 prefill+decode vs single prefill"] = _rel(batched, singles)
    return cfg, tensors, full, toks[:1]


def _selftest_loader(cfg, tensors, full, toks, device, errs, notes):
    """Writes the tiny model's weights to safetensors the ways a checkpoint
    can hold them (MXFP4 experts per expert under Kimi Linear aliases with
    U8/F8_E8M0 scales, BF16 and prefixed names) and loads them back."""
    try:
        from safetensors.torch import save_file
    except Exception as e:  # noqa: BLE001
        notes.append("loader test skipped: safetensors not importable (%s)" % e)
        return
    gen = torch.Generator().manual_seed(11)
    dense = {}
    files = {}
    e8 = getattr(torch, "float8_e8m0fnu", None)
    for role, layer, shape in weight_specs(cfg):
        t = tensors[(role, layer)].cpu()
        if role in STACKED_ROLES:
            E, W = shape[0], shape[-1]
            packed = torch.randint(0, 256, shape[:-1] + [W // 2], generator=gen,
                                   dtype=torch.int64).to(torch.uint8)
            scales = torch.randint(118, 125, shape[:-1] + [W // 32], generator=gen,
                                   dtype=torch.int64).to(torch.uint8)
            # Independent oracle for the dequantised values (scalar Python).
            pk, sc = packed.tolist(), scales.tolist()
            exp = [[[E2M1[(pk[e][r][i // 2] >> (4 * (i % 2))) & 0xF]
                     * 2.0 ** (sc[e][r][i // 32] - 127) for i in range(W)]
                    for r in range(shape[1])] for e in range(E)]
            dense[(role, layer)] = torch.tensor(exp, dtype=torch.float32)
            for e in range(E):
                name = spellings(role, layer, e)[2]  # block_sparse_moe alias
                if e % 2 and e8 is not None:
                    sc_t = scales[e].clone().view(e8)
                else:
                    sc_t = scales[e].clone()
                if e % 3 == 1:  # compressed-tensors spelling
                    files[name + "_packed"] = packed[e].clone()
                else:
                    files[name] = packed[e].clone()
                files[name + "_scale"] = sc_t
            continue
        dense[(role, layer)] = t
        name = weight_name(role, layer)
        if role in ("LatentUp", "SharedDown"):
            tb = t.to(torch.bfloat16)
            dense[(role, layer)] = tb.float()
            files["language_model." + name] = tb.contiguous()
        else:
            files[name] = t.contiguous()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "w.safetensors")
        try:
            save_file(files, path)
        except Exception as e:  # noqa: BLE001 - e.g. no F8_E8M0 support in this version
            notes.append("F8_E8M0 save failed (%s); scales saved as U8" % e)
            files = {k: (v.view(torch.uint8) if v.dtype == e8 else v) for k, v in files.items()}
            save_file(files, path)
        src = SafetensorsWeights([path], device)
        worst = 0.0
        for role, layer, shape in weight_specs(cfg):
            got = src.load(role, layer, shape).float().cpu()
            worst = max(worst, float((got - dense[(role, layer)]).abs().max()))
        notes.append("loader: every weight read back with max abs diff %g" % worst)
        if worst != 0.0:  # loading is exact: any difference is a bug
            errs["loader weights (must be exact)"] = max(1.0, worst)
        m_file = K3Eager(cfg, src, torch.float32, device)
        m_mem = K3Eager(cfg, DictWeights(dense, device), torch.float32, device)
        a = m_file.forward(toks, State(m_file, 1))[0]
        b = m_mem.forward(toks, State(m_mem, 1))[0]
        errs["loader safetensors model vs memory model"] = _rel(a, b)


def run_selftest(args):
    device = pick_device(args.device)
    set_precision()
    errs, notes = {}, []
    ok = True
    with torch.inference_mode():
        mx_ok = _selftest_mxfp4(device)
        ok &= mx_ok
        # random weights: vectorised torch vs scalar Python oracle
        rw_bad = 0
        for name, shape in (("model.layers.1.self_attn.A_log", [7]),
                            ("model.embed_tokens.weight", [5, 9]),
                            ("model.layers.2.mlp.experts.{e}.gate_proj.weight", [3, 4, 32]),
                            ("model.norm.weight", [40])):
            n = 1
            for d in shape:
                n *= d
            a = random_weight(name, shape, 123456789, device).reshape(-1).cpu().tolist()
            if a != random_weight_scalar(name, shape, 123456789, n):
                rw_bad += 1
        ok &= rw_bad == 0
        _selftest_kda(device, errs)
        cfg, tensors, full, toks = _selftest_model("k3", device, errs)
        _selftest_model("linear", device, errs)
        _selftest_loader(cfg, tensors, full, toks, device, errs, notes)
    worst = max(errs.values()) if errs else 0.0
    ok &= worst <= 1e-3
    print(json.dumps({"selftest": "pass" if ok else "FAIL", "device": device_name(device),
                      "torch": torch.__version__, "mxfp4_ok": mx_ok,
                      "random_weights_mismatches": rw_bad, "max_rel_err": worst,
                      "rel_errs": errs, "notes": notes}, indent=1))
    return 0 if ok else 1


# ---------------------------------------------------------------------------


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="HF-style config.json (models/k3-mini.json)")
    p.add_argument("--weights", action="append",
                   help="safetensors file or directory (repeatable)")
    p.add_argument("--random-weights", type=int, metavar="SEED",
                   help="the weights of `kimi-run --random-weights SEED`, generated here")
    p.add_argument("--dtype", choices=["bf16", "f32"],
                   help="compute dtype (default: bf16 to benchmark, f32 to dump logits)")
    p.add_argument("--device", help="torch device (default: cuda if available)")
    p.add_argument("--prefill-tokens", type=int, default=8192)
    p.add_argument("--prefill-logits", choices=["all", "last"], default="all",
                   help="logits of every prefill token (as kimi-run) or the last only")
    p.add_argument("--decode-batches", default="1,64")
    p.add_argument("--decode-steps", type=int, default=32)
    p.add_argument("--decode-prompt", type=int, default=64,
                   help="random prompt prefilled before the timed decode steps")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=0, help="seed of the random token ids")
    p.add_argument("--kda-chunk", type=int, default=None,
                   help="KDA prefill chunk (default 64 with a gate bound, else 16)")
    p.add_argument("--kda-mode", choices=["chunk", "recurrent"], default="chunk",
                   help="KDA form for prefill (decode steps are always recurrent)")
    p.add_argument("--dump-logits", metavar="FILE",
                   help="check mode: write logits [T, V] as raw little-endian f32")
    p.add_argument("--tokens", help="check mode: comma-separated token ids")
    p.add_argument("--decode-check", type=int, default=0, metavar="N",
                   help="check mode: prefill T-N tokens, then decode N one at a time")
    p.add_argument("--selftest", action="store_true")
    args = p.parse_args(argv)

    if args.selftest:
        return run_selftest(args)
    if not args.config:
        p.error("--config is required")
    cfg = Config.from_file(args.config)
    device = pick_device(args.device)
    set_precision()
    args.decode_batches = [int(s) for s in args.decode_batches.split(",") if s.strip()]
    with torch.inference_mode():
        if args.dump_logits:
            run_check(args, cfg, device)
        else:
            run_bench(args, cfg, device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
