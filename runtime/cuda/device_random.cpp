//===- device_random.cpp - random weights generated on the device --------===//

#include "runtime/cuda/device_random.h"

#include <algorithm>

namespace kimi::rt {

namespace {
// kimi_random_fill(out, n, state, offset, spread, bf16): a grid-stride loop
// over i < n. Each step is the host's operation for operation: integer
// splitmix64, then mul/add with explicit .rn (no contraction into an FMA,
// which would round differently from the host's separate operations).
constexpr const char *kPtx = R"(.version 7.0
.target sm_80
.address_size 64

.visible .entry kimi_random_fill(
    .param .u64 kimi_random_fill_out,
    .param .u64 kimi_random_fill_n,
    .param .u64 kimi_random_fill_state,
    .param .f64 kimi_random_fill_offset,
    .param .f64 kimi_random_fill_spread,
    .param .u32 kimi_random_fill_bf16)
{
    .reg .pred %p<3>;
    .reg .b16 %h<2>;
    .reg .b32 %r<8>;
    .reg .f32 %f<2>;
    .reg .b64 %rd<12>;
    .reg .f64 %fd<6>;

    ld.param.u64 %rd1, [kimi_random_fill_out];
    ld.param.u64 %rd2, [kimi_random_fill_n];
    ld.param.u64 %rd3, [kimi_random_fill_state];
    ld.param.f64 %fd1, [kimi_random_fill_offset];
    ld.param.f64 %fd2, [kimi_random_fill_spread];
    ld.param.u32 %r1, [kimi_random_fill_bf16];
    cvta.to.global.u64 %rd1, %rd1;
    setp.ne.u32 %p2, %r1, 0;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mov.u32 %r5, %nctaid.x;
    mul.wide.u32 %rd4, %r2, %r3;
    cvt.u64.u32 %rd5, %r4;
    add.u64 %rd4, %rd4, %rd5;
    mul.wide.u32 %rd6, %r5, %r3;
$L_loop:
    setp.ge.u64 %p1, %rd4, %rd2;
    @%p1 bra $L_done;
    add.u64 %rd7, %rd4, 1;
    mul.lo.u64 %rd7, %rd7, -7046029254386353131;
    add.u64 %rd7, %rd7, %rd3;
    shr.u64 %rd8, %rd7, 30;
    xor.b64 %rd7, %rd7, %rd8;
    mul.lo.u64 %rd7, %rd7, -4658895280553007687;
    shr.u64 %rd8, %rd7, 27;
    xor.b64 %rd7, %rd7, %rd8;
    mul.lo.u64 %rd7, %rd7, -7723592293110705685;
    shr.u64 %rd8, %rd7, 31;
    xor.b64 %rd7, %rd7, %rd8;
    shr.u64 %rd8, %rd7, 11;
    cvt.rn.f64.u64 %fd3, %rd8;
    mul.rn.f64 %fd3, %fd3, 0d3CA0000000000000;
    mul.rn.f64 %fd4, %fd3, 0d4000000000000000;
    sub.rn.f64 %fd4, %fd4, 0d3FF0000000000000;
    mul.rn.f64 %fd4, %fd2, %fd4;
    add.rn.f64 %fd4, %fd1, %fd4;
    cvt.rn.f32.f64 %f1, %fd4;
    @%p2 bra $L_bf16;
    shl.b64 %rd9, %rd4, 2;
    add.u64 %rd10, %rd1, %rd9;
    st.global.f32 [%rd10], %f1;
    bra.uni $L_next;
$L_bf16:
    cvt.rn.bf16.f32 %h1, %f1;
    shl.b64 %rd9, %rd4, 1;
    add.u64 %rd10, %rd1, %rd9;
    st.global.b16 [%rd10], %h1;
$L_next:
    add.u64 %rd4, %rd4, %rd6;
    bra.uni $L_loop;
$L_done:
    ret;
}
)";
constexpr unsigned kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;
} // namespace

StatusOr<std::unique_ptr<DeviceRandomFill>>
DeviceRandomFill::load(const CudaDevice &device) {
  std::unique_ptr<DeviceRandomFill> f(new DeviceRandomFill());
  KIMI_ASSIGN_OR_RETURN(f->module_,
                        CudaModule::load(device, std::string(kPtx), "kimi_random_fill"));
  KIMI_ASSIGN_OR_RETURN(f->kernel_, f->module_->kernel("kimi_random_fill"));
  return f;
}

Status DeviceRandomFill::fill(const CudaStream &stream, cuda::CUdeviceptr dst,
                              int64_t count, DType dtype,
                              const RandomWeightRecipe &recipe) const {
  if (dtype != DType::kF32 && dtype != DType::kBF16)
    return invalidArgument("random weights on the device: dtype " +
                           dtypeName(dtype) + " (only f32 and bf16 are generated)");
  if (count <= 0)
    return Status::ok();
  uint64_t n = uint64_t(count), state = recipe.state;
  double offset = recipe.offset, spread = recipe.spread;
  uint32_t bf16 = dtype == DType::kBF16;
  const unsigned blocks = unsigned(
      std::clamp<int64_t>((count + kThreads - 1) / kThreads, 1, kMaxBlocks));
  return kernel_.launch(Dim3{blocks, 1, 1}, Dim3{kThreads, 1, 1}, 0, &stream,
                        {&dst, &n, &state, &offset, &spread, &bf16});
}

} // namespace kimi::rt
