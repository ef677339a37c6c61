//===- chat_format.cpp - The released Kimi chat encoding ------------------===//

#include "runtime/text/chat_format.h"
#include "runtime/support/text.h"

namespace kimi::rt {

const char *const kKimiDefaultSystemPrompt =
    "You are Kimi, an AI assistant created by Moonshot AI.";

namespace {

StatusOr<int32_t> marker(const Tokenizer &t, const char *text) {
  int32_t id = t.specialId(text);
  if (id < 0)
    return invalidArgument(std::string("the tokenizer has no special token ") + text +
                           ", which the chat format needs");
  return id;
}

} // namespace

StatusOr<int32_t> chatEndToken(const Tokenizer &tokenizer) {
  return marker(tokenizer, "<|im_end|>");
}

Status encodeChat(const Tokenizer &t, const std::vector<ChatMessage> &messages,
                  const ChatOptions &options, std::vector<int32_t> &out) {
  KIMI_ASSIGN_OR_RETURN(int32_t system, marker(t, "<|im_system|>"));
  KIMI_ASSIGN_OR_RETURN(int32_t user, marker(t, "<|im_user|>"));
  KIMI_ASSIGN_OR_RETURN(int32_t assistant, marker(t, "<|im_assistant|>"));
  KIMI_ASSIGN_OR_RETURN(int32_t middle, marker(t, "<|im_middle|>"));
  KIMI_ASSIGN_OR_RETURN(int32_t end, marker(t, "<|im_end|>"));
  auto append = [&](int32_t role, const std::string &name, const std::string &content,
                    size_t index) -> Status {
    out.push_back(role);
    Status s = t.encode(name, SpecialText::kAsText, out);
    if (s.isOk()) {
      out.push_back(middle);
      s = t.encode(content, SpecialText::kAsText, out);
    }
    if (!s.isOk())
      return s.addContext("message " + std::to_string(index));
    out.push_back(end);
    return Status::ok();
  };
  if ((messages.empty() || messages[0].role != "system") &&
      !options.defaultSystemPrompt.empty())
    KIMI_RETURN_IF_ERROR(append(system, "system", options.defaultSystemPrompt, 0));
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage &m = messages[i];
    int32_t role;
    if (m.role == "system" || m.role == "tool")
      role = system;
    else if (m.role == "user")
      role = user;
    else if (m.role == "assistant")
      role = assistant;
    else
      return invalidArgument("message " + std::to_string(i) + ": unknown role " +
                             quoted(m.role, 40) +
                             " (system, user, assistant or tool)");
    KIMI_RETURN_IF_ERROR(append(role, m.name.empty() ? m.role : m.name, m.content, i));
  }
  if (options.addGenerationPrompt) {
    out.push_back(assistant);
    KIMI_RETURN_IF_ERROR(t.encode("assistant", SpecialText::kAsText, out));
    out.push_back(middle);
  }
  return Status::ok();
}

} // namespace kimi::rt
