//===- Passes.td - lowering passes out of the kimi dialect -*- tablegen -*-===//
//
// One pass per file; each pass's rationale lives in docs/lowering/.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_PASSES_TD
#define KIMI_LOWERING_PASSES_TD

include "mlir/Pass/PassBase.td"

def KimiLowerKda : Pass<"kimi-lower-kda"> {
  let summary = "Lower chunked kimi.kda to linalg/tensor/arith/math/scf";
  let description = [{
    Rewrites every `kimi.kda` op that carries a `#kimi.decay` attribute into
    the chunked form of Kimi Delta Attention (shared/reference/kimi-k3.md §2)
    on static-shaped tensors. Per batch `b` and head `h` (two `scf.for`) a
    third `scf.for` walks the full chunks of `C = decay.chunk` tokens with the
    f32 state `S : [dk, dv]` and the output tensor as iter_args; when `T` is
    not a multiple of `C` the last, partial chunk of `T mod C` tokens is
    emitted once more after the loop with its own static shape. Per chunk of
    `n` tokens, with `G` the inclusive cumsum of `g` from the chunk's first
    token (causal anchor):

    ```
    Akk[i,j] = beta_i sum_d k_id exp(G_id - G_jd) k_jd       (j <  i)
    Aqk[i,j] =        sum_d q_id exp(G_id - G_jd) k_jd       (j <= i)
    Tm       = (I + Akk)^-1 = (I - N)(I + N^2)(I + N^4)...   (N = Akk,
                                                ceil(log2 n) factors)
    W = Tm Diag(beta) (exp(G) ⊙ K)      U = Tm Diag(beta) V
    V_new = U - W S
    O     = scale ((exp(G) ⊙ Q) S + Aqk V_new)
    S     = Diag(exp(G_last)) S + (exp(G_last - G) ⊙ K)^T V_new
    ```

    The `diag` strategy of the attribute decides how Akk and Aqk are formed:

    * `dense`: as `linalg.matmul`s of the rescaled operands
      `(K ⊙ exp(G)) (K ⊙ exp(-G))^T` and `(Q ⊙ exp(G)) (K ⊙ exp(-G))^T`,
      followed by an elementwise lower-triangular mask (and the row scale
      `beta` for Akk). Only valid when `exp(-G)` cannot overflow, which is
      what the decay-bound proof establishes (`C |L| log2 e` below the
      exponent headroom); the lowering contains no pairwise construct.
    * `pairwise`: as one `linalg.generic` over `(i, j, d)` per matrix
      (`iterator_types = [parallel, parallel, reduction]`) that forms the
      exponent as the difference `G_id - G_jd` (masked to zero above the
      diagonal) before `math.exp`; `exp(-G)` is never materialised. Safe for
      any gate, slower (not a tensor-core product).

    Everything else (cumsum as a matmul with a lower-triangular 0/1 matrix,
    the Neumann product, W, U, V_new, O and the state update) is the same
    `linalg.matmul` / elementwise `linalg.generic` code for both strategies.
    Computation is in f32; bf16/f16 operands are extended on load and the
    output truncated to the result type. `initial_state` defaults to zeros;
    the final state is returned.

    `kimi.kda` ops without a `decay` attribute are left unchanged: they have
    not been through `kimi-chunk-kda`, and choosing a strategy is that
    pass's job, not the lowering's.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::math::MathDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect",
  ];
}

def KimiDecomposeLatentMoe : Pass<"kimi-decompose-latent-moe"> {
  let summary = "Split each kimi.latent_moe into its kimi parts";
  let description = [{
    Rewrites every `kimi.latent_moe` into the kimi ops it is made of:

    ```
    z = kimi.linear(x, down_latent)
    r = kimi.routed_experts(z, weights, indices, experts...)
    r = kimi.rms_norm(r, norm)          (when the op has a latent norm)
    out = kimi.linear(r, up_latent)
    ```

    `kimi-lower-to-linalg` applies the same rewrite to whatever latent MoE
    is left, so the pass changes no result. The GPU model target runs it
    before its kernel passes, so that the latent norm becomes one launch
    of `kimi-gpu-norm-kernels` instead of the linalg decomposition's fill,
    reduction and scaling kernels (k3-mini: three launches fewer per MoE
    layer and decode step).
  }];
}

def KimiLowerToLinalg : Pass<"kimi-lower-to-linalg"> {
  let summary = "Lower kimi graph ops (all but kda) to linalg/tensor/scf";
  let description = [{
    The reference decomposition of the kimi graph ops on tensors, computing
    in f32 with conversions at the edges:

    * `embed`, `linear` (`out[..., n] = sum_k x[..., k] W[n, k]`), `rms_norm`,
      `gated_rms_norm`, `l2_norm`, `sigmoid`, `situ_glu`, `kda_gate` (both
      forms; softplus in its overflow-free form) as `linalg.generic` ops;
    * `short_conv` as a contraction over the taps of `state ++ x` (a
      `tensor.concat`), with the final state sliced off its end;
    * `mla` and `mla_decode` through one absorbed latent-attention code path:
      `q_nope` folded through `W_uk`, scores against `[ckv | k_pe]`, causal
      mask with query `t` at key position `S - T + t`, softmax, mix of the
      latent, then `W_uv` and the optional sigmoid gate;
    * `attn_res` as per-source statistics and one generic that mixes the
      sources with the softmax of their scores;
    * `router` as a contraction and sigmoid, then top-k by rank: each
      expert counts the experts ahead of it (larger biased score, or equal
      and lower index), the rank-j expert fills slot j (ties to the lower
      index), renormalisation; with margins, rank k gives the `(k+1)`-th
      score. No host loop reads tensor elements;
    * `routed_experts` by default as gathers inside contractions: each
      (token, slot) reads its expert's rows where it uses them (gate/up,
      activation, down), then the weighted sum over the k slots. With
      `sorted-experts-min-tokens = N > 0`, ops over at least N tokens are
      sorted by expert instead: every dispatched slot (nonzero weight;
      expert-parallel ranks give experts held elsewhere weight 0) gets a
      row of its expert's block in an `[E, cap, W]` buffer, at its rank
      among that expert's slots in token order (a data-parallel count, no
      atomics), filled by a scatter; the three projections are products
      batched over experts; each token gathers its k rows back. `cap` is
      the largest expert count rounded up to 16 (at most T), the one
      data-dependent size: the host reads it (a call of
      `kimi_host_read_i32`, which this pass defines as a load), so the products cover about the dispatched rows
      (T*k of them, plus the imbalance) instead of T*E, and nothing is
      dropped;
    * `latent_moe` by decomposition into `linear`, `routed_experts`,
      `rms_norm` and `linear`;
    * `quantile_balance` as an `scf.for` over experts taking the `(q+1)`-th
      largest margin of each column by repeated arg-max (exactly; the
      histogram of the sharded form approximates it).

    `kimi.kda` is lowered by `kimi-lower-kda`; `weight_ref` stays (the target
    pipeline decides where weights live). MXFP4 routed experts (with
    `scales`) are read as their bytes: each table and its scales are cast
    (`builtin.unrealized_conversion_cast`) to `i8` tensors of the packed
    shape (`[..., K/2]`, two e2m1 codes a byte, low nibble first; one E8M0
    scale a byte), which `kimi-externalize-weights` turns into the weight
    globals, and every weight is decoded in the loop that uses it, exactly,
    as f32 bits times 2^(scale - 127). Other microscaled weights (a `linear`
    with scales) are rejected. Reductions accumulate in f32 whatever the
    result type. Any op left unlowered is an error naming it.
  }];
  let options = [
    Option<"sortedExpertsMinTokens", "sorted-experts-min-tokens", "int64_t", "0",
           "Routed experts over at least this many tokens are sorted by "
           "expert and run as products batched over experts (0: never)">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::func::FuncDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::LLVM::LLVMDialect",
    "::mlir::NVVM::NVVMDialect",
    "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect",
  ];
}

def KimiExternalizeWeights
    : Pass<"kimi-externalize-weights", "::mlir::ModuleOp"> {
  let summary = "Turn model weights into exported, runtime-filled globals";
  let description = [{
    The CPU target's weight ABI (docs/runtime-abi.md): every `kimi.weight`
    becomes an uninitialised public `memref.global @kimi_w_<slot>` of its
    shape (64-byte aligned), where `slot` is the weight's position among the
    module's `kimi.weight` ops, and every `kimi.weight_ref` becomes a
    `memref.get_global` wrapped in a read-only `bufferization.to_tensor`.
    The runtime finds each global by name in the compiled shared object and
    writes the weight into it before the first call; the code only reads it.
    Weights must have a static shape and a float element type. MXFP4
    weights are held as their bytes: an `f4E2M1FN` weight `[..., K]` becomes
    an `i8` global `[..., K/2]` (two codes a byte, the low nibble first) and
    its `f8E8M0FNU` scales an `i8` global of their shape; their users must
    read them through `builtin.unrealized_conversion_cast`s to those byte
    tensors (what the routed-experts lowering emits), which are replaced by
    the globals.
  }];
  let dependentDialects = [
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::memref::MemRefDialect",
  ];
}

def KimiLowerCollectives
    : Pass<"kimi-lower-collectives", "::mlir::ModuleOp"> {
  let summary = "Lower shard collectives to calls into the runtime's communicator";
  let description = [{
    The CPU target's collective ABI (docs/runtime-abi.md). After
    `shard-partition`, each rank's code exchanges data through `shard` ops;
    this pass turns each into a call to the shared object's comm shim, which
    forwards to the `Communicator` the runtime installs when it loads the
    artifact (MPI for CPU ranks):

    * `shard.all_reduce` (sum, max) ->
      `kimi_rt_all_reduce_<t>(send, recv, op, group)`;
    * `shard.all_gather` -> `kimi_rt_all_gather_<t>(send, recv, group)`,
      whose rank-stacked blocks are transposed to the gather axis;
    * `shard.reduce_scatter`, `shard.all_to_all` likewise, with the blocks
      of the scatter / split axis made leading and contiguous first;
    * `shard.all_slice` -> `tensor.extract_slice` at this rank's block;
    * `shard.process_multi_index` / `process_linear_index` ->
      `kimi_rt_rank()` and index arithmetic over the grid shape.

    `<t>` is `f32`, `i32` or `i64`; buffers are `memref<?xT>` (send: a
    contiguous copy of the operand; recv: a fresh allocation wrapped back
    into a tensor). `group` is the i32 bit set of the op's grid axes: the
    collective runs among the ranks that share every other grid coordinate
    (on a 2-D grid `G x T`, axis 1 is a tensor-parallel group of T ranks),
    ordered row-major over the group's axes, which must be listed in
    ascending order; grids have at most 4 axes. The runtime makes one
    communicator per axis set when it loads the model. The `shard.grid` is
    erased.
  }];
  let dependentDialects = [
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::func::FuncDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::LLVM::LLVMDialect",
    "::mlir::NVVM::NVVMDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::tensor::TensorDialect",
  ];
}

def KimiCheckLowered : Pass<"kimi-check-lowered", "::mlir::ModuleOp"> {
  let summary = "Fail on any kimi op the lowering to linalg left";
  let description = [{
    The last step of `kimi-to-linalg-pipeline`. Every kimi op must have been
    lowered by then; one that is left cannot run (most often a `kimi.kda`
    without the `#kimi.decay` attribute that `kimi-chunk-kda` adds: the
    decay proof was not in the front pipeline). The pass reports the first
    such op at its location, by name, and fails.
  }];
}

def KimiPrepareBufferization
    : Pass<"kimi-prepare-bufferization", "::mlir::ModuleOp"> {
  let summary = "Give entries the runtime's calling convention and each writer its own init";
  let description = [{
    Run on linalg over tensors, just before `kimi-bufferize`:

    * Public functions (the entries) get MLIR's C interface
      (`llvm.emit_c_interface`) and read-only arguments
      (`bufferization.writable = false`): the runtime shares input buffers
      between sessions and snapshots, so bufferization copies before any
      in-place update. Argument and result attributes (state names) are
      dropped: they live on in the artifact's signature.
    * Every `linalg.fill` that several ops write into is cloned, one per
      writer. CSE merges the zero inits of products (every `kimi.linear` of
      a layer starts from the same fill); bufferized, one shared fill is a
      fill plus a copy for each further writer, and the GPU's
      `kimi-gpu-gemm-calls` no longer sees the zero init that lets a
      product overwrite its output.
    * `splats-as-fills`: splat tensor constants become `linalg.fill` of a
      `tensor.empty`, so bufferization makes no global of them (the GPU
      target, whose globals are host memory).
    * `empty-per-writer`: every op that writes into a shared `tensor.empty`
      gets one of its own, so each result has a buffer of its own (the GPU
      target: a buffer reused by a later, independent op is a false
      dependency that keeps `kimi-gpu-gemm-calls` from launching the two
      together).
  }];
  let options = [
    Option<"splatsAsFills", "splats-as-fills", "bool", "false",
           "Splat tensor constants become fills of fresh tensors">,
    Option<"emptyPerWriter", "empty-per-writer", "bool", "false",
           "Each writer of a shared tensor.empty gets its own">,
  ];
  let dependentDialects = [
    "::mlir::linalg::LinalgDialect",
    "::mlir::tensor::TensorDialect",
  ];
}

def KimiBufferize : Pass<"kimi-bufferize", "::mlir::ModuleOp"> {
  let summary = "One-Shot Bufferize the whole call graph the way the runtime calls it";
  let description = [{
    One-Shot Bufferize over the module's call graph (function boundaries
    included), with loops allowed to return allocations and identity
    layouts on every function's arguments and results, so the runtime sees
    plain row-major buffers. Tensor copies become `linalg.copy`:
    `memref.copy` of strided buffers would call `memrefCopy` from MLIR's
    runner library, which a model's shared object must not need.
    Deallocation comes after it (`kimi-to-memref-pipeline`).
  }];
  let dependentDialects = [
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::memref::MemRefDialect",
  ];
}

def KimiCopiesAsLinalg : Pass<"kimi-copies-as-linalg", "::mlir::ModuleOp"> {
  let summary = "Rewrite memref.copy as linalg.copy";
  let description = [{
    After deallocation: `bufferization.clone` lowers to an allocation and a
    `memref.copy`, which for strided buffers would call `memrefCopy` from
    MLIR's runner library. As `linalg.copy` the copy becomes loops (CPU) or
    a kernel (GPU), and the shared object needs no library beyond libc and
    libm.
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect"];
}

def KimiKdaBf16Io : Pass<"kimi-kda-bf16-io"> {
  let summary = "Round kimi.kda's inputs and output through bf16 as the Hopper prefill kernels do";
  let description = [{
    The generated KDA prefill kernels (`kimi-gpu-kda-kernels`) read q, k, v
    and beta in bf16 and write a bf16 output, with f32 math inside. In an
    f32 model that rounding is part of the GPU program's numerics, and a
    model can be sensitive to it: with random weights, rounding only these
    tensors of k3-tiny's KDA layers moves its logits by about 0.3 (relative
    L2) on the CPU target. This pass applies the same rounding on any target
    so that the GPU model with the kernels can be checked against a
    reference with the same rounding (`kimi-compile --kda-bf16-io`).

    Every `kimi.kda` over more than one token (or with `cu_seqlens`) whose
    activations are f32 becomes `arith.truncf` of q/k/v/beta to bf16, a
    `kimi.kda` with a bf16 output, and `arith.extf` of that output back to
    f32. States stay f32; single-token (decode) steps are left alone, like
    the decode kernel, which reads f32.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def KimiGpuKdaKernels : Pass<"kimi-gpu-kda-kernels", "::mlir::ModuleOp"> {
  let summary = "Run kimi.kda through the generated Hopper KDA kernels";
  let description = [{
    The GPU model target's KDA (`kimi-compile --gpu-kda-kernels`, on by
    default for single-GPU models; docs/lowering/gpu-model.md): every
    `kimi.kda` with static shapes (after the decay proof and
    `kimi-chunk-kda`) is emitted as the generated kernels of the KDA kernel
    libraries (docs/lowering/gpu-kda.md): `kda_prep` + `kda_recur` (+
    `kda_summarize`/`kda_fold` for a sequence split) for prefill,
    `kda_decode` for one token. A `kimi.kda_gate` producing `g` is fused
    into the kernels. One sequence builder (`buildKdaKernels`) serves both:
    here it emits IR at the op directly, a `gpu.module` (`kimi_kda_<n>`) of
    the kernels, the op's operands as `bufferization.to_buffer` views,
    `memref.alloc`s for outputs and temporaries (the decode state is
    updated in a copy of the input state), a `linalg.generic` computing the
    offsets `i * T` of equal-length sequences on the device (a constant
    tensor would become host memory), and `gpu.launch_func`s; the results
    come back through `bufferization.to_tensor`. The kernels' chunk (16) may
    not exceed the one `#kimi.decay` proved safe. The prefill kernels read
    bf16: f32 q, k, v and beta are rounded to bf16 and the output widened
    back (f32 math and state inside). A `kimi.kda` the generators do not
    cover stays (with a remark saying why) for `kimi-lower-kda`.
  }];
  let options = [
    Option<"smCount", "sm-count", "int", "132",
           "Multiprocessors the launch planning assumes (an H200 has 132)">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::LLVM::LLVMDialect",
    "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::NVVM::NVVMDialect",
    "::mlir::nvgpu::NVGPUDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect",
    "::mlir::vector::VectorDialect",
  ];
}

def KimiGpuMlaKernels : Pass<"kimi-gpu-mla-kernels", "::mlir::ModuleOp"> {
  let summary = "Run MLA through the generated flash-style prefill and split-key decode kernels";
  let description = [{
    `kimi-compile --gpu-mla-kernels`. Every `kimi.mla` and every
    `kimi.mla_decode` with at least `min-queries` queries (a prefill step)
    becomes:

    1. the expansion `kv = kimi.linear(ckv, kv_b_proj)` of the cached
       latent rows into each head's `k_nope` and `v` (`[B, S, H * (dn + dv)]`,
       a plain product for cuBLASLt), and
    2. one launch of a generated causal attention kernel
       (`gpu.module @kimi_mla`, one kernel per specialisation; docs/lowering/gpu-model.md, "MLA prefill
       kernel"): grid (ceil(T / 64), H, B), four warps of 16 query rows;
       per tile of 64 keys it copies `[k_nope | k_pe]` and `v` into one of
       two stages of dynamic shared memory by `cp.async` (the next tile's
       copies fly while this tile's products run), forms the scores with `mma.sync` (f16 operands, f32
       accumulation), applies the scale and the causal mask (query `t` sees
       keys `s <= L - T + t`, `L` the `lengths` operand or `S`; only on the
       tiles that straddle the diagonal), keeps an online softmax (running
       row max and sum) and adds `P V`; the epilogue divides by the row sum
       and applies the output gate.

    Nothing of size `[T, S]` is materialised, and the key tiles past a
    block's last visible key are not read. The kernel reads f16 copies of
    the queries, the expansion and `k_pe` (made here, once per step) and
    rounds `P` to f16; the softmax and all accumulation are f32, so the
    result differs from the f32 decomposition by f16 rounding (11
    significant bits; the activations must stay inside f16's range, which
    normalised hidden states do). The queries, keys, gate and result are
    all f32 or all bf16 (bf16 activations: bf16 goes to f16 through f32,
    and the kernel reads the gate and writes the result as bf16). Ops whose
    shapes the generator does not cover (head widths, shared memory, other
    types) stay, with a remark saying why, for `kimi-lower-to-linalg`.

    A `kimi.mla_decode` with fewer queries (a decode step) keeps the
    absorbed form, which reads the latent cache once for all heads, and with
    `decode-kernels` its attention runs as two generated kernels
    (docs/lowering/gpu-model.md, "MLA decode kernels"):

    1. the queries are folded through `W_uk` (`qa`, linalg as on the CPU);
    2. a split kernel, grid (splits, ceil(T H / 16), B): each block takes
       a range of consecutive keys, as many splits as fill `sm-count` SMs
       with one block each (batch and row tiles count; at least
       `decode-split-keys` keys, at most 1,024 splits), stages 32 cache
       rows at a time in shared memory as
       f16, forms the scores of its 16 query rows `[qa | q_pe]` with
       `mma.sync` (f32 accumulation), keeps an online softmax and adds
       `P [latent]`; it writes the unnormalised partial mix with its row
       max and sum;
    3. a combine kernel weights the splits by `exp2(m_split - m)` in split
       order (deterministic: the result depends only on the shapes) and
       divides by the total sum;
    4. `W_uv` and the output gate (linalg, as on the CPU).

    When the cache operand is the model's `kimi.cache_insert` of the step's
    rows (and the op's lengths are its lengths plus T) or a concatenation of
    the cache and the rows, the split kernel reads the old cache and the
    new rows where they are, and the grown cache, a copy of the whole cache
    every step, is never made. Keys and queries are rounded to f16 for the
    products (as in the prefill kernel); the softmax and all sums are f32.
    The queries and the cache (with its new rows) may be bf16 (bf16
    activations: read at 8 bytes a piece and widened as they are staged);
    the absorbed queries and the partial mixes are f32. Shapes the kernels
    do not cover (latent or k_pe widths not multiples of 16, cache rows too
    wide for 48 KiB of shared memory, types other than f32 and bf16) stay,
    with a remark, for `kimi-lower-to-linalg`.
  }];
  let options = [
    Option<"minQueries", "min-queries", "int64_t", "16",
           "MLA ops with fewer (static) queries are decode steps">,
    Option<"decodeKernels", "decode-kernels", "bool", "true",
           "Run decode steps' attention through the split-key kernels "
           "(else linalg)">,
    Option<"decodeSplitKeys", "decode-split-keys", "int64_t", "64",
           "Fewest keys per block of the decode split kernel (rounded up "
           "to 32)">,
    Option<"smCount", "sm-count", "int64_t", "132",
           "SMs the decode split kernel's blocks should fill once">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::NVVM::NVVMDialect",
    "::mlir::nvgpu::NVGPUDialect",
    "::mlir::LLVM::LLVMDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect",
    "::mlir::vector::VectorDialect",
  ];
}

def KimiGpuAttnResKernels : Pass<"kimi-gpu-attn-res-kernels", "::mlir::ModuleOp"> {
  let summary = "Run each AttnRes application (and the norm after it) as one generated kernel";
  let description = [{
    On by default for `--target sm_90a` models (`kimi-compile
    --gpu-tokenwise-kernels=false` turns it off, with
    `kimi-gpu-norm-kernels` and `kimi-gpu-short-conv-kernels`). Every `kimi.attn_res`
    with a static hidden width becomes one launch of a generated kernel
    (`gpu.module @kimi_attn_res`, lowering/ToGPU/Kernels/AttnResKernel.cpp): one
    block of 256 threads per token, each thread holding up to 64 columns
    in registers. The sources are read once: per source one block
    reduction gives `sum v^2` and `sum v * norm * query` (the score of the
    RMS-normalised key without materialising it), and an online softmax
    folds the source into the running mix.

    When the mix's only user is a `kimi.rms_norm` of it (the model's
    `input_layernorm` and `post_attention_layernorm`), that norm is fused:
    one more block reduction over the mix in registers, and only the
    normalised result is stored. Kernels are shared between ops with the
    same source count, width, types and epsilons; the token count (grid
    x) is a run-time value, so one kernel serves prefill chunks of any
    length. All arithmetic is f32, as in the linalg decomposition; the
    results differ from it only by summation order.

    The linalg decomposition of the same op over one decode token is
    about ten launches (per-source reductions, the softmax, the mix and
    the norm), most of them a single warp; here it is one. Ops the
    generator does not cover (dynamic or over 16,384 wide, sources of
    another type than the result) stay for `kimi-lower-to-linalg` with a
    remark.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect",
    "::mlir::vector::VectorDialect",
  ];
}

def KimiGpuRouterKernels : Pass<"kimi-gpu-router-kernels", "::mlir::ModuleOp"> {
  let summary = "Run each MoE router's selection as one generated kernel";
  let description = [{
    On by default for `--target sm_90a` models (`kimi-compile
    --gpu-tokenwise-kernels=false` turns it off). Every `kimi.router` (up to
    2,048 experts, f32/bf16/f16 weight, i32 indices) becomes its logits
    product, `kimi.linear(x, weight) -> f32`, which the GEMV grouping of
    `kimi-gpu-gemm-calls` can launch together with the layer's other
    products of `x`, and one launch of a generated kernel (`gpu.module
    @kimi_router`): one warp per token, each lane holding the sigmoid scores
    plus bias of every 32nd expert in registers; k rounds (k + 1 with
    margins) of a per-lane best and a warp butterfly pick the experts in
    kimi.router's order (larger biased score first, ties to the lower
    index); each winner's unbiased score is recomputed from its logit, and
    lane 0 writes the indices and the weights, renormalised over the k
    scores in slot order and scaled. With margins every lane writes
    `biased - alpha` for its experts, alpha the (k + 1)-th biased score.

    The linalg decomposition ranks every expert against every other
    (`[T, E, E]` comparisons) and picks, sums and scales in separate loop
    nests: about nine launches per router, most of them a single block.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect",
  ];
}

def KimiGpuRoutedExpertsKernels
    : Pass<"kimi-gpu-routed-experts-kernels", "::mlir::ModuleOp"> {
  let summary = "Run routed experts as generated kernels (a decode step: two; a prefill step: sorted tensor-core products)";
  let description = [{
    On by default for `--target sm_90a` models (`kimi-compile
    --gpu-tokenwise-kernels=false` turns it off). Every
    `kimi.routed_experts` over a static number of tokens up to `max-tokens`
    (a decode step's; longer runs are the sorted products' domain of
    `kimi-lower-to-linalg{sorted-experts-min-tokens}` and stay), with f32 or
    bf16 tokens and result (bf16 activations: the tokens widened in
    registers, the result rounded at the store) and f32, bf16 or MXFP4
    expert weights, becomes two
    launches of generated kernels (`gpu.module @kimi_routed_experts`), both
    built on the GEMV kernel's core of four-element loads (16 bytes of f32,
    8 of bf16 widened in registers) with a group of chunks in flight per
    lane. MXFP4 tables (`scales(...)`, the K3 release's experts) are read as
    their bytes: each is two i8 buffers, the packed e2m1 codes and one E8M0
    scale per 32 values, and a lane reads a 4-byte word of 8 codes with its
    block's scale byte and decodes them in registers, exactly as the CPU's
    loops do (the code as f32 bits, times 2^126, times 2^(s - 127)):

    * `gate_up`, one block row per (token, slot) pair: each warp dots one
      row of the slot's expert in both `gate_proj` and `up_proj` with the
      token and stores `h = act(g, u)` (SiTU or SiLU GLU);
    * `down`, one block per output column and token: warp w dots
      `down_proj`'s row of the experts of slots w, w + 4, ... with their
      `h` (all its slots' loads in flight together) and adds them with
      their routing weights; shared memory adds the four warps' totals.

    One row a warp and a block a column give a decode step thousands of
    warps, several dozen per SM: with fewer, longer warps the same loads
    left the HBM half idle.

    An index outside `[0, E)` reads expert `E - 1` (kimi.routed_experts
    leaves it undefined; the clamp keeps the reads inside the weights).
    The linalg form gathers the expert rows element by element inside
    generic loop nests, about 2.8 TB/s on the H200 for the gate and up
    products, plus a zero fill, the activation and the weighted sum as
    their own launches. Ops the kernels do not take are kept for
    `kimi-lower-to-linalg` with a remark that says why.

    Above `max-tokens` (a prefill step), an op with MXFP4 or bf16 experts
    is lowered here, to the token-sorted form `kimi-lower-to-linalg` gives
    such steps, except that its tables and its products are kernels. The
    tables (each dispatched slot's row, each row's token, the tile table)
    come from one block of 1024 threads (`SortedExpertTablesKernel.h`)
    that takes the slots in rounds of one a thread, groups each warp's
    lanes by expert (`match.any`) and scans the groups over the warps: in
    linalg they were a dozen small launches and fills (17 of the 25
    launches of a k3-mini batch-64 MoE layer); steps with more than 1024
    experts keep them. The products, the
    rows times each expert's table, run as generated tensor-core kernels
    (`ExpertProductKernel.h`) over the rows each expert holds: one launch for gate and up
    together that stores only their GLU (SiTU or SiLU, applied to the f32
    accumulators), and one for down. The rows of all experts lie back to
    back (no padding) in tiles of 128 rows of one expert, which the table of
    tiles names (expert, first row, end row): nothing is
    read on the host, so a batched decode step can be a graph. A block of
    eight warps takes one tile and 64 columns (warps of 32 x 32); with
    bf16 rows and tables, 128 columns of gate and of up, or 256 of down,
    in warps of 64 x 64 products, which read half the shared memory a
    product that 32 x 32 warps do. Where the experts hold at
    most 16 rows each on average (a batch of decode tokens: k3-mini's batch
    64 gives 8), tiles are 32 rows and blocks 128 columns: a 128-row tile
    would run its tensor cores on zero rows, 15/16 of its products at 8
    rows. Per 32-deep step (one scale block) it
    stages each table's slice as a bf16 tile in shared memory (MXFP4 codes
    decoded with their scale, exactly: an MXFP4 value has two significant
    bits) and the rows, then runs `mma.sync m16n8k16` with f32
    accumulation; the next step's global loads are issued before this
    step's products. bf16 rows and bf16 tables (the default types) need no
    register on the way: each step's pieces are `cp.async` copies into one
    of four stages of dynamic shared memory (120 KiB; three stages of
    32-row tiles), the later steps' copies in flight during a
    step's products, so that a batch of decode tokens (a few rows an
    expert, little arithmetic between loads) still streams the tables at
    HBM speed. With `bf16-products` f32 rows are rounded to bf16 and
    the GLU is stored as bf16 (what down would round it to); without, each
    f32 row value is split into three bf16 terms (all 24 bits of its
    significand) and every product runs once per term, so the result is as
    exact as f32 arithmetic, and the GLU stays f32. bf16 rows (bf16
    activations: gate and up read the gathered tokens at their type) are
    one term either way. Blocks past the last tile return at once. The
    cuBLASLt products this replaces for bf16 experts ran over every
    expert's `cap` rows (the largest count, read by the host: about twice
    the rows the experts hold in a k3-mini prefill chunk) and wrote gate
    and up as f32 for a SiTU kernel of their own. f32 experts keep that
    linalg form.
  }];
  let options = [
    Option<"maxTokens", "max-tokens", "int64_t", "63",
           "Routed experts over at most this many static tokens run as the "
           "decode kernels; more as the sorted products (the model target "
           "passes sorted-experts-min-tokens - 1)">,
    Option<"bf16Products", "bf16-products", "bool", "true",
           "The sorted products round their f32 rows to bf16 and store the "
           "GLU as bf16 (=false: three bf16 terms, as exact as f32, and an "
           "f32 GLU)">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::func::FuncDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::LLVM::LLVMDialect",
    "::mlir::NVVM::NVVMDialect",
    "::mlir::nvgpu::NVGPUDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect",
    "::mlir::vector::VectorDialect",
  ];
}

def KimiGpuNormKernels : Pass<"kimi-gpu-norm-kernels", "::mlir::ModuleOp"> {
  let summary = "Run each RMS, L2 and gated RMS norm as one generated kernel";
  let description = [{
    On by default for `--target sm_90a` models (`kimi-compile
    --gpu-tokenwise-kernels=false` turns it off). Every `kimi.rms_norm`,
    `kimi.l2_norm` and `kimi.gated_rms_norm` with a static width of at most
    8,192 becomes one launch of a generated kernel (`gpu.module
    @kimi_norm`): a group of 32 to 256 threads per row (the fewest that
    hold the row in at most 32 values a thread; one warp for a 128-wide
    head, a block for a 2,048-wide token), 16-byte loads when the width
    divides by 4, the sum of squares by a warp butterfly and, for groups of
    several warps, one round through shared memory, then the row scaled
    (`rsqrt(mean + eps) * w`, `rsqrt(sum + eps)`, or
    `w * rsqrt(mean + eps) * sigmoid(gate)`) and stored. f32 throughout.

    The linalg decomposition is a fill, a reduction kernel and a scaling
    kernel per norm (three launches); the rows' count is a run-time value,
    so one kernel serves every chunk length. Run after
    `kimi-gpu-attn-res-kernels`, which fuses the norms of AttnRes mixes.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect",
    "::mlir::vector::VectorDialect",
  ];
}

def KimiGpuShortConvKernels : Pass<"kimi-gpu-short-conv-kernels", "::mlir::ModuleOp"> {
  let summary = "Run each short convolution (with its SiLU and final state) as one generated kernel";
  let description = [{
    On by default for `--target sm_90a` models (`kimi-compile
    --gpu-tokenwise-kernels=false` turns it off). Every `kimi.short_conv`
    with static channels and taps becomes one launch of a generated kernel
    (`gpu.module @kimi_short_conv`): over the extended sequence
    `xpad = state ++ x` (`[B, K - 1 + T, C]`, zeros without a state), one
    thread per tile of eight rows and four channels (vector loads and stores
    when the channels divide). A thread loads its tile's rows, the `K - 1`
    rows after them and its taps once, all loads issued together (rows past
    the end are read clamped); for each row `r < T` of its tile it writes
    `out[b, r, c] = act(sum_j w[c, 0, j] * xpad[b, r + j, c])` (the taps
    summed in order, in f32; `act` is SiLU when the op says so), and for each
    row `T <= r < T + K - 1` the final state `final[b, r - T] = xpad[b, r]`.
    Nothing of size `xpad` is materialised, and the input and the taps cross
    L2 about once (one thread per row read the taps and `K` rows each: an
    8K prefill chunk's convolutions took 115 us instead of about 20).

    The linalg decomposition is a concatenation (two copies), a zero fill,
    the reduction, the SiLU and, after the layer, the final state's copy:
    six launches per convolution in a decode step, 18 per KDA layer (q, k
    and v), against one each here. B and T are run-time arguments, so one
    kernel serves every chunk length; kernels are shared by equal
    specialisations.

    A KDA layer L2-normalises the heads of its q and k convolutions
    (`tensor.expand_shape` of the output to `[B, T, H, D]`, then
    `kimi.l2_norm`). When that norm is the output's only use and a head is
    one warp's 32 threads of four channels (`D = 128`, `C` a multiple of
    it), the kernel normalises too: the warp's values are rounded to the
    activation type (as the separate norm reads them), their squares
    summed in the thread and by a `shuffle xor` butterfly, and each value
    scaled by `rsqrt(sum + eps)`, the sums in the norm kernel's order. That
    is one launch less per norm, two per KDA layer. Run it before
    `kimi-gpu-norm-kernels`, which takes the other norms.

    Convolutions of one block with the same specialisation and static
    shapes share one launch (at most four): a KDA layer's q, k and v, whose
    k and v projections come after the q convolution in the IR. The pure
    ops that compute a later convolution's operands move before the first
    one (a convolution that reads another's output stays apart), and block
    row `y` of the grid runs convolution `y`, each with its own buffers and
    fused norm. A KDA layer's decode step then has one convolution launch
    instead of three (plus two norms).
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect",
    "::mlir::vector::VectorDialect",
  ];
}

def KimiGpuWeightTable : Pass<"kimi-gpu-weight-table", "::mlir::ModuleOp"> {
  let summary = "Read weights through a runtime-filled table of device pointers";
  let description = [{
    The GPU model target's weight ABI (docs/runtime-abi.md, "GPU models").
    Weights live in device memory that the runtime allocates when it loads
    the artifact, so they cannot be globals of the shared object as on the
    CPU. This pass adds one exported, zero-initialised
    `llvm.mlir.global @kimi_gpu_weights : !llvm.array<N x ptr>` and rewrites
    every `memref.get_global @kimi_w_<slot>` (from
    `kimi-externalize-weights`, after bufferization) into a load of entry
    `slot` of that table and a memref descriptor built around it (offset 0,
    the global's static sizes and identity strides), cast back to the
    global's memref type. The weight globals are erased. The runtime stores
    the device address of manifest weight `slot` into entry `slot` before
    the first call. Any other `memref.get_global` (a bufferized constant)
    would hand host memory to a kernel and is an error naming the global.
  }];
  let dependentDialects = [
    "::mlir::LLVM::LLVMDialect",
    "::mlir::memref::MemRefDialect",
  ];
}

def KimiGpuFuseElementwise
    : Pass<"kimi-gpu-fuse-elementwise", "::mlir::ModuleOp"> {
  let summary = "Fuse elementwise linalg producers into their consumers";
  let description = [{
    On linalg over tensors, before bufferization (the GPU model target runs
    it after kimi -> linalg). Each `linalg.generic` becomes one kernel, so a
    chain of elementwise generics (attention's scale, mask and exp; a
    gate's sigmoid and product; residual adds) costs a launch and a round
    trip through memory per link. This pass inlines an all-parallel generic
    into the generics that read its result (upstream's elementwise fusion,
    which also fuses into reductions such as a softmax's row sums), under
    two conditions:

    * the consumer is not a matrix-product contraction, which must stay a
      plain multiply-accumulate for `kimi-gpu-gemm-calls` (cuBLASLt): a
      norm is not fused into the linear layer after it;
    * every user of the producer takes it, so the producer and its buffer
      disappear. A producer read by several consumers is recomputed in each
      (arithmetic, not memory traffic);
    * the consumer reads each element of the producer at most 16 times
      (the product of the extents of the consumer loops that the
      operand's indexing map leaves out). Otherwise the recomputation is the
      cost: a decode step's expert down projection, `[8, 1024]` outputs
      over gathered `[8, 768]` activations, evaluated the SiTU (two tanh,
      an exp, three divisions) of each input for every one of the 1,024
      outputs, and took 33 us on the H200 for a 25 MB read.
  }];
  let dependentDialects = [
    "::mlir::linalg::LinalgDialect",
  ];
}

def KimiGpuGemmCalls : Pass<"kimi-gpu-gemm-calls", "::mlir::ModuleOp"> {
  let summary = "Run matrix-product contractions through the runtime's cuBLASLt";
  let description = [{
    In the GPU model target, every bufferized linalg contraction that is a
    plain (optionally batched) matrix product — `linalg.matmul` or a
    `linalg.generic` whose body is a multiply-accumulate, with exactly one
    m, n and k loop and at most one batch loop, f32 or bf16 inputs and an
    f32 output, projected-permutation indexing and, for each matrix, a
    static unit stride along one of its two dimensions — becomes a call

    ```
    func.call @kimi_gpu_gemm_f32(a, b, c, m, n, k, batch,
                                 a_m, a_k, a_batch, b_k, b_n, b_batch,
                                 c_m, c_n, c_batch, precision, flags)
    ```

    with element addresses and strides taken from the buffers' strided
    metadata (a loop dimension an operand does not use has stride 0).
    Loops of static extent 1 do not count as dimensions, except that one of
    m, n and k stays when all its loops are units: a decode step's
    `[1, 1, K] x [N, K]` is a product with m = 1 (cuBLASLt's GEMV), not a
    kernel in which every thread loops over K. Without a batch loop, a
    second m (or n) loop that the other input does not index becomes the
    batch, with batch stride 0 for that input: attention's scores
    `q[t, h, r] x ckv[s, r]` over a latent cache that all heads share run
    as 16 (heads) products of `[T, R] x [R, S]`, the shorter loop being the
    batch. The
    GPU shim forwards it to the runtime, which runs `C += A B` with cuBLASLt
    on the model's stream (runtime/cuda/cublaslt.h). Everything else stays
    for the loop-to-kernel mapping. `precision` chooses exact f32 products
    (`f32`, default) or TF32 tensor cores with f32 accumulation (`tf32`)
    for f32 operands. Two bf16 operands run on bf16 tensor cores as they
    are (call precision 2: A and B bf16 buffers, C f32, f32 accumulation;
    their products are exact).
    `flags` bit 0 is set when m, n, k and the batch are compile-time
    constants: such a product recurs with the same shape on every call, so
    the runtime chooses its cuBLASLt algorithm by timing the heuristic's
    candidates once. A size that depends on the cache length or on routing
    would be timed again at every new value, so it keeps the heuristic's
    pick. A bf16 input (a weight at its stored type, the activations being
    f32) is first widened into a new f32 buffer of its shape by a generic
    (one kernel), which the call reads and which is freed after it: exact,
    and alive for one product only. With `bf16-weight-products` it goes the
    other way round: the f32 operand (the activations) is rounded into a new
    bf16 buffer (to nearest even, freed after the call), and the bf16
    weight is read as it is, at half the bytes and twice TF32's tensor-core
    rate (precision 2). That rounds the activations where they enter a
    weight's product, as bf16 activations do; products of two f32 operands
    (attention and KDA internals) keep `precision`. Bit 1 says the product overwrites C
    (`C = A B`): the
    `linalg.fill` of +0.0 into C that bufferization leaves before it (the
    closest earlier op that writes memory or uses C) is erased, and
    cuBLASLt runs with beta = 0. At an 8K cache that fill was a pass of
    1 GB over attention's scores per 2,048-token step and MLA layer.
    Bit 2 says C is bf16: when a bf16 product overwrites an f32
    allocation that nothing but a rounding reads (a `linalg.generic` whose
    body is one `arith.truncf` of it into a bf16 buffer of its shape, with
    identity maps: each projection of bf16 activations), cuBLASLt rounds
    the f32 sums as it stores them into the rounding's output, and the f32
    buffer and the rounding go. The values are the same (one rounding to
    nearest even of the same f32 sums); a 2048 x 2048 result is written
    once at 2 bytes instead of at 4, read back and written again. The
    product then writes that output where the product was, so the output's
    view must exist there, and every op between the two must be free of
    side effects, an allocation, or leave the output's allocation alone.

    With `gemv-max-m` > 0, a product of static sizes with at most that
    many rows of A (a decode step's projections), B stored as
    `[N, K]` (the weight layout of `kimi.linear`, k contiguous), static
    strides and offsets that keep 16-byte alignment, becomes instead one
    launch of a generated kernel (`gpu.module @kimi_gemv`,
    lowering/ToGPU/Kernels/GemvKernel.h): each warp reads two rows of B (one when
    m > 2) in 16-byte pieces with eight pieces per row in flight per lane,
    and all m rows of A, in exact f32. A bf16 B, and a bf16 A (bf16
    activations), is read at its size: four values (8 bytes) a piece,
    widened in registers. Such a product's cost is reading B
    once; cuBLASLt's kernels for m = 1 read a 2048 x 2048 f32 weight at
    about 1.3 TB/s on the H200. The zero fill before it is dropped the same
    way (the kernel stores rather than adds). A batched product (static
    batch extent and strides, A's and B's multiples of four: MLA decode's
    per-head output expansion) is one launch whose item i reads A, B and C
    at i times their batch strides; it launches alone (no group, no pair).

    A launch with fewer rows than it takes to give every SM about 32 warps
    (a 2048 x 2048 projection: 1,024 warps, eight an SM, 1.5 TB/s under
    ncu) splits k over two or four warps of a block, each reading its share
    of every row (whole 128-wide chunks only); the warps' sums meet in
    shared memory and the row group's first warp adds them in order.

    GEMV products that read the same A (the same root buffer at the same
    offset, m, k and row stride, through whatever views: a decode step's
    q, k, v, gate and beta projections of one normalised activation, or an
    MoE layer's router, latent and shared-expert projections) run as one launch of up to `gemv-max-group`
    products, each owning a range of the grid's blocks. A launch costs a
    few microseconds of fixed time, and the small products of a group (a
    16-row beta projection) are nothing but that. The group is launched
    where its first product was, so a later product joins only when that
    cannot be observed: no op between the two uses its output buffer
    (other than its own zero fill) or may write A or its weight, neither
    product may write what the other reads, and the ops that define its
    weight and output views are allocations, side-effect-free ops or loads
    of the weight table, which move up with it. Buffers that may be one
    (two function arguments) count as the same.

    With `gemv-epilogues` (default), the elementwise op that consumes a
    GEMV product's output runs inside the GEMV kernel, at its store, and
    is erased: a decode step's residual add after `o_proj`, the sigmoid of
    the beta projection, the sum of the routed experts, shared experts and
    residual after the shared down projection. The op must be a
    `linalg.generic` over f32 or bf16 buffers of the output's shape
    (with bf16 activations it rounds the sums to the bf16 result; the
    kernel takes each buffer at its type) with identity maps,
    only parallel loops, one output, static strides (unit along n) and a
    body of pure arith and math ops whose outside values are constants; it
    must be the first op after the product to use the product's output
    buffer (an allocation). Its other inputs are read at the output's
    index; the product's sums are stored to C as well only when something
    after the op may read C. When the op also reads the output of a later
    GEMV product of the same A, shape and strides (an MLP's gate and up
    projections under SiTU), the two become one product of two weights:
    each warp computes row n of both, and the op combines them. A product
    of another vector (or of another stride or length) pairs the same
    way, each weight dotted with its own vector over its own k (a MoE
    layer's routed output projected up, plus the shared experts' down
    product): a later one moves up to the product as a group member's
    inputs do; an earlier one runs at the product instead, where nothing
    between them writes its vector or weight or touches its output (else
    its output is an extra buffer of the op, as before). The fused
    op runs where the launch does, so nothing between the product and the
    op may use either output or the op's output, or write what the op
    reads; the op's output must not be A, nor any buffer the launch's other
    products read or write. The definitions of its output and inputs move
    up like a group member's.

    With `gemv-weight-prefetch`, a GEMV kernel begins with a prologue of
    its own: thread 0 of each block issues `cp.async.bulk.prefetch.L2` for
    the block's rows of each weight (contiguous rows of a product without
    a batch), then the kernel waits for the grids before it
    (`griddepcontrol.wait`, which `kimi-gpu-grid-dependencies` then leaves
    alone). A weight is not written during a step, and a prefetch is only
    a hint that returns nothing, so nothing it does can be seen but its
    timing: launched early by programmatic dependent launch, the blocks
    stream their weights from HBM into L2 while the kernels before them
    (norms, a router, a convolution, which use little of the memory
    system) finish, and then read them at L2 speed.
  }];
  let options = [
    Option<"precision", "precision", "std::string", [{"f32"}],
           "Products of f32 operands in exact f32 (f32) or on TF32 tensor "
           "cores (tf32)">,
    Option<"bf16WeightProducts", "bf16-weight-products", "bool", "false",
           "A bf16 weight's product with f32 activations rounds the "
           "activations to bf16 and runs on bf16 tensor cores (else the "
           "weight is widened to f32)">,
    Option<"gemvMaxM", "gemv-max-m", "int64_t", "0",
           "Products of at most this many static rows of A (1..8) run as the "
           "generated GEMV kernel; 0: all through cuBLASLt">,
    Option<"gemvMaxGroup", "gemv-max-group", "int64_t", "8",
           "GEMV products of one A launched together, at most this many "
           "(1..8); 1: one launch per product">,
    Option<"smCount", "sm-count", "int64_t", "132",
           "Multiprocessors of the target GPU (132: an H200): a GEMV launch "
           "splits k over up to four warps a row group while it has fewer "
           "than 32 warps an SM">,
    Option<"gemvEpilogues", "gemv-epilogues", "bool", "true",
           "Fuse the elementwise op that consumes a GEMV product's output "
           "(and a second product it combines) into the GEMV kernel's store">,
    Option<"gemvWeightPrefetch", "gemv-weight-prefetch", "bool", "false",
           "Each GEMV block asks for its weight rows to be brought into L2 "
           "before it waits for the kernels before it (programmatic "
           "dependent launch), so the weights stream while those finish">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::func::FuncDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect",
    "::mlir::LLVM::LLVMDialect",
    "::mlir::NVVM::NVVMDialect",
  ];
}

def KimiGpuMapLoops : Pass<"kimi-gpu-map-loops", "::mlir::func::FuncOp"> {
  let summary = "Shape outermost scf.parallel loops into 1-D GPU grids";
  let description = [{
    Prepares the data-parallel loops of the GPU model target (from
    `convert-linalg-to-parallel-loops`) for `convert-parallel-loops-to-gpu`.
    Every outermost `scf.parallel` of a host function has all its dimensions
    collapsed into one linear index (row-major, so consecutive threads walk
    the innermost dimension and global accesses coalesce), is tiled by
    `block-size` (default 256) without min/max bounds (the inner loop guards
    its iterations), and gets the mapping `block x` for the outer loop and
    `thread x` for the inner one. Grids are therefore always 1-D and never
    exceed the hardware limit on y/z, whatever the rank of the loop. Loops
    nested in an outer `scf.parallel` stay sequential inside its threads.
  }];
  let options = [
    Option<"blockSize", "block-size", "int64_t", "256",
           "Threads per block of the generated kernels">,
  ];
  let dependentDialects = [
    "::mlir::affine::AffineDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::scf::SCFDialect",
  ];
}

def KimiGpuWarpReductions
    : Pass<"kimi-gpu-warp-reductions", "::mlir::func::FuncOp"> {
  let summary = "Spread long reduction loops over the 32 lanes of a warp";
  let description = [{
    `convert-linalg-to-parallel-loops` leaves a reduction as an `scf.for`
    inside each iteration of the `scf.parallel` over the outputs, and the
    GPU model target runs every output in one thread: a decode step's
    routed-expert products, norms and matrix-vector products then loop over
    1,024-8,192 elements in a single thread, reading memory with a stride.
    This pass rewrites an outermost `scf.parallel` whose body is one such
    loop, of static trip count at least `min-trip-count` or of dynamic trip
    count (a sequence or cache length: attention's sums over keys), that
    accumulates
    into memory (`store(combine(load(M[I]), x), M[I])` with indices `I`
    fixed in the loop, f32 values, `combine` one of `arith.addf`, `arith.maximumf`,
    `arith.maxnumf`, several accumulators allowed, no other access to `M`,
    everything else pure or loads) into a loop with one more, innermost
    dimension of 32 lanes: lane `l` accumulates iterations `l, l + 32, ...`
    in registers, a butterfly of `gpu.shuffle xor` combines the lanes, and
    lane 0 combines the result into memory once. `kimi-gpu-map-loops` then
    linearises the lanes innermost, so the 32 lanes of one output are one
    warp and read consecutive elements. Sums are taken in another order
    (f32 rounding differs, by design within f32 tolerance).

    When the loop has at most `unroll-max-outputs` outputs (static extents),
    each lane takes `unroll` iterations per trip (`l, l + 32, ...,
    l + 32 (unroll - 1)`), each into its own partial result, then the
    remaining iterations one per trip; the partials are combined in a fixed
    order before the butterfly. Without it a lane waits one memory latency
    per iteration, and a decode step's reductions have so few outputs (one
    token: a norm or an AttnRes score is one warp) that this latency is the
    kernel's time: a 2,048-element dot product took 32 us in one warp. With
    many outputs the GPU's other warps hide the latency already, and
    unrolling slowed k3-mini's decode expert products (8,192 outputs) from
    41 to 65 us. The factor halves while the loop has fewer than
    `64 unroll` static iterations. Results stay deterministic: the order
    depends only on the shapes. `kimi-compile --gpu-reduction-unroll` sets
    it for GPU models: k3-mini's batch-1 decode step took 5.04 / 4.55 /
    4.88 ms of device time with 8 / 16 / 32 (docs/perf/model.md).
  }];
  let options = [
    Option<"minTripCount", "min-trip-count", "int64_t", "128",
           "Shortest reduction loop to spread over a warp">,
    Option<"unroll", "unroll", "int64_t", "8",
           "Iterations a lane keeps in flight per trip (1: none)">,
    Option<"unrollMaxOutputs", "unroll-max-outputs", "int64_t", "1024",
           "Unroll only loops with at most this many outputs">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::scf::SCFDialect",
  ];
}

def KimiGpuRegisterAccumulators
    : Pass<"kimi-gpu-register-accumulators", "::mlir::func::FuncOp"> {
  let summary = "Keep a sequential loop's accumulator in a register";
  let description = [{
    `convert-linalg-to-parallel-loops` lowers a reduction to an `scf.for`
    whose every trip loads the output element, combines, and stores it
    back. `kimi-gpu-warp-reductions` spreads the long f32 ones over a warp;
    the rest (the integer counts, ranks and prefix sums of the token-sorted
    experts, loops over 8-128 slots) stay in one thread, and on the GPU
    each trip then waits for its own store to come back from L2: a
    128-trip count took tens of microseconds, several times per MoE layer
    and prefill chunk.

    This pass gives such a loop its accumulator as an iteration argument:
    the element is loaded once before the loop, carried in a register, and
    stored once after it. It applies to an `scf.for` whose body (at its top
    level) loads `M[I]` and later stores to `M[I]`, with `M` and `I`
    defined outside the loop, where that store is the only write of the
    body and that load the only access to `M` in it; everything else in the
    body must be side-effect free, loads, or nested `scf.for` / `scf.if`
    that only load. Inner loops go first, so a nest of reductions becomes
    one load and one store. The values computed are the same, in the same
    order; only the memory traffic goes. Other buffers read in the loop are
    taken not to alias `M`, as the linalg ops that made the loop
    guarantee.
  }];
  let dependentDialects = [
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
  ];
}

def KimiGpuSerialKernels
    : Pass<"kimi-gpu-serial-kernels", "::mlir::ModuleOp"> {
  let summary = "Run leftover host accesses of device memory as one-thread kernels";
  let description = [{
    In the GPU model target every buffer is device memory, so host code must
    not load or store memref elements. After `convert-parallel-loops-to-gpu`
    the data-parallel work is in `gpu.launch` regions; what remains are
    element accesses outside them (linalg ops without parallel dimensions,
    such as whole-tensor reductions, and scalar fills of 0-d buffers). This
    pass wraps each such access, together with the outermost enclosing
    `scf.for`/`scf.if` that contains no launch, allocation or call, into a
    `gpu.launch` of one block of one thread. An access whose result is used
    by host code after the wrapped region (host control flow that depends
    on device data) is an error naming the op: it would need a
    device-to-host copy and a synchronisation in the middle of an entry.

    The exception is `kimi_host_read_i32`, through which host code reads a
    value it needs to size what comes next (the largest expert count of
    token-sorted experts): its body becomes a call of `kimi_gpu_read_i32`
    with the element's address, for which the runtime waits for the
    model's stream and copies the four bytes to the host. One such read per
    sorted-experts layer and step is the only synchronisation inside an
    entry.

    The bookkeeping of ownership-based deallocation (buffers of `index`
    pointers and `i1` ownership flags) stays on the host: its
    `memref.alloc`s become `memref.alloca`s (their deallocs are dropped) and
    its accesses are left in host code. A buffer of those element types
    that a kernel uses (directly or through a view) is model data instead,
    such as the expert masks of an expert-parallel partition, and stays in
    device memory like any other.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::func::FuncDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::memref::MemRefDialect",
  ];
}

def KimiGpuMergeKernelModules
    : Pass<"kimi-gpu-merge-kernel-modules", "::mlir::ModuleOp"> {
  let summary = "Put every kernel of a model into one gpu.module";
  let description = [{
    Kernel outlining (`gpu-kernel-outlining`) gives every kernel its own
    `gpu.module`, and each module becomes a binary of its own: one ptxas
    run at compile time and one module load at run time per kernel. A GPU
    model has hundreds of kernels, so this pass moves them all into one
    module, `@kimi_kernels`, and points every `gpu.launch_func` at its new
    place.

    Names repeat across outlined modules (`@f_kernel` in `@f_kernel` and in
    `@f_kernel_0`), so each kernel takes its module's unique name; a module
    of several kernels (the generated ones, such as
    `@kimi_kda_0::@kda_prep`) prefixes their names with its own
    (`@kimi_kda_0_kda_prep`). Other symbols of a module (the shared-memory
    globals of generated kernels) are prefixed the same way, with their
    uses inside it. Attributes of the merged modules (such as
    `kimi.waits_grid_dependencies`) are not kept: run this before the
    passes that set them.
  }];
  let dependentDialects = ["::mlir::gpu::GPUDialect"];
}

def KimiGpuGridDependencies
    : Pass<"kimi-gpu-grid-dependencies", "::mlir::ModuleOp"> {
  let summary = "Let each kernel be launched before its predecessor ends (PDL)";
  let description = [{
    A decode step of a GPU model is hundreds of small kernels in a row on
    one stream, and between two of them the second kernel's launch (grid
    setup, block scheduling, its prologue) normally starts only once the
    first has completed. Hopper's programmatic dependent launch overlaps
    the two: a kernel launched with programmatic stream serialization may
    start while its predecessor still runs, and waits for it with
    `griddepcontrol.wait`.

    This pass makes every kernel of every `gpu.module` safe to launch that
    way: its entry block begins with

    ```
    nvvm.griddepcontrol wait
    nvvm.griddepcontrol launch_dependents
    ```

    The wait comes before any access to memory, so the kernel sees every
    write of its predecessor, and its predecessor has seen every write of
    the one before (each kernel waited in turn): the order of the stream
    holds transitively. The early `launch_dependents` lets the next kernel
    be scheduled as soon as every block of this one has passed its wait;
    it cannot run ahead, since its own wait returns only once this kernel
    has completed. Launches that do not ask for the overlap (cuBLASLt's,
    copies, a runtime without it) see ordinary stream order, and on the
    launch side nothing changes unless the runtime asks: the pass marks
    each `gpu.module` with the unit attribute
    `kimi.waits_grid_dependencies`, which the GPU model target records in
    the artifact (`Kernel.waits_grid_dependencies`), and only then does the
    runtime set the launch attribute (docs/runtime-abi.md). Kernels whose
    entry block already waits are left as they are: those beginning with
    the wait, and those whose generator put a prologue before it that
    reads nothing a grid writes (the GEMV kernel's L2 prefetches of its
    weights, `kimi-gpu-gemm-calls{gemv-weight-prefetch}`). Needs sm_90 or
    later (PTX ISA 7.8).
  }];
  let dependentDialects = [
    "::mlir::gpu::GPUDialect",
    "::mlir::NVVM::NVVMDialect",
  ];
}

#endif // KIMI_LOWERING_PASSES_TD
