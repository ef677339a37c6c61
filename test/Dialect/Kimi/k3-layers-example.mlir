// The example of README command (1) must stay valid K3 IR.
// RUN: kimi-opt %kimi_src_root/models/examples/k3-layers.mlir | FileCheck %s
// RUN: kimi-opt %kimi_src_root/models/examples/k3-layers.mlir | kimi-opt --mlir-print-op-generic | kimi-opt | FileCheck %s

// CHECK: kimi.weight @"model.layers.1.mlp.experts.{e}.gate_proj.weight" : tensor<896x3072x3584xf4E2M1FN>
// CHECK-LABEL: func.func @layer_1_kda
// CHECK: kimi.attn_res [%{{.*}}, %{{.*}}] query
// CHECK-COUNT-3: kimi.short_conv silu
// CHECK: kimi.kda_gate lower_bound lower = -5.000000e+00
// CHECK: kimi.kda {{.*}} initial_state
// CHECK: kimi.gated_rms_norm
// CHECK: kimi.router {{.*}} top_k(16) renormalize
// CHECK: kimi.latent_moe situ {{.*}} scales(
// CHECK: kimi.situ_glu
// CHECK-LABEL: func.func @layer_3_mla_attention
// CHECK: kimi.mla {{.*}} gate {{.*}} : (tensor<1x8192x96x192xbf16>, tensor<1x8192x512xbf16>, tensor<1x8192x64xbf16>, tensor<24576x512xbf16>, tensor<1x8192x96x128xbf16>) -> tensor<1x8192x96x128xbf16>
