#!/usr/bin/env bash
# Here (no GPU needed): builds the GPU-side programs and compiles the k3-mini
# artifacts that bench/model/run-device.sh times on an H200, into gpucheck/
# (ignored by git; carry it to the device machine). Artifacts are gzipped.
#
#   bench/model/prepare-device.sh [--kl48] [VARIANT ...]
#
# A variant is NAME=kimi-compile flags; the defaults are the configurations
# docs/perf/model.md reports. Every artifact has the KDA and MLA kernels and
# TF32 products unless its flags say otherwise (`--gpu-mla-kernels=false`),
# and computes at sm_90a's default types (bf16 activations, weights at the
# release's types); the f32 reference is `--activations f32 --weights f32
# --gpu-bf16-weight-products=false`.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${KIMI_BUILD_DIR:-$root/build}
out=$root/gpucheck
cmake --build "$build" -j "$(nproc)" --target kimi-compile kimi-bench-model \
  kimi-gpu-model-tests kimi-gpu-blas-tests kimi-gpu-kernel-tests kimi-run \
  kimi-runtime-cuda-tests kimi-k3-tiny-gpu-artifacts kimi-k3-tiny-f32-gpu-artifacts kimi-k3-mini-gpu-artifacts \
  kimi-k3-tiny-kda-gpu-artifacts kimi-mla-gpu-artifacts
mkdir -p "$out/models" "$out/kda" "$out/attn_res" "$out/moe"
cp "$build/bin/kimi-bench-model" "$build/bin/kimi-run" "$out/"
cp "$build/test/gpu/kimi-gpu-model-tests" "$build/test/gpu/kimi-gpu-blas-tests" \
  "$build/test/gpu/kimi-gpu-kernel-tests" \
  "$build/test/runtime/kimi-runtime-cuda-tests" "$out/"
cp "$build"/test/gpu/kda/*.kimi "$out/kda/"
cp "$build"/test/gpu/attn_res/*.kimi "$out/attn_res/"
cp "$build"/test/gpu/moe/*.kimi "$out/moe/"
cp -L "$build/runtime/libkimi_runtime.so.0" "$out/"
cp "$build"/test/gpu/models/k3-tiny-*.kimi "$build"/test/gpu/models/k3-mini-*.kimi \
  "$out/models/"

common="--target sm_90a --gpu-kda-kernels --gpu-mla-kernels --gpu-matmul-precision=tf32"
# --kl48: also the full-size Kimi-Linear-48B-A3B (chunk 2048, and batch 64),
# which run-device.sh times with weights generated on the device.
kl48=0
if [ "${1:-}" = "--kl48" ]; then kl48=1; shift; fi
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(
  "c256="
  "c1024=--prefill-chunk 1024"
  "b64=--batch 64"
)
pids=()
for v in "${variants[@]}"; do
  name=${v%%=*} flags=${v#*=}
  # shellcheck disable=SC2086
  "$build/bin/kimi-compile" "$root/models/k3-mini.json" $common $flags \
    -o "$out/k3-mini-$name.kimi" &
  pids+=($!)
  # Two at a time: the machine has two cores.
  if [ ${#pids[@]} -ge 2 ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p"; done
if [ $kl48 = 1 ]; then
  # shellcheck disable=SC2086
  "$build/bin/kimi-compile" "$root/models/kimi-linear-48b-a3b.json" $common \
    --prefill-chunk 2048 -o "$out/kimi-linear-48b-c2048.kimi" &
  # shellcheck disable=SC2086
  "$build/bin/kimi-compile" "$root/models/kimi-linear-48b-a3b.json" $common \
    --batch 64 -o "$out/kimi-linear-48b-b64.kimi"
  wait
fi
# Artifacts are mostly PTX text: compressed they travel at an eighth of the
# size (the device call carries 64 MiB at most); run-device.sh unpacks them.
gzip -f "$out"/*.kimi "$out"/models/*.kimi "$out"/kda/*.kimi "$out"/attn_res/*.kimi \
  "$out"/moe/*.kimi
du -sh "$out"
