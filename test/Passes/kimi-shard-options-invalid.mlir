// kimi-shard option errors.
// RUN: not kimi-opt %s --pass-pipeline="builtin.module(kimi-shard{grid=4 strategy=xp})" 2>&1 | FileCheck %s --check-prefix=STRATEGY
// RUN: not kimi-opt %s --pass-pipeline="builtin.module(kimi-shard{grid=4,4,4 strategy=tp})" 2>&1 | FileCheck %s --check-prefix=GRID
// RUN: not kimi-opt %s --pass-pipeline="builtin.module(kimi-shard{grid=4 strategy=dp})" 2>&1 | FileCheck %s --check-prefix=DP
// STRATEGY: kimi-shard: unknown strategy 'xp' (expected tp, ep, dp or sp)
// GRID: kimi-shard: grid must be one or two positive sizes (grid=8 or grid=8,8)
// DP: 'func.func' op strategy dp splits dim 0 of argument 0 ('tensor<1x8xi32>') over 4 devices: not divisible

func.func @prefill(%t: tensor<1x8xi32>) -> tensor<1x8xi32> {
  return %t : tensor<1x8xi32>
}
