//===- chat_format.h - The released Kimi chat encoding ----------*- C++ -*-===//
//
// A conversation as the released Kimi chat template writes it: each message
// is a role marker, the speaker's name, <|im_middle|>, the content and
// <|im_end|>:
//   <|im_system|>system<|im_middle|>You are Kimi, ...<|im_end|>
//   <|im_user|>user<|im_middle|>Hello<|im_end|>
//   <|im_assistant|>assistant<|im_middle|>
// system -> <|im_system|>, user -> <|im_user|>, assistant ->
// <|im_assistant|>, tool -> <|im_system|> (named "tool"). A conversation
// that does not open with a system message gets the template's default
// one. The generation prompt is the assistant's marker, name and
// <|im_middle|>; the answer ends with <|im_end|>. Names and contents are
// encoded as plain text, so a message cannot forge a marker.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_TEXT_CHAT_FORMAT_H
#define KIMI_RUNTIME_TEXT_CHAT_FORMAT_H

#include "runtime/support/status.h"
#include "runtime/text/tokenizer.h"

#include <string>
#include <vector>

namespace kimi::rt {

/// The released template's system prompt for conversations without one.
extern const char *const kKimiDefaultSystemPrompt;

struct ChatMessage {
  std::string role; // system, user, assistant or tool
  std::string content;
  std::string name; // the speaker's name; empty: the role
};

struct ChatOptions {
  bool addGenerationPrompt = true;
  /// Used when the first message is not a system message; empty: none.
  std::string defaultSystemPrompt = kKimiDefaultSystemPrompt;
};

/// Appends the ids of `messages`. The tokenizer must have the five markers
/// (<|im_system|>, <|im_user|>, <|im_assistant|>, <|im_middle|>,
/// <|im_end|>); an unknown role or invalid UTF-8 is an error naming the
/// message.
Status encodeChat(const Tokenizer &tokenizer, const std::vector<ChatMessage> &messages,
                  const ChatOptions &options, std::vector<int32_t> &out);

/// The id of <|im_end|>, which ends an assistant's answer, or an error.
StatusOr<int32_t> chatEndToken(const Tokenizer &tokenizer);

} // namespace kimi::rt

#endif // KIMI_RUNTIME_TEXT_CHAT_FORMAT_H
