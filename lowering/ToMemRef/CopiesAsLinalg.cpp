//===- CopiesAsLinalg.cpp - memref.copy as linalg.copy --------------------===//

#include "lowering/Passes.h"

namespace kimi {
#define GEN_PASS_DEF_KIMICOPIESASLINALG
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;

namespace {
struct KimiCopiesAsLinalg
    : kimi::impl::KimiCopiesAsLinalgBase<KimiCopiesAsLinalg> {
  void runOnOperation() override {
    getOperation().walk([](memref::CopyOp copy) {
      OpBuilder b(copy);
      linalg::CopyOp::create(b, copy.getLoc(), copy.getSource(),
                             copy.getTarget());
      copy.erase();
    });
  }
};
} // namespace
