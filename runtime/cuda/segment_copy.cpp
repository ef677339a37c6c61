//===- segment_copy.cpp - Many device copies in one kernel launch ---------===//

#include "runtime/cuda/segment_copy.h"

#include <algorithm>

namespace kimi::rt {

namespace {
// kimi_copy_segments(table, count): block row y copies segment y of the
// table {dst, src, words} (u64 each), 16 bytes a thread per step, the
// grid's x blocks striding over the words.
constexpr const char *kPtx = R"(.version 7.0
.target sm_70
.address_size 64

.visible .entry kimi_copy_segments(
    .param .u64 kimi_copy_segments_table,
    .param .u32 kimi_copy_segments_count)
{
    .reg .pred %p<3>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<16>;

    ld.param.u64 %rd1, [kimi_copy_segments_table];
    ld.param.u32 %r1, [kimi_copy_segments_count];
    mov.u32 %r2, %ctaid.y;
    setp.ge.u32 %p1, %r2, %r1;
    @%p1 bra $L_done;
    cvta.to.global.u64 %rd1, %rd1;
    mul.wide.u32 %rd2, %r2, 24;
    add.s64 %rd3, %rd1, %rd2;
    ld.global.nc.u64 %rd4, [%rd3];
    ld.global.nc.u64 %rd5, [%rd3+8];
    ld.global.nc.u64 %rd6, [%rd3+16];
    cvta.to.global.u64 %rd4, %rd4;
    cvta.to.global.u64 %rd5, %rd5;
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mov.u32 %r6, %nctaid.x;
    mad.lo.s32 %r7, %r3, %r4, %r5;
    cvt.u64.u32 %rd7, %r7;
    mul.lo.s32 %r8, %r6, %r4;
    cvt.u64.u32 %rd8, %r8;
$L_loop:
    setp.ge.u64 %p2, %rd7, %rd6;
    @%p2 bra $L_done;
    shl.b64 %rd9, %rd7, 4;
    add.s64 %rd10, %rd5, %rd9;
    ld.global.v4.u32 {%r10, %r11, %r12, %r13}, [%rd10];
    add.s64 %rd11, %rd4, %rd9;
    st.global.v4.u32 [%rd11], {%r10, %r11, %r12, %r13};
    add.s64 %rd7, %rd7, %rd8;
    bra.uni $L_loop;
$L_done:
    ret;
}
)";
constexpr unsigned kThreads = 256;
// Blocks a segment at most: a 1 MB state is then four words a thread.
constexpr size_t kMaxBlocks = 64;
} // namespace

bool SegmentCopy::fits(const Segment &s) {
  return s.dst % 16 == 0 && s.src % 16 == 0 && s.bytes % 16 == 0;
}

std::vector<uint64_t> SegmentCopy::table(const std::vector<Segment> &segments) {
  std::vector<uint64_t> t;
  t.reserve(segments.size() * 3);
  for (const Segment &s : segments)
    t.insert(t.end(), {uint64_t(s.dst), uint64_t(s.src), uint64_t(s.bytes / 16)});
  return t;
}

StatusOr<std::unique_ptr<SegmentCopy>> SegmentCopy::load(const CudaDevice &device) {
  std::unique_ptr<SegmentCopy> copy(new SegmentCopy());
  KIMI_ASSIGN_OR_RETURN(copy->module_,
                        CudaModule::load(device, std::string(kPtx), "kimi_copy_segments"));
  KIMI_ASSIGN_OR_RETURN(copy->kernel_, copy->module_->kernel("kimi_copy_segments"));
  return copy;
}

Status SegmentCopy::launch(const CudaStream &stream, cuda::CUdeviceptr table,
                           uint32_t count, size_t largestBytes) const {
  if (count == 0)
    return Status::ok();
  const size_t words = largestBytes / 16;
  const unsigned blocks =
      unsigned(std::clamp<size_t>((words + kThreads - 1) / kThreads, 1, kMaxBlocks));
  void *args[] = {&table, &count};
  return kernel_.launch(Dim3{blocks, count, 1}, Dim3{kThreads, 1, 1}, 0, &stream,
                        {args[0], args[1]});
}

} // namespace kimi::rt
