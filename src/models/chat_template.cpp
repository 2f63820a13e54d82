// Chat prompt formats, written out from each family's published template.
#include "luminal/models/chat_template.hpp"

#include "luminal/error.hpp"

namespace luminal::models {

ChatFormat chat_format_for(const std::string& arch) {
  if (arch.rfind("gemma", 0) == 0) return ChatFormat::Gemma;
  if (arch.rfind("qwen", 0) == 0) return ChatFormat::ChatML;
  if (arch == "llama") return ChatFormat::Llama3;
  if (arch == "mistral" || arch == "llama2") return ChatFormat::Llama2;
  LUM_FAIL() << "no chat template known for architecture '" << arch << "'";
}

std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages) {
  std::string out;
  switch (format) {
    case ChatFormat::Gemma: {
      // Gemma has no system role: a system message is prepended to the first user turn.
      std::string system;
      for (const ChatMessage& m : messages) {
        if (m.role == "system") {
          system += m.content + "\n\n";
          continue;
        }
        const std::string role = m.role == "assistant" ? "model" : "user";
        out += "<start_of_turn>" + role + "\n" + (role == "user" ? system : "") + m.content +
               "<end_of_turn>\n";
        if (role == "user") system.clear();
      }
      return out + "<start_of_turn>model\n";
    }
    case ChatFormat::ChatML:
      for (const ChatMessage& m : messages)
        out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      return out + "<|im_start|>assistant\n";
    case ChatFormat::Llama3:
      for (const ChatMessage& m : messages)
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
      return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
    case ChatFormat::Llama2: {
      std::string system;
      for (const ChatMessage& m : messages) {
        if (m.role == "system") {
          system = "<<SYS>>\n" + m.content + "\n<</SYS>>\n\n";
        } else if (m.role == "user") {
          // Every turn after the first starts with its own BOS token.
          out +=
              (out.empty() ? "" : "<s>") + std::string("[INST] ") + system + m.content + " [/INST]";
          system.clear();
        } else {
          out += " " + m.content + " </s>";
        }
      }
      return out;
    }
  }
  return out;
}

std::string end_of_turn(ChatFormat format) {
  switch (format) {
    case ChatFormat::Gemma:
      return "<end_of_turn>";
    case ChatFormat::ChatML:
      return "<|im_end|>";
    case ChatFormat::Llama3:
      return "<|eot_id|>";
    case ChatFormat::Llama2:
      return "</s>";
  }
  return "";
}

}  // namespace luminal::models
