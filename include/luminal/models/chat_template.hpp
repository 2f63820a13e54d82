// Chat prompt formats of the supported model families.
#pragma once

#include <string>
#include <vector>

namespace luminal::models {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

enum class ChatFormat { Gemma, ChatML, Llama3, Llama2 };

/// The format a GGUF architecture name uses (gemma*, qwen* -> ChatML, llama (3), mistral
/// and llama2 -> [INST]); throws luminal::Error for an unknown one.
ChatFormat chat_format_for(const std::string& architecture);

/// Renders the conversation and opens the assistant's turn. The BOS token is not
/// included (the tokenizer adds it).
std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages);

/// The text that ends an assistant turn in `format`.
std::string end_of_turn(ChatFormat format);

}  // namespace luminal::models
