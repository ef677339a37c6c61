//===- BpeTrainer.h - Learning a byte-level BPE vocabulary ------*- C++ -*-===//
//
// Builds a tiktoken-format vocabulary from a corpus, so that tests and the
// demo have a real tokenizer without the internet: the corpus is split by
// the pre-tokenizer expression, ranks 0-255 are the single bytes, and each
// further rank is the most frequent adjacent pair of the current tokens
// (ties to the smaller pair of ids), merged everywhere before the next one
// is chosen. Deterministic for a given corpus and expression.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_TOOLS_KIMI_TOKENIZE_BPETRAINER_H
#define KIMI_TOOLS_KIMI_TOKENIZE_BPETRAINER_H

#include "runtime/support/status.h"
#include "runtime/text/bpe_vocab.h"
#include "runtime/text/pretokenizer.h"

#include <string_view>

namespace kimi::tools {

/// A vocabulary of `size` tokens (>= 256) learnt from `corpus`, which must
/// be valid UTF-8. Fewer merges are made when no pair occurs twice.
rt::StatusOr<rt::BpeVocab> trainBpe(std::string_view corpus,
                                    const rt::PreTokenizer &pre, uint32_t size);

} // namespace kimi::tools

#endif // KIMI_TOOLS_KIMI_TOKENIZE_BPETRAINER_H
